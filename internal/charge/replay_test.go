package charge_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// onStripe is the charge and reconcile functions with PROVIDER=stripe, on
// a stripesim whose search lags by an hour, all on one clock.
type onStripe struct {
	t       *testing.T
	handler *httpapi.Handler
	recon   *charge.Service
	sim     *stripesim.Simulator
	store   *dynamostore.Store
	table   string // the idempotency table
	clock   *testkit.Clock
	lost    *lossyTransport
}

// lossyTransport loses the charge function's create requests while lose
// is set: the request fails after it could have been sent, and never
// reaches Stripe.
type lossyTransport struct{ lose bool }

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.lose && req.Method == http.MethodPost {
		return nil, errors.New("connection reset by peer")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// newOnStripe builds the stack; tune adjusts the charge function's wiring
// only.
func newOnStripe(t *testing.T, tune ...func(*testkit.Wiring)) *onStripe {
	t.Helper()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	sim, wire := testkit.Stripe(t, clock.Now)
	s := &onStripe{t: t, sim: sim, clock: clock, lost: &lossyTransport{}}
	s.handler = d.ChargeHandler(t, append([]func(*testkit.Wiring){wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) {
			o.HTTPClient, o.Timeout = &http.Client{Transport: s.lost}, time.Second
		})
	}}, tune...)...)
	s.recon = d.ReconcileService(t, wire, func(w *testkit.Wiring) {
		w.Reconcile.RetryBase, w.Reconcile.RetryCap = time.Minute, 4*time.Minute
	})
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	s.store, s.table = store, d.IdempotencyTable
	return s
}

func (s *onStripe) do(key, body string) *http.Response {
	s.t.Helper()
	resp, err := s.handler.Handle(context.Background(), post("acme", key, body))
	if err != nil {
		s.t.Fatal(err)
	}
	validateContract(s.t, post("acme", key, body), resp)
	return &http.Response{StatusCode: resp.StatusCode, Header: http.Header{httpapi.HeaderReplayed: {resp.Headers[httpapi.HeaderReplayed]}}}
}

// pending charges source under key, and requires the outcome-pending 503
// of a charge whose outcome is unknown.
func (s *onStripe) pending(key, source string) {
	s.t.Helper()
	if got := s.do(key, strings.Replace(stripeVisa, stripesim.PMVisa, source, 1)).StatusCode; got != http.StatusServiceUnavailable {
		s.t.Fatalf("%s: %d, want 503 outcome-pending", source, got)
	}
}

// pastLease moves the clock past the lease of a request just made (30s
// without a deadline).
func (s *onStripe) pastLease() { s.clock.Advance(31 * time.Second) }

func (s *onStripe) reconcile(key string) charge.Outcome {
	s.t.Helper()
	out, err := s.recon.Reconcile(context.Background(), mustKey(s.t, "acme", key))
	if err != nil {
		s.t.Fatalf("reconcile: %v", err)
	}
	return out
}

func (s *onStripe) record(key string) *idem.Record {
	s.t.Helper()
	rec, err := s.store.Get(context.Background(), mustKey(s.t, "acme", key))
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

func (s *onStripe) reference(key string) string {
	return charge.ProviderReference(mustKey(s.t, "acme", key), s.record(key).CreatedAt)
}

const stripeVisa = `{"amount":1500,"currency":"EUR","source":"pm_card_visa"}`

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
	if _, err := s.store.Get(context.Background(), mustKey(t, "acme", key)); !errors.Is(err, idem.ErrNotFound) {
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
