package charge_test

import (
	"bytes"
	"context"
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
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

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
	h.lostMove(t, id, "capture", "", providersimTimeout)
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
	h.lostMove(t, id, "capture", "", edge502)
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

// TestNotificationsSettleMoves: the provider's word settles a capture in
// flight, and an authorization it ended itself.
func TestNotificationsSettleMoves(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	capturing := h.authorized(t, "acme", 1000)
	h.lostMove(t, capturing, "capture", `{"amount":400}`, providersimTimeout)
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
	h.lostMove(t, id, "capture", "", providersimTimeout)
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

// TestCaptureWaitIsBoundedWhileStateFails: a capture is left
// unsettled (its answer lost) and its deadline passes while the provider's
// state cannot be read. A repeat must be answered within its bounded wait
// (InflightWait), as the contract says; transit instead loops on
// settleMove's OutcomeDeferred with no pause and no bound, until the
// caller's context dies.
func TestCaptureWaitIsBoundedWhileStateFails(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.authorized(t, "acme", 1000)
	h.lostMove(t, id, "capture", "", providersimTimeout)
	h.clock.Advance(time.Minute) // the move's deadline has passed
	h.sim.SetDown(true)          // its state cannot be read for now
	// Time passes for the service as the repeat waits.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				h.clock.Advance(time.Second)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	start := time.Now()
	res, err := h.recon.Capture(ctx, "acme", id, 0)
	took := time.Since(start)
	if took > 2*time.Second || err != nil {
		t.Fatalf("repeat capture while the state cannot be read: %+v, %v after %s; want an answer within the bounded wait", res, err, took)
	}
}

// TestUnmadeCaptureIsEventuallyReverted: a capture the provider
// never received (an edge's 502) is proven not made once the settle window
// after its attempt has passed. The sweeper runs every minute and hands
// the reconciler every move whose deadline has passed. Each visit inside
// the window postpones the deadline to deadline+SettleWindow, and the next
// visit measures the window from that postponed deadline: the move is
// postponed for ever and the charge reads capturing until the
// authorization expires.
func TestUnmadeCaptureIsEventuallyReverted(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t) // the reconciler's SettleWindow: 2 minutes
	id := h.authorized(t, "acme", 1000)
	h.lostMove(t, id, "capture", "", edge502)
	rows := h.rows(t)
	var outcomes []charge.Outcome
	for range 60 { // an hour of sweeps, one a minute
		h.clock.Advance(time.Minute)
		for rec, err := range rows.StuckLeases(t.Context(), 0, h.clock.Now()) {
			if err != nil {
				t.Fatal(err)
			}
			out, err := h.recon.Reconcile(t.Context(), rec.Key)
			if err != nil {
				t.Fatal(err)
			}
			outcomes = append(outcomes, out)
		}
		if st, _ := chargeStatus(t, h.do(get("acme", id))); st == charge.StatusRequiresCapture {
			return
		}
	}
	st, _ := chargeStatus(t, h.do(get("acme", id)))
	t.Fatalf("an hour after a capture the provider never received (settle window 2m), the charge reads %s; the sweeper's visits: %v", st, outcomes)
}

// slowRefusal answers the provider's first capture, after a pause, with
// 503 and the not-processed proof; every other request goes through.
type slowRefusal struct{ n atomic.Int32 }

func (s *slowRefusal) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/capture") && s.n.Add(1) == 1 {
		time.Sleep(700 * time.Millisecond)
		return &http.Response{
			Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{provider.HeaderNotProcessed: []string{"true"}}, Body: http.NoBody, Request: req,
		}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestConcurrentCapturesAnswerTrue: two concurrent captures of one
// authorization end in one provider effect, each answer true when given.
// The first one's provider call is refused "not processed": it reverts
// the move and answers 503, nothing captured. The second waited on it.
// That move was not made, so it makes its own and answers 200. A retry
// of the first gets the same 200.
func TestConcurrentCapturesAnswerTrue(t *testing.T) {
	t.Parallel()
	rt := &slowRefusal{}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: rt}))
	}})
	id := h.authorized(t, "acme", 1000)
	answers := make([]events.APIGatewayV2HTTPResponse, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 200 * time.Millisecond) // the second arrives while the first runs
			answers[i] = h.do(postMove("acme", id, "capture", ""))
		})
	}
	wg.Wait()
	if answers[0].StatusCode != http.StatusServiceUnavailable || problemType(t, answers[0]) != "provider-unavailable" {
		t.Errorf("the refused capture: %d %s, want 503 provider-unavailable", answers[0].StatusCode, answers[0].Body)
	}
	if st, _ := chargeStatus(t, answers[1]); answers[1].StatusCode != http.StatusOK || st != charge.StatusSucceeded {
		t.Errorf("the capture that waited: %d %s, want 200 succeeded", answers[1].StatusCode, answers[1].Body)
	}
	if retry := h.do(postMove("acme", id, "capture", "")); retry.StatusCode != http.StatusOK || retry.Body != answers[1].Body {
		t.Errorf("retry of the refused capture: %d %s, want %s", retry.StatusCode, retry.Body, answers[1].Body)
	}
	if n := h.captures(t, "acme", id); n != 1 {
		t.Errorf("captured %d times, want once", n)
	}
}

