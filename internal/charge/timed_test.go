package charge

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// flakyLedger refuses, unapplied, the next clear of a stale lease's own
// end and the next Settle: both throttled.
type flakyLedger struct {
	*memstore.Ledger
	failClear, failSettle bool
}

func (f *flakyLedger) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && token != "" && f.failClear {
		f.failClear = false
		return fmt.Errorf("throttled: %w", idem.ErrUnavailable)
	}
	return f.Ledger.Release(ctx, key, region, created, until, token)
}

func (f *flakyLedger) Settle(ctx context.Context, key idem.Key, region string, created time.Time) error {
	if f.failSettle {
		f.failSettle = false
		return fmt.Errorf("throttled: %w", idem.ErrUnavailable)
	}
	return f.Ledger.Settle(ctx, key, region, created)
}

// TestTheReconcilersBackendSettlesAClaimAgain: a stale release's end
// stays on the claim, and the commit's Settle fails. The commit answers
// pending and queues the key; docs/regions.md says the reconciler then
// clears the end (idem.Recover, SettleClaim). The reconciler's Recover
// runs on the Service's backend (wrap): timed, maybe in a ReplayCache.
// Each must pass SettleClaim on. Else the end stays: once it passes, the
// key is claimed afresh though its command charged.
func TestTheReconcilersBackendSettlesAClaimAgain(t *testing.T) {
	t.Parallel()
	for name, backend := range map[string]func(Store) idem.Backend{
		"the store itself":             func(st Store) idem.Backend { return st },
		"the Service's, timed":         func(st Store) idem.Backend { return wrap(Config{Store: st}) },
		"the Service's, timed, cached": func(st Store) idem.Backend { return wrap(Config{Store: st, ReplayCache: 8}) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			ledger := &flakyLedger{Ledger: memstore.NewLedger(nil)}
			st := memstore.New(func(o *memstore.Options) {
				o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour
				o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
			})
			k := idemtest.UniqueKey(t, "acme")
			body := []byte("intent")
			begun, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
			if err != nil || begun.Lease == nil {
				t.Fatalf("Begin: %+v, %v", begun, err)
			}
			stale := begun.Lease
			clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(clock.Now()))
			taken, err := st.TakeOver(ctx, k)
			if err != nil {
				t.Fatalf("TakeOver: %v", err)
			}
			ledger.failClear = true
			if err := st.Release(ctx, stale); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("the stale release: %v; want ErrLeaseLost", err)
			}
			ledger.failSettle = true
			if err := st.Commit(ctx, taken, idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}); !errors.Is(err, idem.ErrUnavailable) {
				t.Fatalf("the commit whose Settle failed: %v; want ErrUnavailable", err)
			}
			// The reconciler's message for the queued key.
			if _, err := idem.Recover(ctx, backend(st), k, idem.ReleaseLocalEffect); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			// Past the stale release's end, within the claim's Until.
			clock.Advance(2 * time.Hour)
			c, err := ledger.Claim(ctx, k, idem.Claim{Region: "a", CreatedAt: clock.Now(), Until: clock.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if !c.CreatedAt.Equal(taken.CreatedAt) {
				t.Fatalf("the Ledger gave the charged command's key a new claim at %v (the charge's was %v): the reconciler did not settle the claim again", c.CreatedAt, taken.CreatedAt)
			}
		})
	}
}
