package charge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

var postMove = testkit.PostMove

// authorized creates a charge of amount to capture later and returns its
// id.
func (h *harness) authorized(t *testing.T, tenant string, amount int64) string {
	t.Helper()
	resp := h.do(post(tenant, newKey(), fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":"tok_visa","capture":false}`, amount)))
	wantStatus(t, resp, http.StatusCreated)
	var c struct {
		ID, Status       string
		AmountAuthorized int64 `json:"amount_authorized"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil || c.Status != charge.StatusRequiresCapture || c.AmountAuthorized != amount {
		t.Fatalf("authorization: %s, %v; want requires_capture of %d", resp.Body, err, amount)
	}
	return c.ID
}

func chargeStatus(t *testing.T, resp events.APIGatewayV2HTTPResponse) (status string, amount int64) {
	t.Helper()
	var c struct {
		Status       any
		ChargeStatus string `json:"charge_status"`
		Amount       int64
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	if c.ChargeStatus != "" {
		return c.ChargeStatus, 0
	}
	st, _ := c.Status.(string)
	return st, c.Amount
}

func TestAuthorizeThenCaptureOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.authorized(t, "acme", 1000)
	first := h.do(postMove("acme", id, "capture", ""))
	wantStatus(t, first, http.StatusOK)
	if st, amount := chargeStatus(t, first); st != charge.StatusSucceeded || amount != 1000 {
		t.Fatalf("capture: %s", first.Body)
	}
	for _, body := range []string{"", "{}", `{"amount":1000}`} {
		again := h.do(postMove("acme", id, "capture", body))
		if again.StatusCode != http.StatusOK || again.Body != first.Body {
			t.Fatalf("repeat %q: %d %s, want the same 200 %s", body, again.StatusCode, again.Body, first.Body)
		}
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Fatalf("provider captured %d times, want once", n)
	}
	if got := h.do(get("acme", id)); got.Body != first.Body {
		t.Fatalf("GET %s, want %s", got.Body, first.Body)
	}
}

// TestPartialCaptureSetsTheAmount: what was captured is what refunds may
// return; a repeat with another amount is a conflict.
func TestPartialCaptureSetsTheAmount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.authorized(t, "acme", 1000)
	resp := h.do(postMove("acme", id, "capture", `{"amount":600}`))
	wantStatus(t, resp, http.StatusOK)
	if st, amount := chargeStatus(t, resp); st != charge.StatusSucceeded || amount != 600 {
		t.Fatalf("partial capture: %s", resp.Body)
	}
	other := h.do(postMove("acme", id, "capture", `{"amount":700}`))
	if other.StatusCode != http.StatusConflict || problemType(t, other) != "charge-state-conflict" {
		t.Fatalf("repeat with another amount: %d %s", other.StatusCode, other.Body)
	}
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":700}`)), http.StatusConflict)
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":600}`)), http.StatusCreated)
	above := h.do(postMove("acme", h.authorized(t, "acme", 1000), "capture", `{"amount":1001}`))
	if above.StatusCode != http.StatusBadRequest || problemType(t, above) != "invalid-request" {
		t.Fatalf("capture above the authorization: %d %s", above.StatusCode, above.Body)
	}
}

func TestCancelAndCaptureExcludeEachOther(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	canceled := h.authorized(t, "acme", 1000)
	first := h.do(postMove("acme", canceled, "cancel", ""))
	wantStatus(t, first, http.StatusOK)
	if st, _ := chargeStatus(t, first); st != charge.StatusCanceled {
		t.Fatalf("cancel: %s", first.Body)
	}
	if again := h.do(postMove("acme", canceled, "cancel", "")); again.StatusCode != http.StatusOK || again.Body != first.Body {
		t.Fatalf("repeat cancel: %d %s", again.StatusCode, again.Body)
	}
	late := h.do(postMove("acme", canceled, "capture", ""))
	if st, _ := chargeStatus(t, late); late.StatusCode != http.StatusConflict || st != charge.StatusCanceled {
		t.Fatalf("capture of a canceled charge: %d %s, want 409 naming canceled", late.StatusCode, late.Body)
	}
	captured := h.authorized(t, "acme", 1000)
	wantStatus(t, h.do(postMove("acme", captured, "capture", "")), http.StatusOK)
	undo := h.do(postMove("acme", captured, "cancel", ""))
	if st, _ := chargeStatus(t, undo); undo.StatusCode != http.StatusConflict || st != charge.StatusSucceeded {
		t.Fatalf("cancel of a captured charge: %d %s, want 409 naming succeeded", undo.StatusCode, undo.Body)
	}
	if n := h.captures(t, "acme", canceled); n != 0 {
		t.Fatalf("the canceled charge was captured %d times", n)
	}
	// A charge captured at creation cannot be captured or canceled again.
	plain := h.charged(t, "acme", 1000)
	wantStatus(t, h.do(postMove("acme", plain, "capture", "")), http.StatusOK)
	wantStatus(t, h.do(postMove("acme", plain, "cancel", "")), http.StatusConflict)
	// Refunds apply to captured charges only.
	wantStatus(t, h.do(postRefund("acme", newKey(), h.authorized(t, "acme", 1000), "")), http.StatusConflict)
}

