package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// slowClear is a Ledger whose next clear of any end runs hook first: the
// clear held up while other requests write.
type slowClear struct {
	*memstore.Ledger
	hook func()
}

func (s *slowClear) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && token == "" && s.hook != nil {
		hook := s.hook
		s.hook = nil
		hook()
	}
	return s.Ledger.Release(ctx, key, region, created, until, token)
}

// TestAClaimBackThatFindsItsCommandSettledAnswersTheReplay: a retry claims
// a released charge back. While its clear is held up, the provider's
// notification preempts the live lease and commits the charge. The claim
// back then reads its record SUCCEEDED, and settles the claim again
// (claims.Leased). It knows the command completed: backend.md says an
// attempt after completion gets the stored Replay. It hands out a live
// lease instead: the caller runs the command again (a refund places its
// hold again, which the fenced commit never removes) and answers
// lease-lost for a charge that succeeded.
func TestAClaimBackThatFindsItsCommandSettledAnswersTheReplay(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &slowClear{Ledger: memstore.NewLedger(nil)}
	st := memstore.New(func(o *memstore.Options) {
		o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	k, body, released := releasedIn(t, st)
	clock.Advance(time.Minute)
	charged := idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}
	var notified error
	ledger.hook = func() {
		// The notification's proof: preempt the claim back's live lease.
		l, err := st.Preempt(ctx, k, released.CreatedAt)
		if err != nil {
			notified = err
			return
		}
		notified = st.Commit(ctx, l, charged)
	}
	back, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
	if notified != nil {
		t.Fatalf("the notification's preempt and commit: %v", notified)
	}
	if rec, gerr := st.Get(ctx, k); gerr != nil || rec.Status != idem.StatusSucceeded {
		t.Fatalf("the record: %+v, %v; want SUCCEEDED", rec, gerr)
	}
	if err != nil || back.Lease != nil || back.Replay == nil || !back.Replay.Equal(charged) {
		lost := ""
		if back.Lease != nil {
			lost = "; its Commit: " + errors.Join(st.Commit(ctx, back.Lease, charged)).Error()
		}
		t.Fatalf("the claim back that read its command SUCCEEDED: lease %+v, replay %v, %v%s; want the stored Replay and no lease", back.Lease != nil, back.Replay, err, lost)
	}
}
