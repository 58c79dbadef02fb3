package charge_test

// Provider events settle the durable rows, long after the command's
// record has expired.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
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
		resp, _ := r.handler.Handle(context.Background(), postRefund("acme", client, id, `{"amount":600}`))
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
