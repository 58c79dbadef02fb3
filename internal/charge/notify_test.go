package charge_test

// Provider events settle the durable rows, long after the command's
// record has expired.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// chargeView is a charge as GET /charges/{id} shows it.
type chargeView struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	Refunds        []struct {
		Status string `json:"status"`
	} `json:"refunds"`
}

// view decodes a charge from an answer of the API, which must be status.
func (s *stripeStack) view(r response, status int) chargeView {
	s.t.Helper()
	var c chargeView
	if r.status != status || json.Unmarshal([]byte(r.body), &c) != nil {
		s.t.Fatalf("answer %d %s, want %d and a charge", r.status, r.body, status)
	}
	return c
}

// read is tenant's charge id, as GET shows it.
func (s *stripeStack) read(tenant, id string) chargeView {
	s.t.Helper()
	return s.view(s.call(http.MethodGet, tenant, "/charges/"+id, "", ""), http.StatusOK)
}

// expired advances clock past the retention of every record made so
// far, and checks that the command key of tenant's operation is gone.
func (s *stripeStack) expired(clock *testkit.Clock, d time.Duration, tenant, operation, client string) {
	s.t.Helper()
	clock.Advance(d)
	k, err := idem.NewKey(tenant, operation, client)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.store.Get(s.t.Context(), k); !errors.Is(err, idem.ErrNotFound) {
		s.t.Fatalf("%s's record after %v: %v, want it expired", operation, d, err)
	}
}

// redeliver delivers again, signed now, every event stripesim sent so
// far, as Stripe does for up to three days: each is acknowledged.
func (s *stripeStack) redeliver() {
	s.t.Helper()
	s.sim.WaitWebhooks()
	s.mu.Lock()
	sent := append([][]byte(nil), s.webhooks...)
	s.mu.Unlock()
	for _, payload := range sent {
		if r := s.deliver(payload, sign(payload, testWhsec, time.Now())); r.status != http.StatusOK {
			s.t.Fatalf("redelivery of %s: %d %s, want 200", eventID(s.t, payload), r.status, r.body)
		}
	}
}

const day = 24 * time.Hour

// TestRefundFailedDaysLaterIsRecorded: Stripe reports a refund pending,
// then failed three days later, long after the refund's record expired.
// The refund reads failed, its amount is the charge's again, and a new
// refund of it is made.
func TestRefundFailedDaysLaterIsRecorded(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	s := newStripeStackAt(t, clock, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	c := s.view(s.charge(tenant, newKey(), stripesim.PMRefundFail), http.StatusCreated)
	client := newKey()
	if r := s.call(http.MethodPost, tenant, "/charges/"+c.ID+"/refunds", client, `{}`); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	s.expired(clock, 3*day, tenant, charge.RefundOperation, client)
	if n := s.sim.FailRefunds(); n != 1 {
		t.Fatalf("stripesim failed %d refunds, want 1", n)
	}
	s.sim.WaitWebhooks()
	got := s.read(tenant, c.ID)
	if got.AmountRefunded != 0 || len(got.Refunds) != 1 || got.Refunds[0].Status != charge.RefundFailed {
		t.Fatalf("after refund.failed the charge reads %+v, want nothing refunded and its refund failed", got)
	}
	if r := s.call(http.MethodPost, tenant, "/charges/"+c.ID+"/refunds", newKey(), `{"amount":1500}`); r.status != http.StatusCreated {
		t.Fatalf("a new refund of what the failed one returned: %d %s, want 201", r.status, r.body)
	}
	s.redeliver()
	if got := s.read(tenant, c.ID); got.AmountRefunded != 1500 || len(got.Refunds) != 2 {
		t.Fatalf("after every event again the charge reads %+v, want 1500 refunded by the second refund", got)
	}
}

// TestRefundFailedUnderAReusedKeyIsRecorded: a refund's key, reused past
// its retention, names a new refund. When both fail at Stripe, each
// event settles its own row.
func TestRefundFailedUnderAReusedKeyIsRecorded(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	s := newStripeStackAt(t, clock, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	c := s.view(s.charge(tenant, newKey(), stripesim.PMRefundFail), http.StatusCreated)
	client := newKey()
	for i, amount := range []string{`{"amount":700}`, `{"amount":800}`} {
		if i > 0 {
			s.expired(clock, 2*day, tenant, charge.RefundOperation, client)
		}
		if r := s.call(http.MethodPost, tenant, "/charges/"+c.ID+"/refunds", client, amount); r.status != http.StatusCreated {
			t.Fatalf("refund %d: %d %s", i, r.status, r.body)
		}
	}
	if n := s.sim.FailRefunds(); n != 2 {
		t.Fatalf("stripesim failed %d refunds, want 2", n)
	}
	s.sim.WaitWebhooks()
	got := s.read(tenant, c.ID)
	if got.AmountRefunded != 0 || len(got.Refunds) != 2 || got.Refunds[0].Status != charge.RefundFailed || got.Refunds[1].Status != charge.RefundFailed {
		t.Fatalf("after both refund.failed events the charge reads %+v, want both refunds failed", got)
	}
}

// TestExpiredAuthorizationIsRecorded: Stripe cancels an authorization it
// held seven days, long after its record expired; the charge reads
// canceled.
func TestExpiredAuthorizationIsRecorded(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	s := newStripeStackAt(t, clock, 4*time.Second, nil, nil)
	tenant, client := testkit.UniqueName("acme"), newKey()
	c := s.view(s.call(http.MethodPost, tenant, "/charges", client, `{"amount":1500,"currency":"EUR","source":"pm_card_visa","capture":false}`), http.StatusCreated)
	s.expired(clock, stripesim.AuthorizationWindow, tenant, charge.ChargeOperation, client)
	s.sim.Ledger() // stripesim expires authorizations when it is next read
	s.sim.WaitWebhooks()
	if got := s.read(tenant, c.ID); got.Status != charge.StatusCanceled {
		t.Fatalf("after payment_intent.canceled the charge reads %s, want canceled", got.Status)
	}
	s.redeliver()
	if got := s.read(tenant, c.ID); got.Status != charge.StatusCanceled {
		t.Fatalf("after every event again the charge reads %s, want canceled", got.Status)
	}
}

// TestLostCaptureIsSettledByItsEvent: a capture made two days after its
// authorization loses its answer; Stripe's payment_intent.succeeded,
// sent at once, settles it, with no reconciler.
func TestLostCaptureIsSettledByItsEvent(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	var lose atomic.Bool
	s := newStripeStackAt(t, clock, 4*time.Second, nil, func(sim http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !lose.Load() || !strings.HasSuffix(r.URL.Path, "/capture") {
				sim.ServeHTTP(w, r)
				return
			}
			sim.ServeHTTP(httptest.NewRecorder(), r) // captured, and its answer lost
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		})
	})
	tenant, client := testkit.UniqueName("acme"), newKey()
	c := s.view(s.call(http.MethodPost, tenant, "/charges", client, `{"amount":1500,"currency":"EUR","source":"pm_card_visa","capture":false}`), http.StatusCreated)
	s.expired(clock, 2*day, tenant, charge.ChargeOperation, client)
	lose.Store(true)
	r := s.call(http.MethodPost, tenant, "/charges/"+c.ID+"/capture", "", `{"amount":1000}`)
	t.Logf("the capture whose answer was lost: %d %s", r.status, r.body)
	s.sim.WaitWebhooks()
	if got := s.read(tenant, c.ID); got.Status != charge.StatusSucceeded || got.Amount != 1000 {
		t.Fatalf("after payment_intent.succeeded the charge reads %s %d, want succeeded 1000", got.Status, got.Amount)
	}
}