// TestRefusedCaptureAfterAPostponeFreesTheRow: a capture is refused "not
// processed" after the reconciler postponed its attempt's deadline. The
// revert is of that same attempt, so the charge is requires_capture again
// and a retry captures, not a 409 for the whole settle window.
func TestRefusedCaptureAfterAPostponeFreesTheRow(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	gate := newCaptureGate([]bool{true, false}, []bool{true, false})
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
	first := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() { first <- h.do(postMove("acme", id, "capture", "")) }()
	<-gate.arrived // the capture's call is at the provider, its answer held
	clock.Advance(time.Minute)
	if out, err := recon.Reconcile(t.Context(), key); err != nil || out != charge.OutcomeNotSettled {
		t.Fatalf("reconcile inside the settle window: %s, %v; want %s", out, err, charge.OutcomeNotSettled)
	}
	close(gate.turns[0]) // the provider's answer: 503, not processed
	a := <-first
	if a.StatusCode != http.StatusServiceUnavailable || problemType(t, a) != "provider-unavailable" {
		t.Fatalf("the refused capture: %d %s, want 503 provider-unavailable", a.StatusCode, a.Body)
	}
	st, _ := chargeStatus(t, h.do(get("acme", id)))
	retry := h.do(postMove("acme", id, "capture", ""))
	if st != charge.StatusRequiresCapture || retry.StatusCode != http.StatusOK {
		t.Fatalf("after 503 provider-unavailable (nothing captured, no other move made) the charge reads %s "+
			"(want requires_capture), and its retry answers %d %s (want 200 succeeded)", st, retry.StatusCode, retry.Body)
	}
}

// lostBegin applies the first move (Rows.begin) it sees once armed, and
// loses its answer: DynamoDB answers 500 after applying the update. The
// SDK sends it again. While blind, every read after that move is refused.
type lostBegin struct {
	armed, blind atomic.Bool
	refused      atomic.Int32 // reads
}

func (l *lostBegin) RoundTrip(req *http.Request) (*http.Response, error) {
	target := req.Header.Get("X-Amz-Target")
	if strings.HasSuffix(target, ".UpdateItem") && l.armed.Load() {
		body := readBody(req)
		if bytes.Contains(body, []byte("SET #status = :via, #amount = :amount")) && l.armed.CompareAndSwap(true, false) {
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			return idemtest.DynamoDBFault(req, "InternalServerError"), nil
		}
	}
	if l.blind.Load() && !l.armed.Load() && (strings.HasSuffix(target, ".GetItem") || strings.HasSuffix(target, ".Query")) {
		l.refused.Add(1)
		return idemtest.FaultyConnection{Fault: idemtest.Refused}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// lostBeginHarness is a harness whose DynamoDB calls pass a lostBegin.
func lostBeginHarness(t *testing.T) (*harness, *lostBegin) {
	t.Helper()
	lost := &lostBegin{}
	return newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lost} })
	}}), lost
}

// TestCaptureWhoseMoveAnswerWasLostIsMade: DynamoDB applies a capture's
// move and loses the answer, and the SDK's retry fails its condition. The
// request finds its own attempt on the row and makes the capture, rather
// than awaiting itself.
func TestCaptureWhoseMoveAnswerWasLostIsMade(t *testing.T) {
	t.Parallel()
	h, lost := lostBeginHarness(t)
	id := h.authorized(t, "acme", 1000)
	lost.armed.Store(true)
	a := h.do(postMove("acme", id, "capture", ""))
	st, _ := chargeStatus(t, h.do(get("acme", id)))
	if a.StatusCode != http.StatusOK {
		t.Fatalf("the only capture, its move applied and the answer lost once: %d %s; the charge reads %s, the provider captured %d times; "+
			"want 200 succeeded (or an honest outcome-pending), not a capture 'in progress' that nobody makes",
			a.StatusCode, a.Body, st, h.captures(t, "acme", id))
	}
}

