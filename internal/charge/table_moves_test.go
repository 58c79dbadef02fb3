package charge_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/queue"
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
	h.lostMove(t, id, "capture", "", providersimTimeout)
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

// TestAnEndedMoveTakesItsQueueMarkWithIt: a lost move's reconcile message
// is due at its deadline, and marked on the row while in flight. When the
// move ends, its mark goes too: a newer move stuck later is queued at
// once, not after the old mark's hold.
func TestAnEndedMoveTakesItsQueueMarkWithIt(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.authorized(t, "acme", 1000)
	key, err := idem.NewKey("acme", charge.TransitionOperation, id)
	if err != nil {
		t.Fatal(err)
	}
	marked := func() int64 {
		t.Helper()
		out, err := testkit.Clients(t).DynamoDB.GetItem(t.Context(), &dynamodb.GetItemInput{
			TableName: aws.String(h.d.ChargesTable), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{
				charge.AttrTenant: &types.AttributeValueMemberS{Value: "acme"}, charge.AttrID: &types.AttributeValueMemberS{Value: id},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		var until int64
		if v, ok := out.Item["queued_until"].(*types.AttributeValueMemberN); ok {
			until, _ = strconv.ParseInt(v.Value, 10, 64)
		}
		return until
	}
	asked := h.clock.Now()
	h.lostMove(t, id, "capture", "", edge502)
	capture := marked()
	// Due at the move's deadline: a capture made settles then, not after
	// the provider's settle window.
	if due := time.UnixMilli(capture).Add(-queue.MarkHold); capture == 0 || due.After(asked.Add(time.Minute)) {
		t.Fatalf("the lost capture's message is due at %s, want by its deadline (asked at %s)", due, asked)
	}
	h.clock.Advance(10 * time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), key); err != nil || out != charge.OutcomeReleased {
		t.Fatalf("reconcile after the settle window: %s, %v", out, err)
	}
	if until := marked(); until != 0 {
		t.Fatalf("the released capture's mark stays until %s", time.UnixMilli(until))
	}
	h.lostMove(t, id, "cancel", "", edge502)
	if until := marked(); until <= capture {
		t.Fatalf("the lost cancel's mark is %d, want one of its own after %d", until, capture)
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
