package memstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestRecoverErrorsNameNoClientKey: Recover's and Sweep's errors can be
// logged as they are, so a resolver's error that names the key the way a
// caller has it at hand, by its client part (an order number), is given
// the key's hash too; only the whole key string used to be replaced.
func TestRecoverErrorsNameNoClientKey(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	k, _ := idem.NewKey("acme", "create-order", "ORDER-4242-secret")
	if _, err := s.Begin(t.Context(), k, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	resolve := func(_ context.Context, l *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, fmt.Errorf("warehouse API: no shipment for order %q", l.Key.ClientKey())
	}
	_, err := idem.Recover(t.Context(), s, k, resolve)
	t.Logf("Recover: %v", err)
	if err != nil && strings.Contains(err.Error(), k.ClientKey()) {
		t.Errorf("Recover's error carries the client key: %v", err)
	}
}

// TestRecoverErrorsNameNoEscapedClientKey: a resolver names a client key
// the way Go code usually does, quoted with %q or inside the URL of the
// call that failed, and so escaped; the redaction replaced only the key
// as written, and the escaped client key reached the log.
func TestRecoverErrorsNameNoEscapedClientKey(t *testing.T) {
	for _, tc := range []struct {
		name, client string
		mention      func(string) string
		leaked       func(string) string
	}{
		{"quoted", `ORDER "4242" secret`, func(ck string) string { return fmt.Sprintf("no shipment for order %q", ck) },
			func(ck string) string { q := strconv.Quote(ck); return q[1 : len(q)-1] }},
		{"url", "ORDER 4242/secret", func(ck string) string {
			return fmt.Sprintf(`Get "https://warehouse.example/orders/%s": context deadline exceeded`, url.PathEscape(ck))
		}, url.PathEscape},
		// url.JoinPath escapes a path as net/url does, keeping its '/'.
		{"joined url", "ORDER 4242/secret", func(ck string) string {
			u, _ := url.JoinPath("https://warehouse.example/orders", ck)
			return (&url.Error{Op: "Get", URL: u, Err: context.DeadlineExceeded}).Error()
		}, func(string) string { return "ORDER%204242/secret" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := idemtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
			k, err := idem.NewKey("acme", "create-order", tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Begin(t.Context(), k, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Hour)
			resolve := func(_ context.Context, l *idem.Lease) (idem.Outcome, error) {
				return idem.Outcome{}, fmt.Errorf("warehouse API: %s", tc.mention(l.Key.ClientKey()))
			}
			_, err = idem.Recover(t.Context(), s, k, resolve)
			t.Logf("Recover: %v", err)
			if err == nil {
				t.Fatal("Recover: nil error, want the resolver's")
			}
			if leak := tc.leaked(k.ClientKey()); strings.Contains(err.Error(), leak) {
				t.Errorf("Recover's error carries the client key %q (as %q): %v", k.ClientKey(), leak, err)
			}
		})
	}
}
