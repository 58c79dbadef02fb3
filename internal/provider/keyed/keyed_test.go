package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/keyed"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/secrets"
)

// key is a secret as a function holds it: Value reads the stored value
// once and keeps it, Refresh reads it again; unreadable, both fail as a
// missing secret does.
type key struct {
	mu               sync.Mutex
	stored, held     string
	unreadable, read bool
}

func (k *key) Value(context.Context) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.read {
		return k.held, nil
	}
	return k.load()
}

func (k *key) Refresh(context.Context, string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.load()
}

func (k *key) load() (string, error) {
	if k.unreadable {
		return "", fmt.Errorf("secret: %w", secrets.ErrUnavailable)
	}
	k.held, k.read = k.stored, true
	return k.held, nil
}

// rotate stores value, as a rotation of the secret does.
func (k *key) rotate(value string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stored = value
}

// simOnKey serves a provider simulator that takes simKey only, and
// returns a keyed provider on k, the simulator, and a count of the
// requests it received.
func simOnKey(t *testing.T, simKey string, k *key) (*keyed.Provider[*provider.Client], *providersim.Simulator, *atomic.Int32) {
	t.Helper()
	sim := providersim.New(providersim.WithSecret(simKey))
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := keyed.New(k, keyed.Kind[*provider.Client]{
		Build: func(key string) (*provider.Client, error) {
			return provider.NewClient(srv.URL, key, provider.WithHTTPClient(srv.Client())), nil
		},
		Unauthorized: provider.Unauthorized,
	})
	return p, sim, &requests
}

func charge(reference string) provider.ChargeRequest {
	return provider.ChargeRequest{Reference: reference, Amount: 1500, Currency: "EUR", Source: providersim.SourceVisa}
}

// TestRefusedKeyIsReadAgainOnce: after the provider rolled the key and
// the secret was rotated, the first charge on the old key is refused
// (401, nothing charged), the key is read again and the charge sent once
// more with it: one charge. A key still refused after the re-read is sent
// no third time, and is unavailable, not rejected: a retry may succeed.
func TestRefusedKeyIsReadAgainOnce(t *testing.T) {
	t.Parallel()
	k := &key{stored: "sk_first"}
	p, sim, requests := simOnKey(t, "sk_first", k)
	if res, err := p.Charge(t.Context(), charge("order-1")); err != nil || res.Status != provider.StatusCharged {
		t.Fatalf("Charge on the first key: %+v, %v", res, err)
	}

	sim.SetSecret("sk_second")
	k.rotate("sk_second")
	requests.Store(0)
	if res, err := p.Charge(t.Context(), charge("order-2")); err != nil || res.Status != provider.StatusCharged {
		t.Fatalf("Charge after the rotation: %+v, %v; want charged on the second key", res, err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: refused on the old key, sent again on the new", n)
	}
	if e := sim.Ledger().References["order-2"]; e.Charges != 1 || e.Calls != 1 {
		t.Errorf("ledger of order-2: %+v, want one call charged", e)
	}
	if _, err := p.Lookup(t.Context(), "order-2"); err != nil {
		t.Errorf("Lookup on the new key: %v", err)
	}

	sim.SetSecret("sk_third") // rolled, but the secret not rotated
	requests.Store(0)
	_, err := p.Charge(t.Context(), charge("order-3"))
	if !errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrRejected) {
		t.Errorf("Charge on a key the provider refuses: %v, want ErrUnavailable (nothing done, retry once the secret is rotated), not ErrRejected", err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1: the key read again is the refused one, so nothing is sent again", n)
	}

	k.rotate("sk_wrong") // rotated, but to a key the provider refuses too
	requests.Store(0)
	_, err = p.Charge(t.Context(), charge("order-4"))
	if !errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrRejected) {
		t.Errorf("Charge on a rotated key the provider refuses too: %v, want ErrUnavailable, not ErrRejected", err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: refused on the old key, and on the new", n)
	}
}

// TestUnreadableKeySendsNothing: without its secret the provider is not
// ready, and a charge sent anyway is refused unsent, as ErrUnavailable.
func TestUnreadableKeySendsNothing(t *testing.T) {
	t.Parallel()
	p, sim, requests := simOnKey(t, "sk_first", &key{unreadable: true})
	if err := p.Prepare(t.Context()); !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Prepare: %v, want ErrUnavailable", err)
	}
	if _, err := p.Charge(t.Context(), charge("order-1")); !errors.Is(err, provider.ErrUnavailable) || !errors.Is(err, secrets.ErrUnavailable) {
		t.Errorf("Charge: %v, want provider.ErrUnavailable: nothing sent", err)
	}
	if n := requests.Load(); n != 0 || sim.Ledger().TotalCalls != 0 {
		t.Errorf("%d requests reached the provider, want none", n)
	}
}

