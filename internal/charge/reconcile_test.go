package charge_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestReplayRollsForwardAChargeThatNeverArrived: the charge function's
// request is lost before it reaches Stripe, so the outcome is unknown.
// The reconciler replays the request from the intent (the PaymentMethod
// id is kept with it), which executes it now: it completes the command
// with that charge instead of releasing it, and the card is charged once,
// however often the client and the reconciler come back.
func TestReplayRollsForwardAChargeThatNeverArrived(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	s.lost.lose = true
	s.pending(key, stripesim.PMVisa)
	s.lost.lose = false
	ref := s.reference(key)
	if n := s.sim.Charged(ref); n != 0 {
		t.Fatalf("charged %d times before the reconciler ran", n)
	}
	s.pastLease()
	if got := s.reconcile(key); got != charge.OutcomeResolvedCharged {
		t.Fatalf("reconcile: %s, want %s", got, charge.OutcomeResolvedCharged)
	}
	if rec := s.record(key); rec.Status != idem.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", rec.Status)
	}
	if got := s.reconcile(key); got != charge.OutcomeNothingToDo {
		t.Fatalf("second reconcile: %s", got)
	}
	if resp := s.do(key, stripeVisa); resp.StatusCode != http.StatusCreated || resp.Header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d replayed=%s, want the stored 201", resp.StatusCode, resp.Header.Get(httpapi.HeaderReplayed))
	}
	if n := s.sim.Charged(ref); n != 1 {
		t.Fatalf("Stripe charged the reference %d times, want 1", n)
	}
}

// TestReplayNeedsNoSettleWindow: a lost answer is resolved by the replay
// at once, while Stripe's search does not show the charge yet.
func TestReplayNeedsNoSettleWindow(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	s.pending(key, stripesim.PMTimeout)
	s.pastLease()
	if got := s.reconcile(key); got != charge.OutcomeResolvedCharged {
		t.Fatalf("reconcile inside the search lag: %s, want %s", got, charge.OutcomeResolvedCharged)
	}
	if n := s.sim.Charged(s.reference(key)); n != 1 {
		t.Fatalf("charged %d times, want 1", n)
	}
}

// TestCommandOlderThanTheDedupWindowIsParked: past Stripe's 24-hour key
// window the reconciler neither replays (Stripe would charge again) nor
// releases on a search miss (a retry would send the reference again): it
// parks the command for an operator, each time it comes back.
func TestCommandOlderThanTheDedupWindowIsParked(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	s.lost.lose = true
	s.do(key, stripeVisa)
	s.lost.lose = false
	ref := s.reference(key)
	s.clock.Advance(stripe.DedupWindow + time.Minute)
	before := s.sim.Requests()
	for range 2 {
		if got := s.reconcile(key); got != charge.OutcomeParked {
			t.Fatalf("reconcile past the dedup window: %s, want %s", got, charge.OutcomeParked)
		}
		rec := s.record(key)
		if rec.Status != idem.StatusInFlight || !rec.LeaseExpiresAt.After(s.clock.Now().Add(3*time.Minute)) {
			t.Fatalf("parked record: %s, lease until %s", rec.Status, rec.LeaseExpiresAt)
		}
		if got := s.do(key, stripeVisa).StatusCode; got != http.StatusConflict {
			t.Fatalf("client retry of a parked command: %d, want 409", got)
		}
		s.clock.Advance(4*time.Minute + time.Second)
	}
	if n := s.sim.Charged(ref); n != 0 {
		t.Fatalf("charged %d times", n)
	}
	// Each reconcile searched (one search, no hit to read): nothing was sent.
	if got := s.sim.Requests() - before; got != 2 {
		t.Fatalf("%d requests to Stripe, want 2 searches", got)
	}
}

// TestSourceOtherThanAPaymentMethodIsNeverStored: with a provider that
// replays, the source is kept with the intent, so the charge path refuses
// one that is not a PaymentMethod id before it stores anything.
func TestSourceOtherThanAPaymentMethodIsNeverStored(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	body := strings.Replace(stripeVisa, stripesim.PMVisa, "4242424242424242", 1)
	if got := s.do(key, body).StatusCode; got != http.StatusBadGateway {
		t.Fatalf("card number as source: %d, want 502 provider-rejected", got)
	}
	if _, err := s.store.Get(t.Context(), mustKey(t, "acme", key)); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record: %v, want none", err)
	}
	if got := s.sim.Requests(); got != 0 {
		t.Fatalf("%d requests to Stripe, want none", got)
	}
}