// TestEventsPastRetentionChangeNoSettledRow: every event of a charge
// captured at once, a decline and a refund, delivered again after every
// record expired, is acknowledged and changes nothing.
func TestEventsPastRetentionChangeNoSettledRow(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	s := newStripeStackAt(t, clock, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	c := s.view(s.charge(tenant, newKey(), stripesim.PMVisa), http.StatusCreated)
	if r := s.call(http.MethodPost, tenant, "/charges/"+c.ID+"/refunds", newKey(), `{"amount":500}`); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	if r := s.charge(tenant, newKey(), stripesim.PMDeclined); r.status != http.StatusPaymentRequired {
		t.Fatalf("decline: %d %s", r.status, r.body)
	}
	clock.Advance(3 * day)
	s.redeliver()
	if got := s.read(tenant, c.ID); got.Status != charge.StatusSucceeded || got.AmountRefunded != 500 || len(got.Refunds) != 1 ||
		got.Refunds[0].Status != charge.StatusSucceeded {
		t.Fatalf("after every event again the charge reads %+v, want it as it was", got)
	}
	if n := s.chargeRows(tenant); n != 2 {
		t.Fatalf("%d rows, want the charge and its refund", n)
	}
}

// notifyRig is a hookRig with a reconcile service whose DynamoDB calls
// pass its hook, and whose logs are kept.
type notifyRig struct {
	*hookRig
	hooked *charge.Service
	logs   *testkit.LogBuffer
}

func newNotifyRig(t *testing.T) *notifyRig {
	t.Helper()
	r := &notifyRig{hookRig: newHookRig(t), logs: &testkit.LogBuffer{}}
	r.hooked = r.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Deps.Clock, w.Deps.Logger = r.clock.Now, slog.New(slog.NewJSONHandler(r.logs, nil))
		w.Deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: dbHook{r.hookRig}} })
	})
	return r
}

// notify hands n to the rig's service, as one delivery of a new event.
func (r *notifyRig) notify(t *testing.T, n charge.Notification) charge.Outcome {
	t.Helper()
	n.Provider = "stripe"
	if n.EventID == "" {
		n.EventID = "evt_" + strings.ReplaceAll(newKey(), "-", "")
	}
	res, err := r.hooked.Notify(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	return res.Outcome
}

// TestEventForAnUnreadableRowIsDeliveredAgain: a row that cannot be read
// now leaves the event unprocessed, and its redelivery settles the row.
func TestEventForAnUnreadableRowIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	id := r.authorized(t, "acme", 1000)
	key, created := r.command(t, id)
	r.clock.Advance(8 * day)
	hook := func(req *http.Request, body []byte) *http.Response {
		if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".GetItem") && bytes.Contains(body, []byte(id)) {
			return dynamoAnswer(req, http.StatusInternalServerError,
				`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`)
		}
		return nil
	}
	r.db.Store(&hook)
	n := charge.Notification{
		EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""), Command: key, Reference: charge.ProviderReference(key, created), Row: id,
		Result: provider.Result{Status: provider.StatusCanceled},
	}
	if out := r.notify(t, n); out != charge.OutcomeBusy {
		t.Fatalf("with its row unreadable the event is %q, want %q (delivered again)", out, charge.OutcomeBusy)
	}
	r.db.Store(nil)
	if out := r.notify(t, n); out != charge.OutcomeResolvedCanceled {
		t.Fatalf("the redelivery is %q, want %q", out, charge.OutcomeResolvedCanceled)
	}
	if st, _ := chargeStatus(t, r.do(get("acme", id))); st != charge.StatusCanceled {
		t.Fatalf("the charge reads %s, want canceled", st)
	}
}

// TestEventNamingAnotherRowChangesNothing: a row whose reference is not
// the event's, or an id no row of ours has, is left as it is.
func TestEventNamingAnotherRowChangesNothing(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	id := r.authorized(t, "acme", 1000)
	key, created := r.command(t, id)
	other := r.authorized(t, "acme", 1000)
	r.clock.Advance(8 * day)
	canceled := provider.Result{Status: provider.StatusCanceled}
	for _, n := range []charge.Notification{
		{Command: key, Reference: charge.ProviderReference(key, created), Row: other, Result: canceled},
		{Command: key, Reference: charge.ProviderReference(key, created), Row: "ch_not-a-charge", Result: canceled},
		{Command: key, Reference: charge.ProviderReference(key, created), Row: id + "#re_000000000000000000000000", Result: canceled},
	} {
		if out := r.notify(t, n); out != charge.OutcomeNothingToDo {
			t.Errorf("an event naming row %q is %q, want %q", n.Row, out, charge.OutcomeNothingToDo)
		}
	}
	for _, c := range []string{id, other} {
		if st, _ := chargeStatus(t, r.do(get("acme", c))); st != charge.StatusRequiresCapture {
			t.Fatalf("%s reads %s, want requires_capture", c, st)
		}
	}
}

// TestProviderDoneWithNoRowAndNoRecordIsLogged: the provider says a
// command of ours was done, but no row and no record is left of it. Nothing
// can be settled, and an operator is told.
func TestProviderDoneWithNoRowAndNoRecordIsLogged(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	key, err := idem.NewKey("acme", charge.ChargeOperation, newKey())
	if err != nil {
		t.Fatal(err)
	}
	created := r.clock.Now()
	n := charge.Notification{
		Command: key, Reference: charge.ProviderReference(key, created), Row: charge.ChargeID(key, created),
		Result: provider.Result{Status: provider.StatusCharged, Amount: 1000},
	}
	if out := r.notify(t, n); out != charge.OutcomeNothingToDo {
		t.Fatalf("the event is %q, want %q", out, charge.OutcomeNothingToDo)
	}
	for _, rec := range r.logs.Records(t) {
		if rec["level"] == "ERROR" && strings.Contains(rec["msg"].(string), "no row and no record") {
			if strings.Contains(r.logs.String(), key.ClientKey()) {
				t.Fatal("the log names the raw key")
			}
			return
		}
	}
	t.Fatalf("no error logged; logs: %s", r.logs.String())
}

