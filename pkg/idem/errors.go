package idem

import (
	"errors"
	"fmt"
	"time"
)

// The errors callers branch on, with errors.Is. A Backend returns them
// (wrapped, or as the typed errors below), never its own SDK's errors.
var (
	// ErrInvalidKey: a part of a key is invalid (NewKey, ParseKey).
	ErrInvalidKey = errors.New("idem: invalid key")
	// ErrInvalidJSON: CanonicalJSON, or DoJSON, refused a request: it is
	// not one JSON value, repeats an object's key, or holds text that is
	// not UTF-8. Two different requests would otherwise share a
	// fingerprint.
	ErrInvalidJSON = errors.New("idem: invalid JSON")
	// ErrNotApplied, wrapped in the error of DoJSON's function, says the
	// effect verifiably did not happen: the key is released for a retry.
	ErrNotApplied = errors.New("idem: not applied")
	// ErrMismatch: the key was used before with a different request. The
	// stored response is not returned. Typed: *MismatchError.
	ErrMismatch = errors.New("idem: key reused with a different request")
	// ErrInFlight: another attempt holds the key. Typed: *InFlightError.
	ErrInFlight = errors.New("idem: request in flight")
	// ErrLeaseLost: the lease was taken over, or the record settled by
	// someone else; nothing was written.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrNotFound: no live record for the key (absent, or past retention).
	ErrNotFound = errors.New("idem: record not found")
	// ErrCompleted: the record is settled; it cannot be taken over.
	ErrCompleted = errors.New("idem: record already completed")
	// ErrWriteCondition: a business write's own condition failed in a
	// Commit. Typed: *WriteConditionError.
	ErrWriteCondition = errors.New("idem: business write condition failed")
	// ErrTooLarge: a response or intent would not fit in a record.
	ErrTooLarge = errors.New("idem: too large to store")
	// ErrUnavailable: the store could not do the request now (throttled,
	// a server error), or could not be heard (a failed connection, an
	// answer cut short); retry later. From Begin, without
	// ErrUnknownClaim, it proves that no record was written. From
	// another write it proves nothing.
	ErrUnavailable = errors.New("idem: store unavailable")
	// ErrUnknownClaim: a claim's write was not answered; it may have
	// landed. Typed: *UnknownClaimError.
	ErrUnknownClaim = errors.New("idem: claim outcome unknown")
	// ErrUnreadableRecord: StuckLeases met an item that does not decode.
	// The error names it by its key's hash; the listing goes on.
	ErrUnreadableRecord = errors.New("idem: unreadable record")
	// ErrClaimedElsewhere: another Region claimed the command, and its
	// writes may not have replicated here yet (Ledger). Nothing was
	// written. Typed: *ClaimedElsewhereError.
	ErrClaimedElsewhere = errors.New("idem: command claimed in another Region")
)

// InFlightError reports a key held by an unfinished attempt.
type InFlightError struct {
	LeaseExpiresAt time.Time // when the holder's lease runs out
	// RecordExpiresAt is the earliest the key can stop deduplicating:
	// retention starts when the command settles.
	RecordExpiresAt time.Time
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("idem: request in flight, lease until %s", e.LeaseExpiresAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrInFlight) true.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// MismatchError reports a key already used for a different request.
type MismatchError struct {
	RecordExpiresAt time.Time // when the key stops deduplicating
}

func (e *MismatchError) Error() string { return ErrMismatch.Error() }

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// WriteConditionError names the business write, by its index in the
// writes passed to Commit, whose condition failed.
type WriteConditionError struct {
	Index int
}

func (e *WriteConditionError) Error() string {
	return fmt.Sprintf("idem: business write %d: condition failed", e.Index)
}

// Is makes errors.Is(err, ErrWriteCondition) true.
func (e *WriteConditionError) Is(target error) bool { return target == ErrWriteCondition }

// UnknownClaimError reports a claim whose write was not answered at some
// attempt (a timeout, a server error). It may have landed, its answer
// lost, so the key may be IN_FLIGHT under a lease nobody holds. Whoever
// takes the lease over once it ends (a reconciler) finds the record; a
// retry meanwhile gets *InFlightError. Err is the store's own error.
type UnknownClaimError struct {
	// LeaseExpiresAt and RecordExpiresAt are the claim's, had it landed.
	LeaseExpiresAt, RecordExpiresAt time.Time
	Err                             error
}

func (e *UnknownClaimError) Error() string {
	return "idem: claim outcome unknown: " + e.Err.Error()
}

// Unwrap gives ErrUnknownClaim and Err, for errors.Is and errors.As.
func (e *UnknownClaimError) Unwrap() []error { return []error{ErrUnknownClaim, e.Err} }

// ClaimedElsewhereError names the Region that holds a command's claim.
// Region is empty when the command is older than a failover whose old
// Region is not drained: that Region may have changed it.
type ClaimedElsewhereError struct {
	Region string
}

func (e *ClaimedElsewhereError) Error() string {
	if e.Region == "" {
		return "idem: command may have changed in a Region not yet drained"
	}
	return "idem: command claimed in Region " + e.Region
}

// Is makes errors.Is(err, ErrClaimedElsewhere) true.
func (e *ClaimedElsewhereError) Is(target error) bool { return target == ErrClaimedElsewhere }