// TestConcurrentCapturesMakeOneCapture: eight captures, and a capture
// racing a cancel, each end in one provider effect, every answer agreeing
// with the final state.
func TestConcurrentCapturesMakeOneCapture(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.InflightWait = 5 * time.Second })
	id := h.authorized(t, "acme", 1000)
	answers := h.concurrently(t, 8, func(int) events.APIGatewayV2HTTPRequest { return postMove("acme", id, "capture", "") })
	for _, a := range answers {
		if a.StatusCode != http.StatusOK || a.Body != answers[0].Body {
			t.Fatalf("concurrent captures answered %d %s and %s", a.StatusCode, a.Body, answers[0].Body)
		}
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Fatalf("provider captured %d times, want once", n)
	}
	race := h.authorized(t, "acme", 1000)
	answers = h.concurrently(t, 2, func(i int) events.APIGatewayV2HTTPRequest {
		return postMove("acme", race, []string{"capture", "cancel"}[i], "")
	})
	final, _ := chargeStatus(t, h.do(get("acme", race)))
	for i, a := range answers {
		st, _ := chargeStatus(t, a)
		won := []string{charge.StatusSucceeded, charge.StatusCanceled}[i] == final
		if st != final || won != (a.StatusCode == http.StatusOK) {
			t.Fatalf("answer %d: %d %s; the charge ended %s", i, a.StatusCode, a.Body, final)
		}
	}
}

func (h *harness) concurrently(t *testing.T, n int, req func(i int) events.APIGatewayV2HTTPRequest) []events.APIGatewayV2HTTPResponse {
	t.Helper()
	out := make([]events.APIGatewayV2HTTPResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := h.handler.Handle(t.Context(), req(i))
			if err != nil {
				t.Error(err)
			}
			out[i] = resp
		})
	}
	wg.Wait()
	return out
}

// TestMoveNeedsNoKey: a key sent is ignored; two keys are one capture.
func TestMoveNeedsNoKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.authorized(t, "acme", 1000)
	a, b := postMove("acme", id, "capture", ""), postMove("acme", id, "capture", "")
	a.Headers["idempotency-key"], b.Headers["idempotency-key"] = "k1", "k2"
	first, second := h.do(a), h.do(b)
	if first.StatusCode != http.StatusOK || second.Body != first.Body {
		t.Fatalf("captures with two keys: %d %s / %s", first.StatusCode, first.Body, second.Body)
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Fatalf("captured %d times", n)
	}
	wantStatus(t, h.do(postMove("globex", id, "capture", "")), http.StatusNotFound)
	wantStatus(t, h.do(postMove("acme", "ch_x", "cancel", "")), http.StatusNotFound)
}