// TestSearchMissAfterAReplayWaitsFromTheReplay: Stripe saved a 500 as the
// key's answer after it charged, so the replay tells nothing and the
// reconciler searches, which does not show the charge yet. The miss is
// trusted only a settle window after the replay (a send, which moved the
// attempt deadline), by which time search finds the charge.
func TestSearchMissAfterAReplayWaitsFromTheReplay(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	s.pending(key, stripesim.PMAPIError)
	s.clock.Advance(10 * time.Minute)
	if got := s.reconcile(key); got != charge.OutcomeNotSettled {
		t.Fatalf("reconcile inside the search lag: %s, want %s", got, charge.OutcomeNotSettled)
	}
	if rec := s.record(key); rec.Status != idem.StatusInFlight || !rec.LeaseExpiresAt.After(s.clock.Now().Add(stripe.SettleWindow)) {
		t.Fatalf("record after the miss: %s, lease until %s, want a settle window after the replay (%s)", rec.Status, rec.LeaseExpiresAt, s.clock.Now())
	}
	s.clock.Advance(stripe.SettleWindow + time.Minute)
	if got := s.reconcile(key); got != charge.OutcomeResolvedCharged {
		t.Fatalf("reconcile after the settle window: %s, want %s", got, charge.OutcomeResolvedCharged)
	}
	if n := s.sim.Charged(s.reference(key)); n != 1 {
		t.Fatalf("charged %d times, want 1", n)
	}
}

// TestReplayRefusedOutrightReleasesTheKey: the create never reached
// Stripe, and its PaymentMethod id is well formed but unknown to Stripe.
// The reconciler's replay is refused with 400 resource_missing, which
// proves nothing was or will be charged: the key is released, and the
// next retry is answered provider-rejected rather than 409 for ever.
func TestReplayRefusedOutrightReleasesTheKey(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	const unknownPM = "pm_unknown_to_stripe"
	body := strings.Replace(stripeVisa, stripesim.PMVisa, unknownPM, 1)
	s.lost.lose = true
	s.pending(key, unknownPM)
	s.lost.lose = false
	s.pastLease()
	if got := s.reconcile(key); got != charge.OutcomeReleased {
		t.Fatalf("reconcile of a replay Stripe refuses: %s, want %s", got, charge.OutcomeReleased)
	}
	if got := s.do(key, body).StatusCode; got != http.StatusBadGateway {
		t.Fatalf("retry: %d, want 502 provider-rejected", got)
	}
	if n := s.sim.Charged(s.reference(key)); n != 0 {
		t.Fatalf("charged %d times", n)
	}
}

// misrouted answers POSTs while set as Stripe answers a request to a URL it
// does not serve (a wrong base URL or path prefix, a proxy's rewrite): 404
// invalid_request_error "Unrecognized request URL", which says nothing of
// the request that was meant.
type misrouted struct{ on bool }

func (m *misrouted) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.on && req.Method == http.MethodPost {
		body := `{"error":{"message":"Unrecognized request URL (POST: /v1/payment_intents). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.","type":"invalid_request_error"}}`
		return &http.Response{
			Status: "404 Not Found", StatusCode: http.StatusNotFound, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/json"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req,
		}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestMisroutedReplayProvesNothing: Stripe charged the command and its
// answer was lost (outcome-pending). The reconciler's replay meets a 404
// "Unrecognized request URL" (a misrouted request), which names no
// parameter of the request and so proves nothing: the command is not
// released, and its client, coming back a day later, is not charged a
// second time under a new reference.
func TestMisroutedReplayProvesNothing(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	sim, wire := testkit.Stripe(t, clock.Now)
	h := d.ChargeHandler(t, wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) { o.Timeout = time.Second })
	})
	route := &misrouted{}
	recon := d.ReconcileService(t, wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) {
			o.HTTPClient = &http.Client{Transport: route}
		})
	})
	ctx := t.Context()
	key := newKey()
	body := `{"amount":1500,"currency":"EUR","source":"` + stripesim.PMTimeout + `"}`
	resp, err := h.Handle(ctx, post("acme", key, body))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("charge whose answer is lost: %d %v, want 503 outcome-pending", resp.StatusCode, err)
	}
	k := mustKey(t, "acme", key)
	clock.Advance(31 * time.Second)
	route.on = true
	out, err := recon.Reconcile(ctx, k)
	t.Logf("reconcile with a misrouted replay: %s %v", out, err)
	if out == charge.OutcomeReleased {
		t.Errorf("a charged command was released on a 404 for an unrecognised URL")
	}
	route.on = false
	// The client, told outcome-pending, comes back the next day.
	clock.Advance(23*time.Hour + time.Minute)
	resp, err = h.Handle(ctx, post("acme", key, body))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client retry a day later: %d", resp.StatusCode)
	n := 0
	for _, e := range sim.Ledger() {
		n += e.Succeeded
	}
	if n > 1 {
		t.Errorf("Stripe charged %d PaymentIntents for one intent (%+v)", n, sim.Ledger())
	}
}