// TestRefundFailureRacingItsCommitIsRecorded: Stripe answers a refund
// "pending" (recorded as refunded), then reports it failed at once. The
// event finds no row yet and the refund's record IN_FLIGHT; the request
// commits its row between the event's read of the record and its
// Preempt. The Preempt finds the record SUCCEEDED and the event is
// acknowledged as "nothing to do": the refund's failure is never recorded
// (its row reads succeeded, its amount stays refunded), and Stripe, having
// been answered 200, never sends it again. The change made the row the
// system of record for exactly this event ("a refund that fails later"),
// and handles a record found SUCCEEDED at the read ("settled since its row
// was read"), but not one that turns SUCCEEDED just after it.
func TestRefundFailureRacingItsCommitIsRecorded(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	ctx := t.Context()
	id := r.charged(t, "acme", 1000)
	client := newKey()
	key := refundKey(t, "acme", client)

	atProvider, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	prov := func(req *http.Request, _ []byte) *http.Request {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/v1/refunds") {
			once.Do(func() { close(atProvider); <-proceed })
		}
		return req
	}
	r.prov.Store(&prov)
	done := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() {
		resp, _ := r.handler.Handle(t.Context(), postRefund("acme", client, id, `{"amount":600}`))
		done <- resp
	}()
	<-atProvider // the refund's record is IN_FLIGHT, its hold placed, Stripe asked
	rec, err := r.store.Get(ctx, key)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("refund record %+v, %v; want IN_FLIGHT", rec, err)
	}
	refundID := charge.RefundID(key, rec.CreatedAt)

	var (
		armed    = true
		mu       sync.Mutex
		answered events.APIGatewayV2HTTPResponse
	)
	hook := func(req *http.Request, body []byte) *http.Response {
		target := req.Header.Get("X-Amz-Target")
		mu.Lock()
		if !armed || !bytes.Contains(body, []byte(r.d.IdempotencyTable)) {
			mu.Unlock()
			return nil
		}
		switch {
		case strings.HasSuffix(target, ".GetItem"):
			// The event's wait for the running attempt: time passes.
			r.clock.Advance(time.Second)
			mu.Unlock()
		case strings.HasSuffix(target, ".UpdateItem") && bytes.Contains(body, []byte(":released AND #exp > :nows")):
			// The event is about to preempt the refund's command: the
			// request's answer from Stripe arrives first and it commits.
			armed = false
			mu.Unlock()
			close(proceed)
			resp := <-done
			mu.Lock()
			answered = resp
			mu.Unlock()
		default:
			mu.Unlock()
		}
		return nil
	}
	r.db.Store(&hook)
	n := charge.Notification{
		EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""),
		Command: key, Reference: charge.RefundReference(key, rec.CreatedAt), Row: id + "#" + refundID,
		Result: provider.Result{Status: provider.StatusDeclined, ChargeID: "re_failed", DeclineCode: "expired_or_canceled_card"},
	}
	out := r.notify(t, n)
	r.db.Store(nil)
	mu.Lock()
	armed = false
	mu.Unlock()
	if answered.StatusCode != http.StatusCreated {
		t.Fatalf("the refund request: %d %s, want 201 (Stripe said pending)", answered.StatusCode, answered.Body)
	}
	rf, found, err := r.rows(t).GetRefund(ctx, "acme", id, refundID)
	if err != nil || !found {
		t.Fatalf("refund row: %v, %v", found, err)
	}
	if rf.Status != charge.RefundFailed {
		again := r.notify(t, n) // Stripe's redelivery of the same event, had it been refused
		c := r.readCharge(t, "acme", id)
		t.Fatalf("refund.failed, delivered while its request committed, was answered %q (acknowledged: Stripe stops sending it; "+
			"a redelivery is %q); the refund row reads %q and the charge %d refunded; want the refund failed and nothing refunded",
			out, again, rf.Status, c.AmountRefunded)
	}
}

