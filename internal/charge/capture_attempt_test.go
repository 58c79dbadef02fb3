package charge_test

// A move's attempt: its own lost answer, a postponed deadline, a waiter.

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

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
// SDK sends it again.
type lostBegin struct{ armed atomic.Bool }

func (l *lostBegin) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") && l.armed.Load() {
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
	return http.DefaultTransport.RoundTrip(req)
}

// TestCaptureWhoseMoveAnswerWasLostIsMade: DynamoDB applies a capture's
// move and loses the answer, and the SDK's retry fails its condition. The
// request finds its own attempt on the row and makes the capture, rather
// than awaiting itself.
func TestCaptureWhoseMoveAnswerWasLostIsMade(t *testing.T) {
	t.Parallel()
	lost := &lostBegin{}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lost} })
	}})
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