// TestRefundOnARolledKeyIsSentAgainOnce: a refund refused on the old key
// (401, nothing refunded) is sent once more on the key read again, and
// refunds once; its lookup goes through the new key too.
func TestRefundOnARolledKeyIsSentAgainOnce(t *testing.T) {
	t.Parallel()
	k := &key{stored: "sk_first"}
	p, sim, requests := simOnKey(t, "sk_first", k)
	charged, err := p.Charge(t.Context(), charge("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	sim.SetSecret("sk_second")
	k.rotate("sk_second")
	requests.Store(0)
	req := provider.RefundRequest{Reference: "refund-1", Charge: charged.ChargeID, Amount: 500, Currency: "EUR"}
	refunded, err := p.Refund(t.Context(), req)
	if err != nil || refunded.Status != provider.StatusRefunded {
		t.Fatalf("Refund after the rotation: %+v, %v; want refunded on the second key", refunded, err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: refused on the old key, sent again on the new", n)
	}
	if e := sim.Ledger().Refunds["refund-1"]; e.Refunds != 1 || e.Calls != 1 {
		t.Errorf("ledger of refund-1: %+v, want one call that refunded", e)
	}
	if found, err := p.LookupRefund(t.Context(), req); err != nil || found != refunded {
		t.Errorf("LookupRefund = %+v, %v; want %+v", found, err, refunded)
	}
}

// TestCaptureOnARolledKeyIsSentAgainOnce: a capture refused on the old
// key (401, nothing captured) is sent once more on the key read again,
// and captures once; State and Cancel go through the new key too.
func TestCaptureOnARolledKeyIsSentAgainOnce(t *testing.T) {
	t.Parallel()
	k := &key{stored: "sk_first"}
	p, sim, requests := simOnKey(t, "sk_first", k)
	req := charge("order-1")
	req.AuthorizeOnly = true
	authorized, err := p.Charge(t.Context(), req)
	if err != nil || authorized.Status != provider.StatusAuthorized {
		t.Fatalf("authorize: %+v, %v", authorized, err)
	}
	sim.SetSecret("sk_second")
	k.rotate("sk_second")
	requests.Store(0)
	captured, err := p.Capture(t.Context(), provider.PaymentRequest{Reference: "capture-1", Charge: authorized.ChargeID})
	if err != nil || captured.Status != provider.StatusCharged || captured.Amount != 1500 {
		t.Fatalf("Capture after the rotation: %+v, %v; want charged on the second key", captured, err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: refused on the old key, sent again on the new", n)
	}
	if e := sim.Ledger().References["order-1"]; e.Captures != 1 || e.Captured != 1500 {
		t.Errorf("ledger of order-1: %+v, want one capture of 1500", e)
	}
	if res, err := p.Cancel(t.Context(), provider.PaymentRequest{Reference: "cancel-1", Charge: authorized.ChargeID}); err != nil || res.Status != provider.StatusCharged {
		t.Errorf("Cancel after the capture = %+v, %v; want charged", res, err)
	}
	if res, err := p.State(t.Context(), authorized.ChargeID); err != nil || res.Status != provider.StatusCharged || res.Amount != 1500 {
		t.Errorf("State = %+v, %v; want charged 1500", res, err)
	}
}
