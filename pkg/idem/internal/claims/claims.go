// Package claims holds the rules of a Ledger's claims that every store
// applies alike. Two copies drifted before; one serves both.
package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// TakeUp refuses a request with fingerprint fp the take-up of c, an
// earlier claim, in region, or returns nil. held says the store holds
// the record of c's command; status is its status. earliest is the
// soonest any record of c's command may expire.
//
// A settled record makes a new intent wait for the claim's end. Without
// its record, the fingerprint tells another request. It gets
// *MismatchError while the record may live, then waits. The claimed
// request takes c up: a retry. A fingerprintless claim is told by age,
// and only the Region's own.
func TakeUp(c idem.Claim, held bool, status idem.Status, fp idem.Fingerprint, region string, earliest, now time.Time) error {
	wait := &idem.InFlightError{LeaseExpiresAt: c.End(), RecordExpiresAt: c.End()}
	if held {
		if status != idem.StatusInFlight {
			return wait
		}
		return nil
	}
	expirable := !now.Before(earliest)
	switch another := c.Fingerprint != (idem.Fingerprint{}) && c.Fingerprint != fp; {
	case another && !expirable:
		return &idem.MismatchError{RecordExpiresAt: c.End()}
	case another, c.Fingerprint == (idem.Fingerprint{}) && !c.InheritedBy(region) && expirable:
		return wait
	}
	return nil
}

// Mark writes the release's end on the Ledger's claim of l's command.
// It names the releasing lease's token (idem.Ledger.Release). A zero
// until clears it: token's only, or any if token is empty.
type Mark func(ctx context.Context, l *idem.Lease, until time.Time, token string) error

// Settle records on the Ledger that the command created at created
// under key settled (idem.Ledger.Settle).
type Settle func(ctx context.Context, key idem.Key, created time.Time) error

// Read returns key's record, even one past its retention: ErrNotFound
// only when none is stored.
type Read func(ctx context.Context, key idem.Key) (*idem.Record, error)

// ReadOn is read for a store with ledger. Without one it is nil: Leased
// then has no claim to settle again, and reads nothing.
func ReadOn(ledger idem.Ledger, read Read) Read {
	if ledger == nil {
		return nil
	}
	return read
}

// Wrap translates a Ledger's err for a store's op on key.
type Wrap func(op string, key idem.Key, err error) error

// MarkOn is the Mark of a store in region, for op, on ledger. A nil
// ledger keeps no claims: it does nothing.
func MarkOn(ledger idem.Ledger, region, op string, wrap Wrap) Mark {
	return func(ctx context.Context, l *idem.Lease, until time.Time, token string) error {
		if ledger == nil {
			return nil
		}
		return wrap(op, l.Key, ledger.Release(ctx, l.Key, region, l.CreatedAt, until, token))
	}
}

// SettleOn is the Settle of a store in region, for op, on ledger, as
// MarkOn.
func SettleOn(ledger idem.Ledger, region, op string, wrap Wrap) Settle {
	return func(ctx context.Context, key idem.Key, created time.Time) error {
		if ledger == nil {
			return nil
		}
		return wrap(op, key, ledger.Settle(ctx, key, region, created))
	}
}

// The release's end: one rule for both stores. A release records it
// before its RELEASED write, naming its lease. A lease clears only its
// own end, once its write cannot land. A lease whose record is known not
// RELEASED clears any: Leased. A marked lease's commit or failure
// clears any and marks the claim settled: Settled. A settled claim
// refuses a stale lease's end. Leased settles again a claim its clear
// may have unsettled.

// Release records until, the release's end, then runs write, l's
// RELEASED write. l is marked: should it settle otherwise, it clears the
// end. A failed write clears l's own end once it cannot land
// (Unreleased).
func Release(ctx context.Context, l *idem.Lease, mark Mark, read Read, until time.Time, write func() error) error {
	*policy.LeaseMarked(l) = true
	if err := mark(ctx, l, until, l.Token); err != nil {
		return err
	}
	if err := write(); err != nil {
		return errors.Join(err, Unreleased(ctx, l, read, mark))
	}
	return nil
}

