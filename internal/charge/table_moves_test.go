package charge_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

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