// TestNotFoundReleasesOnlyAfterTheSettleWindow: a provider's "not found"
// right after the attempt is no proof, since its backend may still be
// charging. The key is postponed, not released: a retry with another
// body is still refused, and a charge that lands late is recorded without
// the client coming back. (Before, the key was released at once, another
// body was accepted, and the late charge was never recorded.)
func TestNotFoundReleasesOnlyAfterTheSettleWindow(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	l := h.crashAfterClaim(t, key, visa)
	if got := h.reconcile(t, key); got != charge.OutcomeNotSettled {
		t.Fatalf("reconcile inside the settle window: %s, want %s", got, charge.OutcomeNotSettled)
	}
	rec, err := h.store.Get(t.Context(), l.Key)
	if err != nil || rec.Status != idem.StatusInFlight || rec.LeaseExpiresAt.Before(l.AttemptDeadline.Add(2*time.Minute)) {
		t.Fatalf("record after a premature not-found: %+v, %v", rec, err)
	}
	wantStatus(t, h.do(post("acme", key, strings.Replace(visa, "1500", "9900", 1))), http.StatusUnprocessableEntity)
	h.lateCharge(t, l) // the provider's backend charges after all
	h.clock.Advance(2 * time.Minute)
	if got := h.reconcile(t, key); got != charge.OutcomeResolvedCharged {
		t.Fatalf("reconcile after the settle window: %s, want %s", got, charge.OutcomeResolvedCharged)
	}
	replay := h.do(post("acme", key, visa))
	wantStatus(t, replay, http.StatusCreated)
	id, _ := chargeOf(t, replay.Body)
	wantStatus(t, h.do(get("acme", id)), http.StatusOK)
	if charges, _ := h.ledger(t); charges != 1 {
		t.Fatalf("provider charges %d, want 1", charges)
	}
}

// TestReleasedKeyRunsAgainUnderItsReference: once the settle window has
// passed, "not found" releases the key; the same request then runs again
// under the same reference (so a charge that landed is found, not
// repeated), and another request is still refused.
func TestReleasedKeyRunsAgainUnderItsReference(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	l := h.crashAfterClaim(t, key, visa)
	h.clock.Advance(2 * time.Minute)
	if got := h.reconcile(t, key); got != charge.OutcomeReleased {
		t.Fatalf("reconcile after the settle window: %s, want %s", got, charge.OutcomeReleased)
	}
	wantStatus(t, h.do(post("acme", key, strings.Replace(visa, "1500", "9900", 1))), http.StatusUnprocessableEntity)
	created := h.do(post("acme", key, visa))
	wantStatus(t, created, http.StatusCreated)
	var c struct {
		ProviderReference string `json:"provider_reference"`
	}
	_ = json.Unmarshal([]byte(created.Body), &c)
	if want := charge.ProviderReference(l.Key, l.CreatedAt); c.ProviderReference != want {
		t.Fatalf("the retry charged reference %s, want the released command's %s", c.ProviderReference, want)
	}
}

// TestReconcileBacksOffPerKey: a key whose provider cannot be asked is
// postponed by a backoff that doubles per attempt up to a cap, instead of
// being retried every sweep (and through the DLQ).
func TestReconcileBacksOffPerKey(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	h.crashAfterClaim(t, key, visa)
	h.sim.SetDown(true)
	for i, wait := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		if got := h.reconcile(t, key); got != charge.OutcomeDeferred {
			t.Fatalf("attempt %d with the provider down: %s, want %s", i+1, got, charge.OutcomeDeferred)
		}
		rec, err := h.store.Get(t.Context(), mustKey(t, "acme", key))
		if err != nil || rec.Attempts != i+1 || !rec.LeaseExpiresAt.Equal(h.clock.Now().Add(wait).Truncate(time.Millisecond)) {
			t.Fatalf("attempt %d: record %+v, %v; want the lease %s on", i+1, rec, err, wait)
		}
		h.clock.Advance(wait - time.Second)
		if got := h.reconcile(t, key); got != charge.OutcomeStillLeased {
			t.Fatalf("before the backoff ran out: %s, want %s", got, charge.OutcomeStillLeased)
		}
		h.clock.Advance(2 * time.Second)
	}
	h.sim.SetDown(false)
	h.clock.Advance(2 * time.Minute) // past the settle window too
	if got := h.reconcile(t, key); got != charge.OutcomeReleased {
		t.Fatalf("with the provider back: %s, want %s", got, charge.OutcomeReleased)
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
