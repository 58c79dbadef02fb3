package charge_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// simKey is the provider simulator's key in these tests, which the
// functions read from a secret.
const simKey = "sk_test_providersim"

// TestMissingKeyFailsWithNothingClaimed: a charge whose provider key
// cannot be read (its secret missing) answers 500 with nothing claimed
// and nothing sent, so the key is not left IN_FLIGHT: once the secret
// exists, a retry under the same key charges, once.
func TestMissingKeyFailsWithNothingClaimed(t *testing.T) {
	t.Parallel()
	name := testkit.UniqueName("chargeonce/provider-api-key")
	clock := testkit.NewClock(time.Now())
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.ProviderSecretName = name }},
		deps: func(d *app.Deps) { d.Clock = clock.Now },
		sim:  []func(*providersim.Options){providersim.WithSecret(simKey)},
	})
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, http.StatusInternalServerError)
	if _, err := h.store.Get(t.Context(), mustKey(t, "acme", key)); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after the key could not be read: %v, want none", err)
	}
	if charges, calls := h.ledger(t); charges != 0 || calls != 0 {
		t.Fatalf("provider charges %d, calls %d; want none", charges, calls)
	}
	if !strings.Contains(h.logs.String(), `"error_class":"provider_not_ready"`) {
		t.Errorf("the 500 is not logged as provider_not_ready:\n%s", h.logs.String())
	}
	if strings.Contains(h.logs.String(), simKey) {
		t.Error("the logs show the key")
	}

	testkit.CreateSecret(t, name, simKey)
	clock.Advance(30 * time.Second) // the failed read is remembered until then
	wantStatus(t, h.do(post("acme", key, visa)), http.StatusCreated)
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d; want 1 and 1", charges, calls)
	}
}

// TestMissingKeyTakesNothingOver: the reconciler of a command left
// IN_FLIGHT, whose provider key cannot be read, fails its message before
// the take-over: the record stays as it was (no attempt counted, no lease
// taken), and the message's next delivery, with the key back, resolves it.
func TestMissingKeyTakesNothingOver(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	keyName := testkit.Secret(t, simKey)
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.ProviderSecretName, c.InflightWait = keyName, 0 }},
		deps: func(d *app.Deps) { d.Clock = clock.Now },
		sim:  []func(*providersim.Options){providersim.WithSecret(simKey)},
	})
	key := newKey()
	wantStatus(t, h.do(post("acme", key, strings.Replace(visa, "tok_visa", "tok_timeout_once", 1))), http.StatusServiceUnavailable)
	k := mustKey(t, "acme", key)
	before, err := h.store.Get(t.Context(), k)
	if err != nil || before.Status != idem.StatusInFlight {
		t.Fatalf("record after the lost answer: %+v, %v", before, err)
	}
	clock.Advance(time.Hour) // past the lease and the settle window

	missing := testkit.UniqueName("chargeonce/provider-api-key")
	reconcileOn := func(name string) *charge.Service {
		return h.d.ReconcileService(t, func(w *testkit.Wiring) {
			w.Reconcile.ProviderSecretName, w.Deps.Clock = name, clock.Now
		})
	}
	if _, err := reconcileOn(missing).Reconcile(t.Context(), k); !errors.Is(err, charge.ErrProviderNotReady) {
		t.Fatalf("Reconcile without the key: %v, want ErrProviderNotReady", err)
	}
	after, err := h.store.Get(t.Context(), k)
	if err != nil || after.Status != idem.StatusInFlight || after.Attempts != before.Attempts || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) {
		t.Fatalf("record after a reconcile without the key: %+v, %v; want it as it was: %+v", after, err, before)
	}
	if out, err := reconcileOn(keyName).Reconcile(t.Context(), k); err != nil || out != charge.OutcomeResolvedCharged {
		t.Fatalf("Reconcile with the key: %s, %v; want %s", out, err, charge.OutcomeResolvedCharged)
	}
	if charges, _ := h.ledger(t); charges != 1 {
		t.Fatalf("provider charges %d, want 1", charges)
	}
}

// TestMissingKeyMovesNothing: a capture whose provider key cannot be read
// answers 500 before its move. The charge's row is not written, so no
// 500 follows a move begun, and no move is left to undo.
func TestMissingKeyMovesNothing(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.ProviderSecretName = testkit.Secret(t, simKey) }},
		sim:  []func(*providersim.Options){providersim.WithSecret(simKey)},
	})
	id := h.authorized(t, "acme", 1000)
	calls := &idemtest.CallCounter{}
	missing := h.d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.ProviderSecretName = testkit.UniqueName("chargeonce/provider-api-key")
		w.Deps.Clients = testkit.Clients(t, calls.Option())
	})
	resp, err := missing.Handle(t.Context(), postMove("acme", id, "capture", ""))
	if err != nil || resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("a capture without the key: %d %s, %v; want 500", resp.StatusCode, resp.Body, err)
	}
	if n := calls.Snapshot()["UpdateItem"]; n != 0 {
		t.Errorf("the charge's row was written %d times before the 500; want none", n)
	}
}

// TestMissingWebhookSecretAsksForRedelivery: a delivery that cannot be
// verified because the signing secret cannot be read answers 500, so that
// Stripe delivers it again, and stores nothing; not 400, which would
// refuse a good delivery. The failed read is remembered for 30 s: the
// secret created meanwhile verifies the deliveries after that.
func TestMissingWebhookSecretAsksForRedelivery(t *testing.T) {
	t.Parallel()
	name := testkit.UniqueName("chargeonce/stripe-webhook-secret")
	clock := testkit.NewClock(time.Now())
	s := newStripeStackAt(t, clock, 4*time.Second, func(c *app.ChargeConfig) { c.WebhookSecretName = name }, nil)
	tenant, key := "acme", newKey()
	ref, _ := s.begin(tenant, key, stripesim.PMVisa)
	payload := piEvent("payment_intent.succeeded", tenant, key, ref)
	if resp := s.deliver(payload, sign(payload, testWhsec, time.Now())); resp.status != http.StatusInternalServerError {
		t.Errorf("with the signing secret missing: answer = %d %s, want 500", resp.status, resp.body)
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusInFlight {
		t.Errorf("an unverified delivery changed the command: %+v", rec)
	}
	if ev := s.eventRecord(eventID(t, payload)); ev != nil {
		t.Errorf("an unverified delivery stored the event: %+v", ev)
	}
	testkit.CreateSecret(t, name, testWhsec)
	clock.Advance(30 * time.Second)
	if resp := s.deliver(payload, sign(payload, testWhsec, time.Now())); resp.status != http.StatusOK {
		t.Errorf("the delivery again, with the secret: answer = %d %s, want 200", resp.status, resp.body)
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusSucceeded {
		t.Errorf("the verified delivery did not settle the command: %+v", rec)
	}
}