// Unreleased clears l's own end after its RELEASED write failed. It does
// once the record shows that write cannot land. Another lease holds or
// settled it, or no item is stored. A record l still holds keeps the
// end: the write may land later. So do a RELEASED record, even one past
// its retention, and an unread one. The clear names l's token. The
// holder's release may record its end meanwhile.
func Unreleased(ctx context.Context, l *idem.Lease, read Read, mark Mark) error {
	rec, err := read(ctx, l.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
	case err != nil:
		return err
	case rec.CreatedAt.Equal(l.CreatedAt) && rec.Status == idem.StatusReleased,
		rec.Status == idem.StatusInFlight && rec.LeaseToken == l.Token:
		return nil
	}
	return mark(ctx, l, time.Time{}, l.Token)
}

// Leased clears any end once l's IN_FLIGHT record is written over an
// earlier lease's. That is a claim back, a take-up or a take-over: l may
// settle otherwise. It clears the settled mark too: l may release. Cleared
// before the write, a death between would leave a RELEASED record
// without its end. A failed clear leaves the record IN_FLIGHT under a
// lease nobody holds. So it answers *idem.UnknownClaimError, never
// "nothing was written". l is marked: a stale lease may still record an
// end.
//
// A clear held up may land after a later lease settled the command. It
// would remove that settle's mark. So Leased reads the record after its
// clear. Settled by another lease, its claim is settled again. Leased
// then answers the stored Replay, as a Begin after completion gets: l is
// lost. Otherwise it answers l. A record l holds keeps the clear: a
// take-up of a lost record may release. A nil read, a store without
// claims (ReadOn), reads nothing.
func Leased(ctx context.Context, l *idem.Lease, read Read, mark Mark, settle Settle) (idem.Begun, error) {
	*policy.LeaseMarked(l) = true
	var settled *idem.Record
	err := mark(ctx, l, time.Time{}, "")
	if err == nil && read != nil {
		settled, err = settledMeanwhile(ctx, l, read, settle)
	}
	switch {
	case err != nil:
		return idem.Begun{}, &idem.UnknownClaimError{LeaseExpiresAt: l.ExpiresAt, RecordExpiresAt: l.RecordExpiresAt, Err: err}
	case settled != nil:
		return idem.Begun{Replay: settled.Response, RecordExpiresAt: settled.ExpiresAt, Status: settled.Status}, nil
	}
	return idem.Begun{Lease: l, RecordExpiresAt: l.RecordExpiresAt, Status: idem.StatusInFlight}, nil
}

// TakenOver is Leased for op, a take-over or preemption, of l. A command
// settled meanwhile gives idem.ErrCompleted, as it does before the write.
func TakenOver(ctx context.Context, op string, l *idem.Lease, read Read, mark Mark, settle Settle) error {
	begun, err := Leased(ctx, l, read, mark, settle)
	if err == nil && begun.Lease == nil {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), idem.ErrCompleted)
	}
	return err
}

// settledMeanwhile returns l's command's record if it is settled, and
// settles its claim again: another lease settled it before l's clear.
// Otherwise it returns nil.
func settledMeanwhile(ctx context.Context, l *idem.Lease, read Read, settle Settle) (*idem.Record, error) {
	rec, err := read(ctx, l.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case rec.Status.Terminal() && rec.CreatedAt.Equal(l.CreatedAt):
		return rec, settle(ctx, l.Key, l.CreatedAt)
	}
	return nil, nil
}

// Settled clears any end after l committed or failed its command, and
// marks the claim settled. Its record outlives a release's end, and a
// stale lease's end is refused from then on. Only a marked lease can
// meet one. A command's only lease, never released, writes nothing. So
// a first charge costs no Ledger write more. After an error the record
// is settled all the same. idem.Recover settles the claim again.
func Settled(ctx context.Context, l *idem.Lease, settle Settle) error {
	if !*policy.LeaseMarked(l) {
		return nil
	}
	return settle(ctx, l.Key, l.CreatedAt)
}