// releasedCharge claims a charge command in the rig's store and releases
// it, as a request that Stripe refused (a rate limit) leaves it; and
// returns its key and creation.
func (r *notifyRig) releasedCharge(t *testing.T, release bool) (idem.Key, time.Time) {
	t.Helper()
	key, err := idem.NewKey("acme", charge.ChargeOperation, newKey())
	if err != nil {
		t.Fatal(err)
	}
	_, fp, err := charge.ParseBody([]byte(chargeBody("tok_visa")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.store.Begin(t.Context(), key, fp, []byte(`{"amount":1500,"currency":"EUR"}`))
	if err != nil || b.Lease == nil {
		t.Fatalf("begin: %+v, %v", b, err)
	}
	if release {
		if err := r.store.Release(t.Context(), b.Lease); err != nil {
			t.Fatal(err)
		}
	}
	return key, b.Lease.CreatedAt
}

// TestEventWithAnOddRowStillSettlesItsCommand: an event whose
// command and reference name a command of ours, RELEASED or IN_FLIGHT,
// settles it ("with no row yet, the old path settles the command"; "A
// provider's notification of a charge for a released command records
// it... no one would learn of the charge otherwise"). If its
// chargeonce_row is not a charge row id (a refund row's id on a charge
// command, a row of another of the tenant's charges, garbage), the row
// path answers "found, nothing to do" and the command's record is never
// looked at: the event is acknowledged, the charge at Stripe is never
// recorded, and a released command keeps its "nothing was charged".
func TestEventWithAnOddRowStillSettlesItsCommand(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	other := r.authorized(t, "acme", 1000) // another charge's row, of the same tenant
	for _, tc := range []struct {
		name    string
		release bool
		row     func(id string) string
	}{
		{"released, its own row (control)", true, func(id string) string { return id }},
		{"released, a refund row id on a charge command", true, func(id string) string { return id + "#re_000000000000000000000000" }},
		{"released, another charge's row", true, func(string) string { return other }},
		{"in flight, a refund row id on a charge command", false, func(id string) string { return id + "#re_000000000000000000000000" }},
		{"released, not a row id", true, func(string) string { return "legacy-42" }},
	} {
		key, created := r.releasedCharge(t, tc.release)
		r.clock.Advance(time.Minute) // no attempt is running
		n := charge.Notification{
			Command: key, Reference: charge.ProviderReference(key, created), Row: tc.row(charge.ChargeID(key, created)),
			Result: provider.Result{Status: provider.StatusCharged, ChargeID: "pi_" + strings.ReplaceAll(newKey(), "-", ""), Amount: 1500},
		}
		out := r.notify(t, n)
		rec, err := r.store.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		_, found, err := r.rows(t).Get(t.Context(), "acme", charge.ChargeID(key, created))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != idem.StatusSucceeded || !found {
			t.Errorf("%s: payment_intent.succeeded for the command (row %q) is %q; its record is %s and its charge row found=%v; "+
				"want the charge recorded (SUCCEEDED, one row)", tc.name, n.Row, out, rec.Status, found)
		}
	}
}

// TestDoneEventOfAnOlderIntentIsLogged: the change logs
// an ERROR for an operator when "the provider reports a command done that
// has no row and no record" - money taken that nothing records. The same
// holds when the key was reused past its retention: the record is the new
// intent's, the event's command (its reference, its row) has no row and
// no record left. That event is acknowledged with no row, no record and
// no log line: the charge is lost without a trace.
func TestDoneEventOfAnOlderIntentIsLogged(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	key, created := r.releasedCharge(t, true) // released on evidence Stripe later contradicts
	r.clock.Advance(25 * time.Hour)           // the release expires
	_, fp, err := charge.ParseBody([]byte(chargeBody("tok_visa")))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := r.store.Begin(t.Context(), key, fp, []byte(`{"amount":1500,"currency":"EUR"}`)); err != nil || b.Lease == nil || b.Lease.CreatedAt.Equal(created) {
		t.Fatalf("the new intent's claim: %+v, %v", b, err)
	}
	r.clock.Advance(time.Minute)
	n := charge.Notification{
		Command: key, Reference: charge.ProviderReference(key, created), Row: charge.ChargeID(key, created),
		Result: provider.Result{Status: provider.StatusCharged, ChargeID: "pi_late", Amount: 1500},
	}
	out := r.notify(t, n)
	_, found, err := r.rows(t).Get(t.Context(), "acme", n.Row)
	if err != nil {
		t.Fatal(err)
	}
	logged := false
	for _, rec := range r.logs.Records(t) {
		if rec["level"] == "ERROR" {
			logged = true
		}
	}
	if !found && !logged {
		t.Fatalf("payment_intent.succeeded for the key's earlier intent (row %s) is %q: no row written and no ERROR logged; "+
			"want the charge recorded or an operator told, as for a command with no record left; logs: %s", n.Row, out, r.logs.String())
	}
}

// TestEventNamingAnotherTenantsRowChangesNothing: an event
// whose command names tenant beta but whose row and reference are acme's
// authorization finds no row in beta and no command: acme's row is left
// as it is.
func TestEventNamingAnotherTenantsRowChangesNothing(t *testing.T) {
	t.Parallel()
	r := newNotifyRig(t)
	id := r.authorized(t, "acme", 1000)
	key, created := r.command(t, id)
	beta, err := idem.NewKey("beta", charge.ChargeOperation, key.ClientKey())
	if err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(8 * day)
	for _, res := range []provider.Result{{Status: provider.StatusCanceled}, {Status: provider.StatusCharged, Amount: 10}} {
		r.notify(t, charge.Notification{Command: beta, Reference: charge.ProviderReference(key, created), Row: id, Result: res})
	}
	if st, _ := chargeStatus(t, r.do(get("acme", id))); st != charge.StatusRequiresCapture {
		t.Fatalf("acme's authorization reads %s after events naming it under beta's command, want requires_capture", st)
	}
}

// TestWebhookRecordsAChargeOfAReleasedCommand: a command was released on
// evidence Stripe's own notification now contradicts. The charge is
// recorded (SUCCEEDED, one row) and a retry replays its 201; it is never
// just logged, since no one would learn of it otherwise.
func TestWebhookRecordsAChargeOfAReleasedCommand(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	ref, lease := s.begin(tenant, "order-released", stripesim.PMVisa)
	if err := s.store.Release(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	payload := piEvent("payment_intent.succeeded", tenant, "order-released", ref)
	if resp := s.deliver(payload, sign(payload, testWhsec, time.Now())); resp.status != http.StatusOK {
		t.Fatalf("delivery: %d %s", resp.status, resp.body)
	}
	rec := s.record(tenant, "order-released")
	if rec.Status != idem.StatusSucceeded || rec.Response == nil || rec.Response.Status != http.StatusCreated {
		t.Fatalf("after the event: %+v, want SUCCEEDED with the 201", rec)
	}
	if n := s.chargeRows(tenant); n != 1 {
		t.Fatalf("%d charge rows, want 1", n)
	}
	if resp := s.charge(tenant, "order-released", stripesim.PMVisa); resp.status != http.StatusCreated || resp.header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %s, want the stored 201 replayed", resp.status, resp.body)
	}
}

// TestRefundFailedAfterSucceedingIsRecorded: the Stripe adapter
// counts a pending refund as refunded because, in its words, "Should the
// issuer return it later, its status turns failed and a webhook says so"
// (refundOutcome). The webhook (refund.failed, StatusDeclined) reaches
// Notify, which does nothing for a settled command: the refund stays
// "succeeded" in GET, amount_refunded keeps counting money the customer
// never got, and that amount can never be refunded again.
func TestRefundFailedAfterSucceedingIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	client := newKey()
	made := h.do(postRefund("acme", client, id, `{"amount":1000}`))
	wantStatus(t, made, http.StatusCreated)
	key := refundKey(t, "acme", client)
	rec, err := h.store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.recon.Notify(t.Context(), charge.Notification{
		Provider: "stripe", EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""), Command: key,
		Reference: charge.RefundReference(key, rec.CreatedAt),
		Result:    provider.Result{Status: provider.StatusDeclined, ChargeID: "re_failedlater", DeclineCode: "expired_or_canceled_card"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := h.readCharge(t, "acme", id)
	if c.AmountRefunded != 0 {
		t.Fatalf("refund.failed for a refund answered 201 (Notify outcome %q): the charge still reads %d refunded, refunds %+v",
			res.Outcome, c.AmountRefunded, c.Refunds)
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
	if ev := s.eventRecord(payload); ev != nil {
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

// TestEventClaimFaultsAreAnsweredAsWhatTheyProve: a delivery's claim of
// its event's record fails, whatever way, or stalls until the time runs
// out. A claim refused wrote nothing: 503 service-unavailable, and a
// redelivery is processed. One that may have landed is 503
// outcome-pending. Never 500, and always with time to spare before the
// function's deadline.
func TestEventClaimFaultsAreAnsweredAsWhatTheyProve(t *testing.T) {
	t.Parallel()
	faults := &storeFaults{}
	whsec := testkit.Secret(t, testWhsec)
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.WebhookSecretName = whsec }},
		deps: func(d *app.Deps) { d.Clients = faults.clients(t) },
	})
	for _, fault := range []idemtest.ConnectionFault{idemtest.Refused, idemtest.Reset, idemtest.Truncated, stalled} {
		t.Run(string(fault), func(t *testing.T) {
			t.Parallel()
			payload := piEvent("payment_intent.succeeded", "acme", newKey(), "co_x")
			req := webhookEvent(payload, sign(payload, testWhsec, time.Now()))
			faults.arm(eventID(t, payload), claimCall, fault) // the event's id marks its record's calls
			resp, left, err := h.handleWithin(t.Context(), req)
			if !faults.disarm(eventID(t, payload)) || err != nil {
				t.Fatalf("no claim was faulted (else the test proves nothing), or error %v", err)
			}
			validateContract(t, req, resp)
			want := httpapi.ProblemOutcomePending.Slug
			if fault == idemtest.Refused {
				want = httpapi.ProblemServiceUnavailable.Slug
			}
			if resp.StatusCode != http.StatusServiceUnavailable || problemType(t, resp) != want || resp.Headers[httpapi.HeaderRetryAfter] == "" {
				t.Errorf("a delivery whose event claim was %s: %d %s; want 503 %s with Retry-After", fault, resp.StatusCode, resp.Body, want)
			}
			if left < answerSpare {
				t.Errorf("answered %s before its deadline, want at least %s", left.Round(time.Millisecond), answerSpare)
			}
			if want == httpapi.ProblemServiceUnavailable.Slug {
				wantStatus(t, h.do(req), http.StatusOK)
			}
		})
	}
}

// TestCanceledNotificationDoesNotCreateASucceededCharge: a
// capture:true charge whose answer was lost is declined at the provider,
// and the PaymentIntent is then canceled (payment_intent.canceled). That
// event settles the command as a 201 "succeeded" charge: verdict treats
// StatusCanceled as a charge made whatever the intent.
func TestCanceledNotificationDoesNotCreateASucceededCharge(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	h.faultOn("/charges", providersimTimeout)
	k := newKey()
	lost := h.do(post("acme", k, `{"amount":1000,"currency":"EUR","source":"`+providersim.SourceDecline+`"}`))
	h.faultOn("", "")
	if lost.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("lost create: %d %s", lost.StatusCode, lost.Body)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, k)
	rec, err := h.store.Get(t.Context(), key)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("record: %+v, %v", rec, err)
	}
	h.clock.Advance(time.Minute) // the attempt is over
	out, err := h.recon.Notify(t.Context(), charge.Notification{
		Provider: "stripe", EventID: "evt_cancel_" + k, Command: key,
		Reference: charge.ProviderReference(key, rec.CreatedAt),
		Result:    provider.Result{Status: provider.StatusCanceled, ChargeID: "pi_x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := charge.ChargeID(key, rec.CreatedAt)
	got := h.do(get("acme", id))
	if got.StatusCode == http.StatusOK {
		st, amount := chargeStatus(t, got)
		t.Fatalf("notify %s: a capture:true charge the provider canceled reads %s %d (GET 200); nothing was charged", out.Outcome, st, amount)
	}
	_ = fmt.Sprint
}

// TestWebhookSettlesAnAmbiguousCharge is the ambiguous charge end to end:
// Stripe's edge times out while its backend goes on charging, so the
// request answers 503 outcome-pending and leaves the command IN_FLIGHT;
// when the charge lands, stripesim sends payment_intent.succeeded to the
// gateway's POST /webhooks/stripe, which settles the command without
// waiting for its lease to let a reconciler in (none runs here; the log
// gives the time it took). The retry replays the 201; Stripe charged once;
// there is one charge row, however many deliveries the event took.
func TestWebhookSettlesAnAmbiguousCharge(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant, key := testkit.UniqueName("acme"), "order-late"
	first := s.charge(tenant, key, stripesim.PMLate)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome-pending") {
		t.Fatalf("first answer = %d %s, want 503 outcome-pending", first.status, first.body)
	}
	rec := s.record(tenant, key)
	if rec == nil || rec.Status != idem.StatusInFlight || !rec.LeaseExpiresAt.After(time.Now()) {
		t.Fatalf("after the timeout the record is %+v, want IN_FLIGHT with a live lease", rec)
	}
	leaseEnds := rec.LeaseExpiresAt

	landed := time.Now()
	if n := s.sim.Land(); n != 1 {
		t.Fatalf("landed %d charges, want 1", n)
	}
	rec = s.waitSettled(tenant, key, 10*time.Second)
	settle := time.Since(landed)
	t.Logf("webhook settle time: %v from the charge landing at Stripe to the record SUCCEEDED (the lease had %v left)",
		settle.Round(time.Millisecond), leaseEnds.Sub(landed).Round(time.Millisecond))
	if rec.Status != idem.StatusSucceeded || rec.Response.Status != http.StatusCreated {
		t.Fatalf("settled record = %s %+v, want SUCCEEDED with the 201", rec.Status, rec.Response)
	}

	retry := s.charge(tenant, key, stripesim.PMLate)
	if retry.status != http.StatusCreated || retry.header.Get(httpapi.HeaderReplayed) != "true" || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %v %s, want the stored 201 replayed", retry.status, retry.header, retry.body)
	}
	s.chargedOnce(tenant, retry.body)

	// Stripe delivers at least once, and redelivers an event whose answer
	// was slow (under load, the settlement can outlast the sender's
	// timeout): every delivery is of the one event, and the same event
	// again is acknowledged as a replay and changes nothing.
	s.sim.WaitWebhooks()
	s.mu.Lock()
	delivered := s.webhooks
	s.mu.Unlock()
	if len(delivered) == 0 {
		t.Fatal("no webhook delivery")
	}
	for _, d := range delivered[1:] {
		if eventID(t, d) != eventID(t, delivered[0]) {
			t.Fatalf("deliveries of two events %s and %s, want one event", eventID(t, delivered[0]), eventID(t, d))
		}
	}
	again := s.deliver(delivered[0], sign(delivered[0], testWhsec, time.Now()))
	if again.status != http.StatusOK || again.header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("redelivery = %d %v %s, want 200 replayed", again.status, again.header, again.body)
	}
	if after := s.record(tenant, key); after.LeaseToken != rec.LeaseToken || after.Attempts != rec.Attempts {
		t.Errorf("the redelivery changed the record: %+v, was %+v", after, rec)
	}
	if ev := s.eventRecord(delivered[0]); ev == nil || ev.Status != idem.StatusSucceeded {
		t.Errorf("the event's deduplication record = %+v, want SUCCEEDED", ev)
	}
}