// TestMovesCountTheirOutcomes: a capture or cancel has no key, so its
// metrics name the route's operation, with an outcome for every answer,
// success and 404 included; none is dropped as undefined.
func TestMovesCountTheirOutcomes(t *testing.T) {
	t.Parallel()
	emf := &testkit.LogBuffer{}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) { d.Metrics = emf }})
	captured, canceled := h.authorized(t, "acme", 1000), h.authorized(t, "acme", 1000)
	for _, step := range []struct {
		req  events.APIGatewayV2HTTPRequest
		want int
	}{
		{postMove("acme", captured, "capture", ""), http.StatusOK},
		{postMove("acme", captured, "capture", ""), http.StatusOK},
		{postMove("acme", captured, "cancel", ""), http.StatusConflict},
		{postMove("acme", canceled, "cancel", ""), http.StatusOK},
		{postMove("globex", canceled, "cancel", ""), http.StatusNotFound},
	} {
		wantStatus(t, h.do(step.req), step.want)
	}
	got := map[string]float64{}
	for _, line := range emf.Records(t) {
		if op, _ := line[metrics.DimOperation].(string); op == string(metrics.OperationCapture) || op == string(metrics.OperationCancel) {
			n, _ := line[string(metrics.Requests)].(float64)
			got[op+" "+fmt.Sprint(line[metrics.DimOutcome])] += n
		}
	}
	want := map[string]float64{"capture-charge captured": 2, "cancel-charge state-conflict": 1, "cancel-charge canceled": 1, "cancel-charge not-found": 1}
	if !maps.Equal(got, want) {
		t.Errorf("move metrics %v, want %v", got, want)
	}
	if strings.Contains(h.logs.String(), "writing metrics failed") {
		t.Errorf("a move's metric was refused:\n%s", h.logs)
	}
}

// TestLostCaptureIsSettledFromTheProvidersState: the capture's answer is
// lost after the provider captured. The client hears outcome-pending, the
// charge reads capturing, and once its deadline passes the reconciler
// (found by the sweeper) reads the provider's state and settles it.
func TestLostCaptureIsSettledFromTheProvidersState(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.authorized(t, "acme", 1000)
	h.faultOn("/capture", providersimTimeout)
	lost := h.do(postMove("acme", id, "capture", ""))
	if lost.StatusCode != http.StatusServiceUnavailable || problemType(t, lost) != "outcome-pending" {
		t.Fatalf("lost capture: %d %s", lost.StatusCode, lost.Body)
	}
	h.faultOn("", "")
	if st, _ := chargeStatus(t, h.do(get("acme", id))); st != charge.StatusCapturing {
		t.Fatalf("charge after a lost capture reads %s, want capturing", st)
	}
	h.clock.Advance(time.Minute)
	key, _ := idem.NewKey("acme", charge.TransitionOperation, id)
	if out, err := h.recon.Reconcile(t.Context(), key); err != nil || out != charge.OutcomeResolvedCaptured {
		t.Fatalf("reconcile: %s, %v, want %s", out, err, charge.OutcomeResolvedCaptured)
	}
	again := h.do(postMove("acme", id, "capture", ""))
	if st, _ := chargeStatus(t, again); again.StatusCode != http.StatusOK || st != charge.StatusSucceeded {
		t.Fatalf("retry: %d %s", again.StatusCode, again.Body)
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Fatalf("captured %d times", n)
	}
}

// TestCaptureThatNeverLandedIsRevertedOnlyAfterTheSettleWindow: the edge
// answered 502 and the provider never captured. Its state "authorized"
// proves nothing inside the settle window; after it, the move is undone
// and a retry captures.
func TestCaptureThatNeverLandedIsRevertedOnlyAfterTheSettleWindow(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.authorized(t, "acme", 1000)
	h.faultOn("/capture", edge502)
	wantStatus(t, h.do(postMove("acme", id, "capture", "")), http.StatusServiceUnavailable)
	h.faultOn("", "")
	key, _ := idem.NewKey("acme", charge.TransitionOperation, id)
	h.clock.Advance(time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), key); err != nil || out != charge.OutcomeNotSettled {
		t.Fatalf("reconcile inside the settle window: %s, %v", out, err)
	}
	if st, _ := chargeStatus(t, h.do(get("acme", id))); st != charge.StatusCapturing {
		t.Fatalf("inside the window the charge reads %s, want capturing", st)
	}
	h.clock.Advance(10 * time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), key); err != nil || out != charge.OutcomeReleased {
		t.Fatalf("reconcile after the settle window: %s, %v", out, err)
	}
	wantStatus(t, h.do(postMove("acme", id, "capture", "")), http.StatusOK)
	if n := h.captures(t, "acme", id); n != 1 {
		t.Fatalf("captured %d times", n)
	}
}

