package lambdaidem_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// stuck begins a command of each operation on a store whose clock then
// passes their leases.
func stuck(t *testing.T, ops ...string) (*memstore.Store, []idem.Key) {
	t.Helper()
	clock := idemtest.NewClock(time.Now())
	s := memstore.New(func(o *memstore.Options) { o.Clock, o.DefaultLease = clock.Now, 30*time.Second })
	var keys []idem.Key
	for _, op := range ops {
		k, err := idem.NewKey("acme", op, idemtest.UniqueKey(t, "x").ClientKey())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Begin(t.Context(), k, idem.FingerprintOf([]byte(op)), nil); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	clock.Advance(time.Minute)
	return s, keys
}

// TestSweepHandlerSettlesAndReports: the scheduled handler sweeps the
// store, fails when a command could not be settled (so the function's
// Errors alarm fires), and logs its counts but no key.
func TestSweepHandlerSettlesAndReports(t *testing.T) {
	t.Parallel()
	s, keys := stuck(t, "create-order", "ship-order")
	var logs bytes.Buffer
	sweep := lambdaidem.Sweep(s, idem.ByOperation(map[string]idem.Resolver{"create-order": idem.ReleaseLocalEffect}), func(o *lambdaidem.SweepOptions) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	swept, err := sweep(ctx)
	if swept.Found != 2 || swept.Settled != 1 || swept.Failed != 1 || err == nil {
		t.Fatalf("sweep = %+v, %v; want one settled, and an error for the operation without a resolver", swept, err)
	}
	if rec, err := s.Get(t.Context(), keys[0]); err != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("create-order: %+v, %v; want it released", rec, err)
	}
	line := logs.String()
	if !strings.Contains(line, `"found":2`) || !strings.Contains(line, `"settled":1`) || !strings.Contains(line, `"failed":1`) {
		t.Fatalf("log %s: want the counts", line)
	}
	for _, k := range keys {
		if strings.Contains(line, k.ClientKey()) {
			t.Fatalf("log %s names the key %s", line, k.ClientKey())
		}
	}
}

// TestSweepHandlerStopsItsMarginBeforeTheDeadline: a resolver that would
// outlast the invocation is cut at the margin, so the handler returns
// before Lambda ends it. Being cut short is no failure: the next run
// finds the command again.
func TestSweepHandlerStopsItsMarginBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	s, keys := stuck(t, "slow")
	slow := func(ctx context.Context, _ *idem.Lease) (idem.Outcome, error) {
		<-ctx.Done()
		return idem.Outcome{}, ctx.Err()
	}
	sweep := lambdaidem.Sweep(s, slow, func(o *lambdaidem.SweepOptions) {
		o.Margin, o.Logger = 1500*time.Millisecond, slog.New(slog.DiscardHandler)
	})
	start := time.Now()
	ctx, cancel := context.WithDeadline(t.Context(), start.Add(2*time.Second))
	defer cancel()
	swept, err := sweep(ctx)
	if took := time.Since(start); took > 1500*time.Millisecond || err != nil || swept.Found != 1 {
		t.Fatalf("sweep took %v: %+v, %v; want it cut at 0.5s, without an error", took, swept, err)
	}
	if rec, err := s.Get(t.Context(), keys[0]); err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the slow command: %+v, %v; want it in flight for the next run", rec, err)
	}
}
