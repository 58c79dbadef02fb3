package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Ledger is an in-memory idem.Ledger, for tests of stores in several
// Regions (Options.Ledger). It keeps the semantics of dynamostore's
// Ledger: a live claim stands, a yielding holder's passes to its heir,
// and an expired one is replaced once its holder yields.
type Ledger struct {
	yields func(idem.Key, string) bool

	mu     sync.Mutex
	claims map[idem.Key]idem.Claim
}

var _ idem.Ledger = (*Ledger)(nil)

// NewLedger returns an empty Ledger. yields is its Yields: whether
// another Region may write the records a Region claimed. Nil yields no
// Region.
func NewLedger(yields func(key idem.Key, region string) bool) *Ledger {
	return &Ledger{yields: yields, claims: map[idem.Key]idem.Claim{}}
}

// Claim records c unless a live claim of key stands, as
// dynamostore.Ledger.Claim.
func (l *Ledger) Claim(ctx context.Context, key idem.Key, c idem.Claim) (idem.Claim, error) {
	if err := done(ctx, "claim", key); err != nil {
		return idem.Claim{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.claims[key]
	live := ok && old.End().After(c.CreatedAt)
	holder := old.Holder()
	switch {
	case !ok || !live && (holder == c.Region || l.Yields(key, holder)):
		l.claims[key] = c
		return c, nil
	case live && holder == c.Region:
		return old, nil
	case live && l.Yields(key, holder):
		old.Heir = c.Region
		l.claims[key] = old
		return old, nil
	default:
		return idem.Claim{}, &idem.ClaimedElsewhereError{Region: holder}
	}
}

// Extend moves the Until of key's claim created at created to until,
// as dynamostore.Ledger.Extend.
func (l *Ledger) Extend(ctx context.Context, key idem.Key, region string, created, until time.Time) error {
	if err := done(ctx, "extend", key); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.claims[key]
	switch {
	case !ok:
		l.claims[key] = idem.Claim{Region: region, CreatedAt: time.UnixMilli(created.UnixMilli()), Until: until}
		return nil
	case old.CreatedAt.UnixMilli() != created.UnixMilli() || old.Holder() != region && !l.Yields(key, old.Holder()):
		return &idem.ClaimedElsewhereError{Region: old.Holder()}
	case old.Holder() != region:
		old.Heir = region
	}
	if until.After(old.Until) {
		old.Until = until
	}
	l.claims[key] = old
	return nil
}

// Release sets the release's end on key's claim created at created, and
// the releasing lease's token, or clears them, as
// dynamostore.Ledger.Release.
func (l *Ledger) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	return l.held(ctx, "release", key, region, created, func(old *idem.Claim) error {
		return released(key, old, until, token)
	})
}

// released applies a Release of until, by token, to old.
func released(key idem.Key, old *idem.Claim, until time.Time, token string) error {
	switch {
	case !until.IsZero() && old.Settled:
		return fmt.Errorf("idem: ledger release %s: the command settled: %w", key.LogHash(), idem.ErrLeaseLost)
	case !until.IsZero():
		old.ReleasedUntil, old.ReleasedBy = time.UnixMilli(until.UnixMilli()), token
	case token == "":
		old.ReleasedUntil, old.ReleasedBy, old.Settled = time.Time{}, "", false
	case token == old.ReleasedBy:
		old.ReleasedUntil, old.ReleasedBy = time.Time{}, ""
	}
	return nil
}

// Settle clears any release's end on key's claim created at created,
// and marks it settled, as dynamostore.Ledger.Settle.
func (l *Ledger) Settle(ctx context.Context, key idem.Key, region string, created time.Time) error {
	return l.held(ctx, "settle", key, region, created, func(old *idem.Claim) error {
		old.ReleasedUntil, old.ReleasedBy, old.Settled = time.Time{}, "", true
		return nil
	})
}

// held applies change to key's claim created at created, if region
// holds it, for op. A key with no claim is left as it is.
func (l *Ledger) held(ctx context.Context, op string, key idem.Key, region string, created time.Time, change func(*idem.Claim) error) error {
	if err := done(ctx, op, key); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.claims[key]
	switch {
	case !ok:
		return nil
	case old.CreatedAt.UnixMilli() != created.UnixMilli() || old.Holder() != region:
		return &idem.ClaimedElsewhereError{Region: old.Holder()}
	}
	if err := change(&old); err != nil {
		return err
	}
	l.claims[key] = old
	return nil
}

// Unreplicated is always zero: no Region of an in-memory Ledger is
// pending a drain.
func (l *Ledger) Unreplicated(idem.Key) time.Time { return time.Time{} }

// Yields reports whether records region claimed may be written
// elsewhere.
func (l *Ledger) Yields(key idem.Key, region string) bool {
	return l.yields != nil && l.yields(key, region)
}
