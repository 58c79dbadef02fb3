package regions_test

import (
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// newRoutes is a routes table of the test's own.
func newRoutes(t *testing.T) *regions.Routes {
	t.Helper()
	r, err := regions.NewRoutes(testkit.Clients(t).DynamoDB, testkit.TempTable(t, regions.TableInput("routes")))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAFailoverLeavesTheOldRegionPendingUntilDrained: a move serves the
// home's tenants from another Region after the fence, with the Region it
// left pending; drained, it is pending no more; a move back leaves the
// other pending.
func TestAFailoverLeavesTheOldRegionPendingUntilDrained(t *testing.T) {
	ctx := t.Context()
	r := newRoutes(t)
	now := time.UnixMilli(time.Now().UnixMilli())
	first, err := r.Route(ctx, "a")
	if err != nil || first.ServedBy != "a" || first.Epoch != 0 || len(first.Pending) != 0 {
		t.Fatalf("a route never moved = %+v, %v; want served by its home", first, err)
	}
	moved, err := r.Move(ctx, first, "b", now, regions.FenceDelay)
	if err != nil {
		t.Fatal(err)
	}
	// The fence starts from the later of now and the route's read: the
	// store's clock may have ticked past now meanwhile.
	since := now
	if first.Read.After(since) {
		since = first.Read
	}
	read, err := r.Route(ctx, "a")
	if err != nil || read.ServedBy != "b" || read.Epoch != 1 || !read.Since.Equal(since.Add(regions.FenceDelay)) || !slices.Equal(read.Pending, []string{"a"}) {
		t.Fatalf("after the move: %+v, %v (wrote %+v)", read, err, moved)
	}
	drained, err := r.Drained(ctx, read, "a")
	if err != nil || len(drained.Pending) != 0 {
		t.Fatalf("drained = %+v, %v", drained, err)
	}
	back, err := r.Move(ctx, drained, "a", now.Add(time.Hour), regions.FenceDelay)
	if err != nil || back.ServedBy != "a" || !slices.Equal(back.Pending, []string{"b"}) {
		t.Fatalf("moved back = %+v, %v", back, err)
	}
}

// TestAMoveFromAStaleRouteIsRefused: two operators who read the same
// route cannot both move it.
func TestAMoveFromAStaleRouteIsRefused(t *testing.T) {
	ctx := t.Context()
	r := newRoutes(t)
	first, err := r.Route(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Move(ctx, first, "b", time.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Move(ctx, first, "c", time.Now(), regions.FenceDelay); !errors.Is(err, regions.ErrMoved) {
		t.Fatalf("a second move from the same read: %v, want ErrMoved", err)
	}
	if rt, _ := r.Route(ctx, "a"); rt.ServedBy != "b" {
		t.Fatalf("route %+v: the refused move changed it", rt)
	}
}

// TestATenantsHomeIsTheFirstStacksToAsk: the first stack to ask writes
// its configured home; every later one, configured otherwise, gets that.
// Two stacks racing agree on one.
func TestATenantsHomeIsTheFirstStacksToAsk(t *testing.T) {
	ctx := t.Context()
	r := newRoutes(t)
	if h, err := r.Home(ctx, "acme", "a"); err != nil || h != "a" {
		t.Fatalf("the first ask = %q, %v; want its configured a", h, err)
	}
	if h, err := r.Home(ctx, "acme", "b"); err != nil || h != "a" {
		t.Fatalf("a stack configured b = %q, %v; want the table's a", h, err)
	}
	got := make(chan string, 2)
	for _, configured := range []string{"a", "b"} {
		go func() {
			h, err := r.Home(ctx, "globex", configured)
			if err != nil {
				t.Error(err)
			}
			got <- h
		}()
	}
	if h1, h2 := <-got, <-got; h1 != h2 || h1 == "" {
		t.Fatalf("two stacks racing got %q and %q: want one home", h1, h2)
	}
}

// losesFirstPut applies the first PutItem, then loses its answer, as a
// connection closed while the answer is read does. The SDK retries it.
type losesFirstPut struct {
	next http.RoundTripper
	lost atomic.Bool
}

func (l *losesFirstPut) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") || !l.lost.CompareAndSwap(false, true) {
		return resp, err
	}
	_ = resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
}

// TestAMoveWhoseAnswerWasLostIsTheMoveMade: an operator's move applied,
// its answer lost and retried, fails its own condition. It is still the
// move made, not "the route moved meanwhile".
func TestAMoveWhoseAnswerWasLostIsTheMoveMade(t *testing.T) {
	ctx := t.Context()
	lossy := &losesFirstPut{next: http.DefaultTransport}
	db := testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lossy} }).DynamoDB
	r, err := regions.NewRoutes(db, testkit.TempTable(t, regions.TableInput("routes")))
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Route(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := r.Move(ctx, first, "b", time.Now(), regions.FenceDelay)
	if !lossy.lost.Load() {
		t.Fatal("no answer was lost: the test lost nothing")
	}
	if err != nil {
		t.Fatalf("a move whose answer was lost: %v; want the move made", err)
	}
	if _, err := r.Drained(ctx, moved, "a"); err != nil {
		t.Fatalf("drained after it: %v", err)
	}
}