// captures is how many times the provider captured tenant's charge id.
func (h *harness) captures(t *testing.T, tenant, id string) int {
	t.Helper()
	return h.sim.Ledger().References[h.row(t, tenant, id).ProviderReference].Captures
}

// providerID is the provider's id of tenant's charge id.
func (h *harness) providerID(t *testing.T, tenant, id string) string {
	t.Helper()
	return h.row(t, tenant, id).ProviderChargeID
}

// TestExpiredAuthorizationCannotBeCaptured: the provider ended the hold;
// the capture answers 409 naming canceled, and the charge reads canceled.
func TestExpiredAuthorizationCannotBeCaptured(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.authorized(t, "acme", 1000)
	if !h.sim.Expire(h.providerID(t, "acme", id)) {
		t.Fatal("the simulator did not expire the authorization")
	}
	resp := h.do(postMove("acme", id, "capture", ""))
	if st, _ := chargeStatus(t, resp); resp.StatusCode != http.StatusConflict || st != charge.StatusCanceled {
		t.Fatalf("capture of an expired authorization: %d %s, want 409 naming canceled", resp.StatusCode, resp.Body)
	}
	if st, _ := chargeStatus(t, h.do(get("acme", id))); st != charge.StatusCanceled {
		t.Fatalf("the charge reads %s, want canceled", st)
	}
	if n := h.captures(t, "acme", id); n != 0 {
		t.Fatalf("captured %d times", n)
	}
}

// TestSweeperFindsAMoveLeftUnsettled: a move whose answer was lost is in
// the charges table's index once its deadline passes, as a key the
// reconciler settles; a settled one is not.
func TestSweeperFindsAMoveLeftUnsettled(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.authorized(t, "acme", 1000)
	settled := h.authorized(t, "acme", 1000)
	wantStatus(t, h.do(postMove("acme", settled, "cancel", "")), http.StatusOK)
	h.faultOn("/capture", providersimTimeout)
	wantStatus(t, h.do(postMove("acme", id, "capture", "")), http.StatusServiceUnavailable)
	h.faultOn("", "")
	rows := h.rows(t)
	stuck := func(at time.Time) []string {
		var keys []string
		for rec, err := range rows.StuckLeases(t.Context(), 0, at) {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, rec.Key.String())
		}
		return keys
	}
	if got := stuck(h.clock.Now()); len(got) != 0 {
		t.Fatalf("before its deadline the index yields %v", got)
	}
	want := "acme#" + charge.TransitionOperation + "#" + id
	if got := stuck(h.clock.Now().Add(time.Minute)); len(got) != 1 || got[0] != want {
		t.Fatalf("after its deadline the index yields %v, want [%s]", got, want)
	}
}

// TestNotificationsSettleMoves: the provider's word settles a capture in
// flight, and an authorization it ended itself.
func TestNotificationsSettleMoves(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	capturing := h.authorized(t, "acme", 1000)
	h.faultOn("/capture", providersimTimeout)
	wantStatus(t, h.do(postMove("acme", capturing, "capture", `{"amount":400}`)), http.StatusServiceUnavailable)
	h.faultOn("", "")
	expired := h.authorized(t, "acme", 1000)
	for i, tc := range []struct {
		id  string
		res provider.Result
	}{
		{capturing, provider.Result{Status: provider.StatusCharged, Amount: 400}},
		{expired, provider.Result{Status: provider.StatusCanceled}},
	} {
		key, created := h.command(t, tc.id)
		tc.res.ChargeID = h.providerID(t, "acme", tc.id)
		out, err := h.recon.Notify(t.Context(), charge.Notification{
			Provider: "stripe", EventID: fmt.Sprintf("evt_%d_%s", i, newKey()), Command: key,
			Reference: charge.ProviderReference(key, created), Result: tc.res,
		})
		if want := []charge.Outcome{charge.OutcomeResolvedCaptured, charge.OutcomeResolvedCanceled}[i]; err != nil || out.Outcome != want {
			t.Fatalf("notify %d: %+v, %v; want %s", i, out, err, want)
		}
	}
	if st, amount := chargeStatus(t, h.do(get("acme", capturing))); st != charge.StatusSucceeded || amount != 400 {
		t.Fatalf("the capture in flight reads %s %d, want succeeded 400", st, amount)
	}
	if st, _ := chargeStatus(t, h.do(get("acme", expired))); st != charge.StatusCanceled {
		t.Fatalf("the expired authorization reads %s, want canceled", st)
	}
}