// TestWebhookRefusesABadSignature: a delivery that does not verify is
// refused with 400 problem+json and stores nothing, neither for the event
// nor for the command it names.
func TestWebhookRefusesABadSignature(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant, key := testkit.UniqueName("acme"), "order-forged"
	ref, _ := s.begin(tenant, key, stripesim.PMVisa)
	payload := piEvent("payment_intent.succeeded", tenant, key, ref)
	for name, sig := range map[string]string{
		"no signature":    "",
		"another secret":  sign(payload, "whsec_someone_else", time.Now()),
		"stale timestamp": sign(payload, testWhsec, time.Now().Add(-10*time.Minute)),
		"garbled header":  "t=abc,v1=zz",
	} {
		resp := s.deliver(payload, sig)
		if resp.status != http.StatusBadRequest || !strings.HasPrefix(resp.header.Get("Content-Type"), httpapi.ContentTypeProblem) {
			t.Errorf("%s: answer = %d %s, want 400 problem+json", name, resp.status, resp.body)
		}
	}
	tampered := bytes.Replace(payload, []byte(`"amount":1500`), []byte(`"amount":1`), 1)
	if resp := s.deliver(tampered, sign(payload, testWhsec, time.Now())); resp.status != http.StatusBadRequest {
		t.Errorf("tampered payload: answer = %d, want 400", resp.status)
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusInFlight || rec.Attempts != 0 {
		t.Errorf("a refused delivery changed the command: %+v", rec)
	}
	if ev := s.eventRecord(payload); ev != nil {
		t.Errorf("a refused delivery stored the event: %+v", ev)
	}

	// Without a signing secret configured, nothing verifies.
	off := newStripeStack(t, 4*time.Second, func(c *app.ChargeConfig) { c.WebhookSecretName = "" }, nil)
	ref, _ = off.begin(tenant, key, stripesim.PMVisa)
	payload = piEvent("payment_intent.succeeded", tenant, key, ref)
	if resp := off.deliver(payload, sign(payload, testWhsec, time.Now())); resp.status != http.StatusBadRequest {
		t.Errorf("with no secret configured: answer = %d %s, want 400", resp.status, resp.body)
	}
	if rec := off.record(tenant, key); rec.Status != idem.StatusInFlight {
		t.Errorf("with no secret configured, a delivery changed the command: %+v", rec)
	}
}

// TestWebhookSettlesADeclineAndIgnoresTheRest: payment_failed settles an
// IN_FLIGHT command as the 402 a retry replays; events for an unknown
// command, a settled one, another intent's reference, or of another type
// are acknowledged and change nothing.
func TestWebhookSettlesADeclineAndIgnoresTheRest(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	deliver := func(payload []byte) response {
		t.Helper()
		resp := s.deliver(payload, sign(payload, testWhsec, time.Now()))
		if resp.status != http.StatusOK || resp.body != `{"received":true}` {
			t.Fatalf("answer = %d %s, want 200 received", resp.status, resp.body)
		}
		return resp
	}

	ref, _ := s.begin(tenant, "order-declined", stripesim.PMInsufficientFunds)
	deliver(piEvent("payment_intent.payment_failed", tenant, "order-declined", ref))
	rec := s.record(tenant, "order-declined")
	if rec.Status != idem.StatusFailedPermanent || rec.Response.Status != http.StatusPaymentRequired || !bytes.Contains(rec.Response.Body, []byte("insufficient_funds")) {
		t.Fatalf("declined command = %s %+v, want FAILED_PERMANENT with the 402", rec.Status, rec.Response)
	}
	retry := s.charge(tenant, "order-declined", stripesim.PMInsufficientFunds)
	if retry.status != http.StatusPaymentRequired || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %s, want the stored 402", retry.status, retry.body)
	}

	// Settled already: a later event of the other kind changes nothing.
	deliver(piEvent("payment_intent.succeeded", tenant, "order-declined", ref))
	if after := s.record(tenant, "order-declined"); after.Status != idem.StatusFailedPermanent || after.LeaseToken != rec.LeaseToken {
		t.Errorf("an event for a settled command changed it: %+v", after)
	}
	// Unknown command: nothing is created.
	deliver(piEvent("payment_intent.succeeded", tenant, "order-unknown", "co_unknown"))
	if rec := s.record(tenant, "order-unknown"); rec != nil {
		t.Errorf("an event for an unknown command stored %+v", rec)
	}
	// Another intent's reference (an earlier use of the key): nothing.
	_, _ = s.begin(tenant, "order-reused", stripesim.PMVisa)
	deliver(piEvent("payment_intent.succeeded", tenant, "order-reused", "co_an_earlier_intent"))
	if rec := s.record(tenant, "order-reused"); rec.Status != idem.StatusInFlight || rec.Attempts != 0 {
		t.Errorf("an event for another intent's reference changed the command: %+v", rec)
	}
	// Another event type, and a PaymentIntent without our metadata.
	other := bytes.Replace(piEvent("payment_intent.succeeded", tenant, "order-reused", "x"), []byte(`"payment_intent.succeeded"`), []byte(`"charge.refunded"`), 1)
	deliver(other)
	deliver([]byte(`{"id":"evt_foreign","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_foreign","object":"payment_intent","status":"succeeded","metadata":{}}}}`))
	if n := s.chargeRows(tenant); n != 0 {
		t.Errorf("%d charge rows, want none", n)
	}
}

