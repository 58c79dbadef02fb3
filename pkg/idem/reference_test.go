package idem_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestReferenceIsFixed: a reference already sent to a provider must be
// derived the same way by every later version, or a retry after an
// upgrade would charge again. The vector is Python's hashlib.sha256.
func TestReferenceIsFixed(t *testing.T) {
	key, err := idem.NewKey("acme", "create-charge", "order-42")
	if err != nil {
		t.Fatal(err)
	}
	created := time.UnixMilli(1700000000123).Add(456 * time.Microsecond) // stored to the millisecond
	if got, want := idem.Reference("charge", key, created), "7b65a63d02b45c21446c48198222d1f2"; got != want {
		t.Fatalf("Reference %s, want %s", got, want)
	}
}

// TestReferenceTellsCommandsApart: a new command under a reused key, another
// purpose or another key gets another reference, and none shows the key.
func TestReferenceTellsCommandsApart(t *testing.T) {
	key, _ := idem.NewKey("acme", "create-charge", "order-42")
	other, _ := idem.NewKey("acme", "create-charge", "order-43")
	created := time.UnixMilli(1700000000123)
	base := idem.Reference("charge", key, created)
	for name, ref := range map[string]string{
		"a later command": idem.Reference("charge", key, created.Add(time.Millisecond)),
		"another purpose": idem.Reference("receipt", key, created),
		"another key":     idem.Reference("charge", other, created),
	} {
		if ref == base {
			t.Errorf("%s: same reference %s", name, ref)
		}
	}
	if strings.Contains(base, "order") || len(base) != 32 {
		t.Fatalf("reference %q: want 32 hex digits and no part of the key", base)
	}
}

// TestReferenceSurvivesTakeOverAndReclaim: the resolver that takes a dead
// attempt over, and a retry after a release, derive the first attempt's
// reference, so the provider recognises what that attempt sent.
func TestReferenceSurvivesTakeOverAndReclaim(t *testing.T) {
	ctx := t.Context()
	clock := idemtest.NewClock(time.Now())
	store := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	key := idemtest.UniqueKey(t, "acme")
	fp := idem.FingerprintOf([]byte("charge 1999"))
	begun, err := store.Begin(ctx, key, fp, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := idem.Reference("charge", key, begun.Lease.CreatedAt)
	clock.Advance(time.Hour)
	taken, err := store.TakeOver(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := idem.Reference("charge", key, taken.CreatedAt); got != first {
		t.Fatalf("after a take-over: %s, want the first attempt's %s", got, first)
	}
	if err := store.Release(ctx, taken); err != nil {
		t.Fatal(err)
	}
	again, err := store.Begin(ctx, key, fp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := idem.Reference("charge", key, again.Lease.CreatedAt); got != first {
		t.Fatalf("after a release and a retry: %s, want the first attempt's %s", got, first)
	}
}
