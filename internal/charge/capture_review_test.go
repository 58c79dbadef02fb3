package charge_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/app"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

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
	h.faultOn("/capture", providersimTimeout)
	wantStatus(t, h.do(postMove("acme", id, "capture", "")), http.StatusServiceUnavailable)
	h.faultOn("", "")
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
	h.faultOn("/capture", edge502)
	wantStatus(t, h.do(postMove("acme", id, "capture", "")), http.StatusServiceUnavailable)
	h.faultOn("", "")
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
