// Package claims holds the rules of a Ledger's claims that every store
// applies alike. Two copies drifted before; one serves both.
package claims

import (
	"context"
	"errors"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
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

// Unreleased reports whether l's release mark is to be cleared after its
// record write failed. The record may be RELEASED all the same. The
// write may have landed unanswered, or the holding lease released it.
// Then the mark stays: the claim ends with that release. Unread, it
// stays too, and the read's error is returned.
func Unreleased(ctx context.Context, get func(context.Context, idem.Key) (*idem.Record, error), l *idem.Lease) (bool, error) {
	rec, err := get(ctx, l.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	return rec.Status != idem.StatusReleased || !rec.CreatedAt.Equal(l.CreatedAt), nil
}