// TestMoveWhoseAnswerWasLostIsNeverNothingWritten: as above, but the read
// that would find this request's attempt on the row is refused. The move
// may have landed: 503 outcome-pending, queued for the reconciler. Never
// service-unavailable, which says nothing was written.
func TestMoveWhoseAnswerWasLostIsNeverNothingWritten(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"capture", "cancel"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			h, lost := lostBeginHarness(t)
			id := h.authorized(t, "acme", 1000)
			lost.blind.Store(true)
			lost.armed.Store(true)
			a := h.do(postMove("acme", id, verb, ""))
			lost.blind.Store(false)
			if lost.armed.Load() || lost.refused.Load() == 0 {
				t.Fatalf("moved %v, reads refused %d: the test proves nothing", !lost.armed.Load(), lost.refused.Load())
			}
			if a.StatusCode != http.StatusServiceUnavailable || problemType(t, a) != httpapi.ProblemOutcomePending.Slug {
				t.Fatalf("a %s whose move landed unanswered and unread: %d %s; the row is %s. Want 503 outcome-pending",
					verb, a.StatusCode, a.Body, h.row(t, "acme", id).Status)
			}
			h.wantQueued(t)
		})
	}
}

// TestCancelAwaitingARefusedCaptureIsMade: a
// capture is refused "not processed" while a cancel waits on it. The
// cancel makes its own move: the charge ends canceled, nothing captured,
// and the capture's retry is 409 naming canceled.
func TestCancelAwaitingARefusedCaptureIsMade(t *testing.T) {
	t.Parallel()
	gate := newCaptureGate([]bool{true}, []bool{true})
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: gate}))
	}})
	id := h.authorized(t, "acme", 1000)
	capt, canc := make(chan events.APIGatewayV2HTTPResponse, 1), make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() { capt <- h.do(postMove("acme", id, "capture", "")) }()
	<-gate.arrived
	go func() { canc <- h.do(postMove("acme", id, "cancel", "")) }()
	time.Sleep(300 * time.Millisecond)
	close(gate.turns[0])
	a, b := <-capt, <-canc
	if a.StatusCode != http.StatusServiceUnavailable || problemType(t, a) != "provider-unavailable" {
		t.Errorf("the refused capture: %d %s", a.StatusCode, a.Body)
	}
	if st, _ := chargeStatus(t, b); b.StatusCode != http.StatusOK || st != charge.StatusCanceled {
		t.Errorf("the cancel that waited: %d %s, want 200 canceled", b.StatusCode, b.Body)
	}
	retry := h.do(postMove("acme", id, "capture", ""))
	if st, _ := chargeStatus(t, retry); retry.StatusCode != http.StatusConflict || st != charge.StatusCanceled {
		t.Errorf("the capture's retry: %d %s, want 409 canceled", retry.StatusCode, retry.Body)
	}
	if n := h.captures(t, "acme", id); n != 0 {
		t.Errorf("captured %d times", n)
	}
}

// TestACaptureRefusedAWaitAsTheMovesDeadlinePassesSettlesIt (review
// waitfix): a capture's answer was lost after the provider captured; its
// row reads capturing. A retry finds the move in flight. As its write to
// take a wait runs, the move's deadline passes. docs/contract.md: the
// others "answer at once what a wait that ran out would"; moves.go: a
// move past its deadline is "settled from the provider's state". A wait
// granted re-reads, settles and answers the capture. One refused (its
// write timed out) re-reads too, finds the same row, and answers 409 in
// progress, though nothing is in progress.
func TestACaptureRefusedAWaitAsTheMovesDeadlinePassesSettlesIt(t *testing.T) {
	t.Parallel()
	for _, granted := range []bool{true, false} {
		t.Run(fmt.Sprintf("granted %v", granted), func(t *testing.T) {
			t.Parallel()
			h := newRefundRig(t)
			id := h.authorized(t, "acme", 1000)
			h.lostMove(t, id, "capture", "", providersimTimeout) // captured, its answer lost
			retry := h.d.ChargeHandler(t, func(w *testkit.Wiring) {
				w.Charge.LimitsTable, w.Charge.Limits = h.d.LimitsTable, limit.Limits{Rate: 100, Concurrency: 100}
				w.Deps.Clock = h.clock.Now
				w.Deps.Clients = testkit.Clients(t, waitWrites(func(ctx context.Context) {
					h.clock.Advance(time.Minute) // the move's deadline passes meanwhile
					if !granted {
						<-ctx.Done() // the write outlasts its time: no wait
					}
				}))
			})
			resp, err := retry.Handle(t.Context(), postMove("acme", id, "capture", ""))
			if st, _ := chargeStatus(t, resp); err != nil || resp.StatusCode != http.StatusOK || st != charge.StatusSucceeded {
				t.Fatalf("a capture retry, its wait granted %v, as a lost capture's deadline passed: %d %v %s, %v; want 200 captured, settled from the provider's state",
					granted, resp.StatusCode, resp.Headers, resp.Body, err)
			}
		})
	}
}

// waitWrites runs during each conditional write that takes a wait.
func waitWrites(during func(ctx context.Context)) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("WaitWrites",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && u.UpdateExpression != nil && strings.HasPrefix(*u.UpdateExpression, "ADD #w") {
						during(ctx)
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}
