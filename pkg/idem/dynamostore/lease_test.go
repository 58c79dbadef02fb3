package dynamostore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestPostponeHidesTheLeaseUntilThen: a reconciler that cannot settle a
// command yet names when to try again; until then the key is neither
// listed as stuck nor taken over, and each take-over is counted.
func TestPostponeHidesTheLeaseUntilThen(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Shards = 1 })
	k := dynamotest.Key(t, "acme")
	dynamotest.Begin(t, e.Store, k, fpA)
	e.Clock.Advance(time.Minute)
	l, err := e.Store.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	until := e.Clock.Now().Add(10 * time.Minute)
	if err := e.Store.Postpone(ctx, l, until); err != nil {
		t.Fatal(err)
	}
	stuck := func(at time.Time) []idem.Record {
		var out []idem.Record
		for sl, err := range e.Store.StuckLeases(ctx, 0, at) {
			if err != nil {
				t.Fatal(err)
			}
			if sl.Key == k {
				out = append(out, sl)
			}
		}
		return out
	}
	e.Clock.Advance(5 * time.Minute)
	if got := stuck(e.Clock.Now()); len(got) != 0 {
		t.Fatalf("listed as stuck before the postponed time: %+v", got)
	}
	_, err = e.Store.TakeOver(ctx, k)
	dynamotest.WantInFlight(t, err)
	e.Clock.Advance(6 * time.Minute)
	if got := stuck(e.Clock.Now()); len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("after the postponed time: stuck %+v, want the key with 1 attempt", got)
	}
	again, err := e.Store.TakeOver(ctx, k)
	if err != nil || again.Attempts != 2 {
		t.Fatalf("second take-over: %+v, %v", again, err)
	}
	if err := e.Store.Postpone(ctx, l, until); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("postpone by the taken-over lease: want ErrLeaseLost, got %v", err)
	}
}
