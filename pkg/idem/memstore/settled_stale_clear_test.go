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

// staleLeased is a Ledger that runs hook once, just before the first
// clear of any end (claims.Leased): a claim back's clear held up in the
// network while its lease runs out. It notes every end recorded.
type staleLeased struct {
	*memstore.Ledger
	hook func()
	ends []error // the answers to every release's end, in order
}

func (s *staleLeased) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && token == "" && s.hook != nil {
		hook := s.hook
		s.hook = nil
		hook()
	}
	err := s.Ledger.Release(ctx, key, region, created, until, token)
	if !until.IsZero() {
		s.ends = append(s.ends, err)
	}
	return err
}

// TestAStaleLeasedClearDoesNotUnsettleACommittedCommand: a claim back's
// clear of any end (claims.Leased) lands after another lease committed
// and settled the command. The clear removes the Settled mark too. A
// stale lease's end is then recorded on a settled command's claim,
// though ledger.go says no lease's end is recorded after Settle.
func TestAStaleLeasedClearDoesNotUnsettleACommittedCommand(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &staleLeased{Ledger: memstore.NewLedger(nil)}
	st := memstore.New(func(o *memstore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	first, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || first.Lease == nil {
		t.Fatalf("Begin: %+v, %v", first, err)
	}
	if err := st.Release(ctx, first.Lease); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	var committed error
	ledger.hook = func() {
		// The claim back's record is IN_FLIGHT; its clear is slow. Its
		// lease runs out; the reconciler takes over and commits.
		rec, err := st.Get(ctx, k)
		if err != nil {
			committed = err
			return
		}
		clock.Advance(rec.LeaseExpiresAt.Add(time.Second).Sub(clock.Now()))
		taken, err := st.TakeOver(ctx, k)
		if err != nil {
			committed = err
			return
		}
		committed = st.Commit(ctx, taken, idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)})
	}
	back, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || back.Lease == nil {
		t.Fatalf("the claim back: %+v, %v", back, err)
	}
	if committed != nil {
		t.Fatalf("the take-over's commit: %v", committed)
	}
	rec, err := st.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusSucceeded {
		t.Fatalf("the record: %+v, %v; want SUCCEEDED", rec, err)
	}
	// The claim back's lease is stale now. Its release must be refused
	// on the Ledger: the command settled.
	ledger.ends = nil
	if err := st.Release(ctx, back.Lease); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale release: %v; want ErrLeaseLost", err)
	}
	if len(ledger.ends) != 1 || !errors.Is(ledger.ends[0], idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's end on the settled command's claim: %v; want refused with ErrLeaseLost (ledger.go: no lease's end is recorded after Settle)", ledger.ends)
	}
}