// command is the create-charge command of tenant acme's charge id, and
// its record's creation.
func (h *harness) command(t *testing.T, id string) (idem.Key, time.Time) {
	t.Helper()
	c := h.row(t, "acme", id)
	key, err := idem.NewKey("acme", charge.ChargeOperation, string(c.IdempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	return key, c.CreatedAt
}

// TestMoveRetryWhileTheProviderIsDownAnswers: a retry of a capture whose
// answer was lost, past its attempt deadline, cannot read the provider's
// state. It answers 503 outcome-pending at once, rather than asking again
// until its function's deadline (found by the model).
func TestMoveRetryWhileTheProviderIsDownAnswers(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.authorized(t, "acme", 1000)
	h.faultOn("/capture", providersimTimeout)
	wantStatus(t, h.do(postMove("acme", id, "capture", "")), http.StatusServiceUnavailable)
	h.faultOn("", "")
	h.clock.Advance(time.Minute) // past the attempt deadline
	h.sim.SetDown(true)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a function's deadline
	defer cancel()
	resp, err := h.handler.Handle(ctx, postMove("acme", id, "capture", ""))
	if err != nil || ctx.Err() != nil || resp.StatusCode != http.StatusServiceUnavailable || problemType(t, resp) != "outcome-pending" {
		t.Fatalf("retry with the provider down: %d %s (%v, context: %v), want 503 outcome-pending", resp.StatusCode, resp.Body, err, ctx.Err())
	}
}

// captureGate stands between the service and the provider. Capture i
// waits for turns[i]; a refused one gets 503 with proof nothing was done.
// A capture beyond turns is refused at once.
type captureGate struct {
	arrived chan struct{} // a capture reached the gate
	turns   []chan struct{}
	refused []bool
	n       atomic.Int32
}

// newCaptureGate gates captures; held ones wait for their turn's close.
func newCaptureGate(held, refused []bool) *captureGate {
	g := &captureGate{arrived: make(chan struct{}, len(held)), refused: refused}
	for _, h := range held {
		turn := make(chan struct{})
		if !h {
			close(turn)
		}
		g.turns = append(g.turns, turn)
	}
	return g
}

func (g *captureGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/capture") {
		return http.DefaultTransport.RoundTrip(req)
	}
	if i := int(g.n.Add(1)) - 1; i < len(g.turns) {
		g.arrived <- struct{}{}
		<-g.turns[i]
		if !g.refused[i] {
			return http.DefaultTransport.RoundTrip(req)
		}
	}
	return &http.Response{
		Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{provider.HeaderNotProcessed: []string{"true"}}, Body: http.NoBody, Request: req,
	}, nil
}

// TestCaptureAwaitingARefusedOneAnswersTrue: the provider is down. One
// capture moves the row and hears provider-unavailable; two others
// waited on it. Nothing failed in the store, so none may say it was
// busy (found by the model). Each request asks the provider at most
// once, and nothing is captured.
func TestCaptureAwaitingARefusedOneAnswersTrue(t *testing.T) {
	t.Parallel()
	down := newCaptureGate([]bool{true, false, false}, []bool{true, true, true})
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: down}))
	}})
	id := h.authorized(t, "acme", 1000)
	answers := make([]events.APIGatewayV2HTTPResponse, 3)
	var wg sync.WaitGroup
	wg.Go(func() { answers[0] = h.do(postMove("acme", id, "capture", "")) })
	<-down.arrived // the row is capturing: the others wait on it
	for i := 1; i < len(answers); i++ {
		wg.Go(func() { answers[i] = h.do(postMove("acme", id, "capture", "")) })
	}
	time.Sleep(300 * time.Millisecond)
	close(down.turns[0])
	wg.Wait()
	for i, a := range answers {
		if a.StatusCode != http.StatusServiceUnavailable || problemType(t, a) != "provider-unavailable" || a.Headers["Retry-After"] == "" {
			t.Errorf("capture %d: %d %s %v, want 503 provider-unavailable with Retry-After", i, a.StatusCode, a.Body, a.Headers)
		}
	}
	if st, _ := chargeStatus(t, h.do(get("acme", id))); st != charge.StatusRequiresCapture {
		t.Errorf("the charge reads %s, want requires_capture", st)
	}
	if n := down.n.Load(); n > int32(len(answers)) {
		t.Errorf("the provider was asked %d times by %d requests", n, len(answers))
	}
	if n := h.captures(t, "acme", id); n != 0 {
		t.Errorf("captured %d times", n)
	}
}