// TestWebhookFencesOffTheLateOriginal: Stripe charges and sends its
// webhook, but its answer to the request reaches the charge function only
// later. The webhook gives the running attempt InflightWait, then preempts
// its lease and settles the command; the original's late commit is refused
// by the fence, so it answers outcome-pending, and nothing is recorded
// twice: one charge at Stripe, one charge row, and the retry replays the
// webhook's 201.
func TestWebhookFencesOffTheLateOriginal(t *testing.T) {
	t.Parallel()
	const late = 2 * time.Second
	slowAnswers := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if r.Method == http.MethodPost {
				time.Sleep(late) // charged (and the webhook sent); the answer is late
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	}
	s := newStripeStack(t, 8*time.Second, func(c *app.ChargeConfig) { c.InflightWait = 300 * time.Millisecond }, slowAnswers)
	tenant, key := testkit.UniqueName("acme"), "order-raced"
	first := s.charge(tenant, key, stripesim.PMVisa)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome-pending") {
		t.Fatalf("the original's answer = %d %s, want 503 outcome-pending (its lease was preempted)", first.status, first.body)
	}
	rec := s.record(tenant, key)
	if rec.Status != idem.StatusSucceeded || rec.Attempts != 1 {
		t.Fatalf("record = %s (attempts %d), want SUCCEEDED by the webhook's take-over", rec.Status, rec.Attempts)
	}
	retry := s.charge(tenant, key, stripesim.PMVisa)
	if retry.status != http.StatusCreated || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %s, want the webhook's 201", retry.status, retry.body)
	}
	s.chargedOnce(tenant, retry.body)
}

// TestWebhookSettlesWhileTheRequestWaits: Stripe charges but its answer
// never comes (pm_sim_timeout); its webhook arrives while the request is
// still waiting, is given INFLIGHT_WAIT, then settles the command, so the
// request's eventual 503 outcome-pending is already out of date: the
// retry replays the webhook's 201, and Stripe charged once.
func TestWebhookSettlesWhileTheRequestWaits(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 8*time.Second, nil, nil)
	tenant, key := testkit.UniqueName("acme"), "order-timeout"
	start := time.Now()
	first := s.charge(tenant, key, stripesim.PMTimeout)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome-pending") {
		t.Fatalf("the request whose answer never came = %d %s, want 503 outcome-pending", first.status, first.body)
	}
	rec := s.record(tenant, key)
	if rec.Status != idem.StatusSucceeded {
		t.Fatalf("when the request gave up after %v the record was %s, want SUCCEEDED by the webhook", time.Since(start).Round(time.Millisecond), rec.Status)
	}
	retry := s.charge(tenant, key, stripesim.PMTimeout)
	if retry.status != http.StatusCreated || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %s, want the webhook's 201", retry.status, retry.body)
	}
	s.chargedOnce(tenant, retry.body)
}

// stuck reports whether key is in the stuck-lease index with a lease that
// ends before before, in any shard: what the sweeper queues.
func (s *stripeStack) stuck(key idem.Key, before time.Time) bool {
	s.t.Helper()
	for shard := range s.store.Shards() {
		for sl, err := range s.store.StuckLeases(s.t.Context(), shard, before) {
			if err != nil {
				s.t.Fatal(err)
			}
			if sl.Key == key {
				return true
			}
		}
	}
	return false
}

