package memstore_test

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

// beforeClear is a Ledger that runs hook once, just before the first
// clear of a release's end: another request's writes landing between a
// stale release's read-back and its clear.
type beforeClear struct {
	*memstore.Ledger
	hook func()
}

func (b *beforeClear) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && b.hook != nil {
		hook := b.hook
		b.hook = nil
		hook()
	}
	return b.Ledger.Release(ctx, key, region, created, until, token)
}

// TestAStaleReleasesClearDoesNotEraseTheHoldersRelease: as dynamostore's.
// The stale release reads IN_FLIGHT; the holder releases; the stale clear
// removes the holder's end. The key must be free once the release expired.
func TestAStaleReleasesClearDoesNotEraseTheHoldersRelease(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &beforeClear{Ledger: memstore.NewLedger(nil)}
	st := memstore.New(func(o *memstore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	stale := begun.Lease
	clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(clock.Now()))
	taken, err := st.TakeOver(t.Context(), k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	var holderErr error
	ledger.hook = func() { holderErr = st.Release(t.Context(), taken) }
	if err := st.Release(t.Context(), stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's Release: %v; want ErrLeaseLost", err)
	}
	if holderErr != nil {
		t.Fatalf("the holding lease's Release: %v", holderErr)
	}
	released, err := st.Get(t.Context(), k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the record: %+v, %v; want RELEASED", released, err)
	}
	clock.Advance(released.ExpiresAt.Add(time.Second).Sub(clock.Now())) // the release expired
	other := []byte("another intent")
	next, err := st.Begin(t.Context(), k, idem.FingerprintOf(other), other)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(stale.CreatedAt) {
		t.Fatalf("another intent once the release expired: %+v, %v; want a new command (backend.md: the claim ends with the release's record)", next, err)
	}
}

// failClear is a Ledger whose next clear of a release's end is refused,
// unapplied: throttled.
type failClear struct {
	*memstore.Ledger
	armed bool
}

func (f *failClear) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && f.armed {
		f.armed = false
		return fmt.Errorf("throttled, the clear is not applied: %w", idem.ErrUnavailable)
	}
	return f.Ledger.Release(ctx, key, region, created, until, token)
}

// TestAClaimBackWhoseClearFailsSaysNothingWasWrittenOnlyIfSo: as
// dynamostore's. The record is written, its lease handed to nobody:
// ErrUnknownClaim, not ErrUnavailable alone.
func TestAClaimBackWhoseClearFailsSaysNothingWasWrittenOnlyIfSo(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &failClear{Ledger: memstore.NewLedger(nil)}
	st := memstore.New(func(o *memstore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	if err := st.Release(t.Context(), begun.Lease); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	ledger.armed = true
	if _, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body); !errors.Is(err, idem.ErrUnknownClaim) {
		t.Fatalf("the claim back whose clear failed: %v; want ErrUnknownClaim (backend.go: ErrUnavailable alone says no record was written)", err)
	}
	rec, err := st.Get(t.Context(), k)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the record after Begin said its claim unknown: %+v, %v; want IN_FLIGHT, for the reconciler", rec, err)
	}
}

// TestAClaimBackInItsCommandsMillisecondClearsTheReleasesEnd: a release
// claimed back in the millisecond its command was created, as under a
// test's frozen clock. dynamostore's claim back clears the release's end
// (claims.Leased); memstore's skips it, taking the lease for a fresh
// claim. Committed, the command's claim still ends with the release: a
// retry whose record is lost is a new command.
func TestAClaimBackInItsCommandsMillisecondClearsTheReleasesEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := memstore.NewLedger(nil)
	region := func() *memstore.Store {
		return memstore.New(func(o *memstore.Options) {
			o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour
			o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
		})
	}
	st := region()
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	if err := st.Release(ctx, begun.Lease); err != nil {
		t.Fatal(err)
	}
	back, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || back.Lease == nil || !back.Lease.CreatedAt.Equal(begun.Lease.CreatedAt) {
		t.Fatalf("the claim back: %+v, %v", back, err)
	}
	if err := st.Commit(ctx, back.Lease, idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour + time.Minute) // past the release's end; a fresh store: the record lost
	retry, err := region().Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || retry.Lease == nil || !retry.Lease.CreatedAt.Equal(begun.Lease.CreatedAt) {
		t.Fatalf("the retry of the committed command: %+v, %v; want it taken up under %s, as dynamostore does", retry, err, begun.Lease.CreatedAt)
	}
}