// TestLateRevertLeavesANewerMoveAlone: a capture's answer, "not
// processed", comes after its deadline and the settle window. The
// reconciler has released its move, and a newer capture has moved the
// row. The late revert must not undo that newer move, which captures.
func TestLateRevertLeavesANewerMoveAlone(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	gate := newCaptureGate([]bool{true, true}, []bool{true, false})
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clock = clock.Now
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: gate}))
	}})
	recon := h.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.SettleWindow = 2 * time.Minute
		w.Deps.Clock = clock.Now
	})
	id := h.authorized(t, "acme", 1000)
	key, _ := idem.NewKey("acme", charge.TransitionOperation, id)
	late, newer := make(chan events.APIGatewayV2HTTPResponse, 1), make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() { late <- h.do(postMove("acme", id, "capture", "")) }()
	<-gate.arrived // the first capture's call is at the provider, its answer held
	for _, step := range []struct {
		after time.Duration
		want  charge.Outcome
	}{{time.Minute, charge.OutcomeNotSettled}, {3 * time.Minute, charge.OutcomeReleased}} {
		clock.Advance(step.after)
		if out, err := recon.Reconcile(t.Context(), key); err != nil || out != step.want {
			t.Fatalf("reconcile: %s, %v; want %s", out, err, step.want)
		}
	}
	go func() { newer <- h.do(postMove("acme", id, "capture", "")) }()
	<-gate.arrived // the newer capture moved the row; its call is at the provider
	close(gate.turns[0])
	if a := <-late; a.StatusCode != http.StatusServiceUnavailable || problemType(t, a) != "provider-unavailable" {
		t.Errorf("the late capture: %d %s, want 503 provider-unavailable", a.StatusCode, a.Body)
	}
	close(gate.turns[1])
	if a := <-newer; a.StatusCode != http.StatusOK {
		t.Errorf("the newer capture: %d %s, want 200", a.StatusCode, a.Body)
	}
	if st, amount := chargeStatus(t, h.do(get("acme", id))); st != charge.StatusSucceeded || amount != 1000 {
		t.Errorf("the charge reads %s %d, want succeeded 1000", st, amount)
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Errorf("captured %d times, want once", n)
	}
}

// heldUpdate holds DynamoDB's first UpdateItem once armed, until release
// is closed.
type heldUpdate struct {
	armed            atomic.Bool
	arrived, release chan struct{}
}

func (u *heldUpdate) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") && u.armed.CompareAndSwap(true, false) {
		close(u.arrived)
		<-u.release
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestCaptureOfAllAnswersAPartialOneMadeFirst: a capture of all reads an
// authorization, and a capture of 600 moves the row before it and
// captures. The capture of all names no amount, so it is that capture
// again: 200, not a conflict with the amount it would have asked for.
func TestCaptureOfAllAnswersAPartialOneMadeFirst(t *testing.T) {
	t.Parallel()
	held := &heldUpdate{arrived: make(chan struct{}), release: make(chan struct{})}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: held} })
	}})
	id := h.authorized(t, "acme", 1000)
	held.armed.Store(true)
	all := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() { all <- h.do(postMove("acme", id, "capture", "")) }()
	<-held.arrived // it read requires_capture; its move waits
	part := h.do(postMove("acme", id, "capture", `{"amount":600}`))
	if st, amount := chargeStatus(t, part); part.StatusCode != http.StatusOK || st != charge.StatusSucceeded || amount != 600 {
		t.Fatalf("capture of 600: %d %s", part.StatusCode, part.Body)
	}
	close(held.release)
	if a := <-all; a.StatusCode != http.StatusOK || a.Body != part.Body {
		t.Errorf("capture of all: %d %s, want the 200 %s", a.StatusCode, a.Body, part.Body)
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Errorf("captured %d times, want once", n)
	}
}