// TestReconcileReleasesADeadDelivery: a delivery that claimed its event
// and died leaves the event's record IN_FLIGHT. While its lease runs, the
// reconciler leaves it alone; once the lease has run out, it takes the
// record over and releases it, without asking Stripe, so it leaves the
// stuck-lease index (the sweeper queues it no more). Stripe's redelivery
// then claims the released record again and settles the command as the
// first delivery would have: one charge row, the command and the event
// SUCCEEDED.
func TestReconcileReleasesADeadDelivery(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStripeStack(t, 4*time.Second, func(c *app.ChargeConfig) { c.InflightWait = 100 * time.Millisecond }, nil)
	clock := testkit.NewClock(time.Now())
	recon := s.d.ReconcileService(t, func(w *testkit.Wiring) { w.Deps.Clock = clock.Now })
	reconcile := func(key idem.Key, want charge.Outcome) {
		t.Helper()
		if got, err := recon.Reconcile(ctx, key); err != nil || got != want {
			t.Fatalf("Reconcile = %q, %v; want %q", got, err, want)
		}
	}
	tenant, key := testkit.UniqueName("acme"), "order-dead-delivery"
	ref, _ := s.begin(tenant, key, stripesim.PMVisa)
	payload := piEvent("payment_intent.succeeded", tenant, key, ref)
	ev := eventKey(t, payload)
	reconcile(ev, charge.OutcomeNothingToDo) // no delivery yet

	// The delivery that died: it claimed the event as Notify does.
	if _, err := s.store.Begin(ctx, ev, idem.FingerprintOf([]byte(ev.ClientKey())), nil); err != nil {
		t.Fatal(err)
	}
	claimed := s.eventRecord(payload)
	reconcile(ev, charge.OutcomeStillLeased)
	if rec := s.eventRecord(payload); rec.Status != idem.StatusInFlight || rec.LeaseToken != claimed.LeaseToken || rec.Attempts != 0 {
		t.Fatalf("a live lease was touched: %+v", rec)
	}

	clock.Advance(time.Minute) // past the dead delivery's lease
	if !s.stuck(ev, clock.Now()) {
		t.Fatal("the dead delivery's record is not in the stuck-lease index")
	}
	reconcile(ev, charge.OutcomeReleased)
	if rec := s.eventRecord(payload); rec.Status != idem.StatusReleased || rec.Attempts != 1 {
		t.Fatalf("event record = %s (attempts %d), want RELEASED by one take-over", rec.Status, rec.Attempts)
	}
	if s.stuck(ev, clock.Now().Add(time.Hour)) {
		t.Fatal("the released record is still in the stuck-lease index")
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusInFlight {
		t.Fatalf("releasing the event settled the command: %+v", rec)
	}

	resp := s.deliver(payload, sign(payload, testWhsec, time.Now()))
	if resp.status != http.StatusOK || resp.header.Get(httpapi.HeaderReplayed) != "" {
		t.Fatalf("redelivery = %d %v %s, want 200, not a replay", resp.status, resp.header, resp.body)
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusSucceeded || rec.Response.Status != http.StatusCreated {
		t.Fatalf("command = %s %+v, want SUCCEEDED with the 201", rec.Status, rec.Response)
	}
	if n := s.chargeRows(tenant); n != 1 {
		t.Errorf("%d charge rows, want 1", n)
	}
	if rec := s.eventRecord(payload); rec.Status != idem.StatusSucceeded {
		t.Errorf("event record = %s, want SUCCEEDED", rec.Status)
	}
	reconcile(ev, charge.OutcomeNothingToDo) // a settled event's stale message
}

// claimingStore, once armed, runs then after the next Get of key returns:
// the moment between a settlement's check of the record and its Preempt.
type claimingStore struct {
	charge.Store
	mu   sync.Mutex
	key  idem.Key
	then func(rec *idem.Record)
}

func (s *claimingStore) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	rec, err := s.Store.Get(ctx, key)
	s.mu.Lock()
	then := s.then
	if key == s.key && err == nil {
		s.then = nil
	}
	s.mu.Unlock()
	if then != nil && key == s.key && err == nil {
		then(rec)
	}
	return rec, err
}

// TestNotificationForAnExpiredCommandSettlesNotItsSuccessor: a provider's
// notification is checked against the command the record holds, a
// released one here. If that record expires and a new intent claims the
// key before the settlement preempts it, the old charge must not be
// recorded as the new intent's: the preemption is of the command checked.
func TestNotificationForAnExpiredCommandSettlesNotItsSuccessor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := testkit.NewClock(time.Now())
	mem := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	store := &claimingStore{Store: mem}
	svc, key, old := releasedCharge(t, mem, store, nil)
	var successor time.Time
	store.mu.Lock()
	store.key, store.then = key, func(rec *idem.Record) {
		clock.Advance(72 * time.Hour) // the release expires
		begun, err := store.Store.Begin(ctx, key, idem.FingerprintOf([]byte("the new intent")), rec.Intent)
		if err != nil || begun.Lease == nil {
			t.Errorf("the new intent's claim: %+v, %v", begun, err)
			return
		}
		successor = begun.Lease.CreatedAt
	}
	store.mu.Unlock()
	n := charge.Notification{
		Provider: "stripe", EventID: "evt_" + key.ClientKey(), Command: key,
		Reference: charge.ProviderReference(key, old.CreatedAt),
		Result:    provider.Result{Status: provider.StatusCharged, ChargeID: "pi_old"},
	}
	if _, err := svc.Notify(ctx, n); err != nil {
		t.Fatalf("notify: %v", err)
	}
	rec, err := store.Get(ctx, key)
	if err != nil || !rec.CreatedAt.Equal(successor) || rec.Status != idem.StatusInFlight {
		t.Fatalf("the new intent's record %+v, %v; want it IN_FLIGHT, untouched by the old command's charge", rec, err)
	}
}

// TestAnEventTakeOverWhoseAnswerWasLostIsOutcomePending: a redelivery
// takes over an event's record whose delivery died. The take-over lands,
// but its answer is lost. It may have landed, so the answer is
// outcome-pending, not service-unavailable.
func TestAnEventTakeOverWhoseAnswerWasLostIsOutcomePending(t *testing.T) {
	t.Parallel()
	faults := &storeFaults{}
	clock := testkit.NewClock(time.Now())
	whsec := testkit.Secret(t, testWhsec)
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.WebhookSecretName = whsec }},
		deps: func(d *app.Deps) { d.Clients, d.Clock = faults.clients(t), clock.Now },
	})
	payload := piEvent("payment_intent.succeeded", "acme", newKey(), "co_x")
	id := eventID(t, payload)
	key := eventKey(t, payload)
	// A delivery claimed the event, then died.
	if _, err := h.store.Begin(t.Context(), key, idem.FingerprintOf([]byte(key.ClientKey())), nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // its lease ran out
	takeOver := storeCall{"take over", "UpdateItem", "ADD #att :one"}
	faults.arm(id, takeOver, idemtest.Reset)
	req := webhookEvent(payload, sign(payload, testWhsec, time.Now()))
	resp, _, err := h.handleWithin(t.Context(), req)
	if !faults.disarm(id) || err != nil {
		t.Fatalf("no take-over was faulted (the test proves nothing), or error %v", err)
	}
	rec, gerr := h.store.Get(t.Context(), key)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if got := problemType(t, resp); resp.StatusCode != http.StatusServiceUnavailable || got != httpapi.ProblemOutcomePending.Slug {
		t.Fatalf("a redelivery whose take-over landed unanswered (record now %s, %d take-overs): %d %s; want 503 outcome-pending",
			rec.Status, rec.Attempts, resp.StatusCode, got)
	}
}

// preemptOnCommit is a DynamoDB transport that, before the first
// TransactWriteItems it sees once armed, lets another settler preempt
// the command's record (a second event for it, or chargectl settle),
// then forwards the transaction.
type preemptOnCommit struct {
	mu      sync.Mutex
	armed   func()
	preempt bool
}

func (p *preemptOnCommit) RoundTrip(req *http.Request) (*http.Response, error) {
	p.mu.Lock()
	fn := p.armed
	if fn != nil && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		p.armed, p.preempt = nil, true
	} else {
		fn = nil
	}
	p.mu.Unlock()
	if fn != nil {
		fn()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestAWebhookPreemptedMeanwhileIsNot500: an event preempts its charge's
// command, and another settler preempts it before the event commits. The
// event was claimed: its answer is 503 outcome-pending, never 500.
func TestAWebhookPreemptedMeanwhileIsNot500(t *testing.T) {
	t.Parallel()
	hook := &preemptOnCommit{}
	clock := testkit.NewClock(time.Now())
	whsec := testkit.Secret(t, testWhsec)
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.WebhookSecretName = whsec }},
		deps: func(d *app.Deps) {
			d.Clock = clock.Now
			d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: hook} })
		},
	})
	k := newKey()
	lost := h.do(post("acme", k, `{"amount":1500,"currency":"EUR","source":"`+providersim.SourceTimeoutOnce+`"}`))
	wantStatus(t, lost, http.StatusServiceUnavailable)
	key := mustKey(t, "acme", k)
	rec, err := h.store.Get(t.Context(), key)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("record: %+v, %v", rec, err)
	}
	clock.Advance(time.Minute) // its attempt is over
	hook.mu.Lock()
	hook.armed = func() {
		if _, err := h.store.Preempt(context.Background(), key, rec.CreatedAt); err != nil {
			t.Errorf("the other settler's preemption: %v", err)
		}
	}
	hook.mu.Unlock()
	payload := piEvent("payment_intent.succeeded", "acme", k, charge.ProviderReference(key, rec.CreatedAt))
	resp := h.do(webhookEvent(payload, sign(payload, testWhsec, time.Now())))
	if !hook.preempt {
		t.Fatal("no commit was preempted: the test proves nothing")
	}
	if resp.StatusCode == http.StatusInternalServerError {
		t.Fatalf("a claimed event whose settlement lost its lease: %d %s", resp.StatusCode, resp.Body)
	}
}

