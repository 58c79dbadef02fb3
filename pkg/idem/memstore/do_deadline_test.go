package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// A resolver may release a command once the effect's settle window has
// passed since the lease's AttemptDeadline (docs/recovery.md's rule for external
// effects), so Do's function must not send after it. Its context ended
// only with the caller's: without a deadline, or with one past the lease's
// cap, a slow attempt sent the effect after the command was released as
// not applied. These hold fn's context to the lease.
func TestDoFunctionContextEndsWithTheLease(t *testing.T) {
	for name, tc := range map[string]struct {
		ctx func() (context.Context, context.CancelFunc)
	}{
		"no deadline (lease of DefaultLease)": {func() (context.Context, context.CancelFunc) { return context.WithCancel(t.Context()) }},
		"a deadline past MaxLease": {func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), time.Hour)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s := memstore.New()
			k := idemtest.UniqueKey(t, "acme")
			ctx, cancel := tc.ctx()
			defer cancel()
			_, err := idem.Do(ctx, s, k, idem.FingerprintOf([]byte(`{}`)), nil, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
				dl, ok := ctx.Deadline()
				if !ok || dl.After(l.AttemptDeadline) {
					t.Errorf("fn's context ends at %v (has a deadline: %v), after its lease's AttemptDeadline %v", dl, ok, l.AttemptDeadline)
				}
				return idem.Succeeded(idem.Response{Status: 200}), nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With the store on a test clock, DoOptions.Clock turns the lease's
// AttemptDeadline into the real time left: a store clock far in the past
// must not leave fn a context already done, nor one that outlives the
// lease.
func TestDoFunctionContextFollowsTheStoresClock(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	k := idemtest.UniqueKey(t, "acme")
	start := time.Now()
	_, err := idem.Do(t.Context(), s, k, idem.FingerprintOf([]byte(`{}`)), nil, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		if err := ctx.Err(); err != nil {
			t.Errorf("fn's context is done at once: %v", err)
		}
		dl, _ := ctx.Deadline()
		left := l.AttemptDeadline.Sub(clock.Now())
		if dl.Before(start.Add(left-time.Second)) || dl.After(time.Now().Add(left)) {
			t.Errorf("fn's context ends in %v, want the lease's %v", time.Until(dl), left)
		}
		return idem.Succeeded(idem.Response{Status: 200}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