// unknownPreempt is a Store whose Preempt lands, then answers as one
// whose read after its clear was lost: *idem.UnknownClaimError, its Err
// unavailable (claims.Leased).
type unknownPreempt struct{ charge.Store }

func (s unknownPreempt) Preempt(ctx context.Context, key idem.Key, created time.Time) (*idem.Lease, error) {
	l, err := s.Store.Preempt(ctx, key, created)
	if err != nil {
		return nil, err
	}
	return nil, &idem.UnknownClaimError{LeaseExpiresAt: l.ExpiresAt, RecordExpiresAt: l.RecordExpiresAt,
		Err: fmt.Errorf("the read after the clear is lost: %w", idem.ErrUnavailable)}
}

// TestANotificationWhosePreemptIsUnknownIsNotBusy: a charge notification
// preempts its released command, and the preempt's answer is an unknown
// claim. The command is IN_FLIGHT under a lease nobody holds. busy says
// nothing was recorded: the answer is ambiguous, delivered again.
func TestANotificationWhosePreemptIsUnknownIsNotBusy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	mem, q := memstore.New(), &queuedKeys{}
	svc, key, released := releasedCharge(t, mem, unknownPreempt{mem}, q)
	res, err := svc.Notify(ctx, chargedEvent(key, released))
	if rec, gerr := mem.Get(ctx, key); gerr != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the record %+v, %v; want IN_FLIGHT: the preempt landed", rec, gerr)
	}
	if err != nil || res.Outcome != charge.OutcomeAmbiguous {
		t.Fatalf("the notification whose preempt is unknown: %+v, %v; want %s (busy says nothing was recorded)", res, err, charge.OutcomeAmbiguous)
	}
	if q.queued(key) != 1 {
		t.Fatalf("the unknown preempt's key queued %d times; want once, for the reconciler", q.queued(key))
	}
}

// releasedCharge is a service on store, whose records mem holds, and a
// charge of a new key it released: its provider was unavailable. q, if
// not nil, is its reconcile queue. It returns the service, the key and
// the RELEASED record.
func releasedCharge(t *testing.T, mem *memstore.Store, store charge.Store, q charge.ReconcileQueue) (*charge.Service, idem.Key, *idem.Record) {
	t.Helper()
	d := testkit.Deploy(t)
	mem.DeclareKey(d.ChargesTable, charge.AttrTenant, charge.AttrID)
	return releaseCharge(t, d, mem, store, q)
}

// releaseCharge is releasedCharge on deployment d. records reads store's
// records without its wrappers.
func releaseCharge(t *testing.T, d *testkit.Deployment, records, store charge.Store, q charge.ReconcileQueue) (*charge.Service, idem.Key, *idem.Record) {
	t.Helper()
	ctx := t.Context()
	prov := &unavailableProvider{store: store}
	rows, err := charge.NewRows(testkit.Clients(t).DynamoDB, d.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Config{Store: store, Rows: rows, Provider: prov, Answers: httpapi.Answers{}, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.NewHandler(svc)
	if err != nil {
		t.Fatal(err)
	}
	clientKey := newKey()
	key, err := idem.NewKey("acme", charge.ChargeOperation, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	prov.expect(key)
	if resp, err := h.Handle(ctx, post("acme", clientKey, visa)); err != nil || resp.StatusCode != 503 {
		t.Fatalf("first request: %d, %v; want 503 provider-unavailable (released)", resp.StatusCode, err)
	}
	rec, err := records.Get(ctx, key)
	if err != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("record %+v, %v; want RELEASED", rec, err)
	}
	return svc, key, rec
}

// chargedEvent is the provider's event that the command rec records was
// charged.
func chargedEvent(key idem.Key, rec *idem.Record) charge.Notification {
	return charge.Notification{
		Provider: "stripe", EventID: "evt_" + key.ClientKey(), Command: key,
		Reference: charge.ProviderReference(key, rec.CreatedAt),
		Result:    provider.Result{Status: provider.StatusCharged, ChargeID: "pi_1"},
	}
}

// armedLedger refuses the Ledger's next claim extension, or its next
// Settle, once armed: throttled, unapplied.
type armedLedger struct {
	*memstore.Ledger
	extend, settle atomic.Bool
}

// errThrottled is a Ledger write refused, unapplied.
var errThrottled = fmt.Errorf("throttled: %w", idem.ErrUnavailable)

func (l *armedLedger) Extend(ctx context.Context, key idem.Key, region string, created, until time.Time) error {
	if l.extend.CompareAndSwap(true, false) {
		return errThrottled
	}
	return l.Ledger.Extend(ctx, key, region, created, until)
}

func (l *armedLedger) Settle(ctx context.Context, key idem.Key, region string, created time.Time) error {
	if l.settle.CompareAndSwap(true, false) {
		return errThrottled
	}
	return l.Ledger.Settle(ctx, key, region, created)
}

// TestANotificationWhosePreemptLandedIsNotBusy: on DynamoDB a Preempt
// writes its record, then extends the Ledger's claim. If that extension
// fails, the released command is IN_FLIGHT under a lease nobody holds.
// "busy" says nothing happened.
func TestANotificationWhosePreemptLandedIsNotBusy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := testkit.Deploy(t)
	ledger := &armedLedger{Ledger: memstore.NewLedger(nil)}
	st, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Region, o.Ledger = "a", ledger })
	if err != nil {
		t.Fatal(err)
	}
	q := &queuedKeys{}
	svc, key, released := releaseCharge(t, d, st, st, q)
	ledger.extend.Store(true)
	res, err := svc.Notify(ctx, chargedEvent(key, released))
	rec, gerr := st.Get(ctx, key)
	if gerr != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the record %+v, %v; want IN_FLIGHT: the preempt's write landed", rec, gerr)
	}
	if err != nil || res.Outcome == charge.OutcomeBusy {
		t.Fatalf("the notification whose preempt landed, its claim not extended: %+v, %v; want %s, not %s (nothing happened)",
			res, err, charge.OutcomeAmbiguous, charge.OutcomeBusy)
	}
	if q.queued(key) != 1 {
		t.Fatalf("the key preempted under nobody's lease queued %d times; want once, for the reconciler", q.queued(key))
	}
}

// TestANotificationWhoseCommitLandedIsNotBusy: the preempting lease's
// Commit writes SUCCEEDED, then its claim's Settle fails. The charge is
// recorded; "busy" says nothing happened.
func TestANotificationWhoseCommitLandedIsNotBusy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ledger := &armedLedger{Ledger: memstore.NewLedger(nil)}
	mem := memstore.New(func(o *memstore.Options) { o.Region, o.Ledger = "a", ledger })
	q := &queuedKeys{}
	svc, key, released := releasedCharge(t, mem, mem, q)
	ledger.settle.Store(true)
	res, err := svc.Notify(ctx, chargedEvent(key, released))
	if rec, gerr := mem.Get(ctx, key); gerr != nil || rec.Status != idem.StatusSucceeded {
		t.Fatalf("the record %+v, %v; want SUCCEEDED: the commit landed", rec, gerr)
	}
	if err != nil || res.Outcome == charge.OutcomeBusy {
		t.Fatalf("the notification whose commit landed, its claim not settled: %+v, %v; want %s, not %s (nothing happened)",
			res, err, charge.OutcomeAmbiguous, charge.OutcomeBusy)
	}
	if q.queued(key) != 1 {
		t.Fatalf("the key whose claim is not settled queued %d times; want once: the reconciler settles the claim", q.queued(key))
	}
}
