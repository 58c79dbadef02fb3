package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/aws/smithy-go"
)

// Errors callers branch on. SDK errors never escape the package unwrapped;
// these are what the store's methods return.
var (
	// ErrFingerprintMismatch: the key was used before with a different
	// request. The stored response is not returned. Returned as
	// *MismatchError.
	ErrFingerprintMismatch = errors.New("idem: key reused with a different request")
	// ErrInFlight: another attempt holds the key. Returned as *InFlightError.
	ErrInFlight = errors.New("idem: request in flight")
	// ErrLeaseLost: the caller's lease was taken over or the record was
	// completed or released by someone else; nothing was written.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrNotFound: no live record for the key (absent, or past retention).
	ErrNotFound = errors.New("idem: record not found")
	// ErrCompleted: the record is terminal; it cannot be taken over.
	ErrCompleted = errors.New("idem: record already completed")
	// ErrWriteConditionFailed: one of the caller's business writes in a
	// Commit failed its own condition. Returned as *WriteConditionError.
	ErrWriteConditionFailed = errors.New("idem: business write condition failed")
	// ErrTooLarge: a response or intent would not fit in a record.
	ErrTooLarge = errors.New("idem: too large to store")
	// ErrUnavailable: DynamoDB could not do the request now (throttling,
	// a server error, a timeout); retry later. Every SDK error the store
	// returns is translated by AsUnavailable, so callers branch on this,
	// never on the SDK's error codes.
	ErrUnavailable = errors.New("idem: store unavailable")
	// ErrUnreadableRecord: StuckLeases met an item of the store that does
	// not decode. The error names it by its key's hash; the iteration
	// goes on past it.
	ErrUnreadableRecord = errors.New("idem: unreadable record")
)

// AsUnavailable returns err so that errors.Is(err, ErrUnavailable) holds if
// it is DynamoDB saying it could not do the request now (throttling, a
// server error) or a deadline; any other error as it is. The store applies
// it to every SDK error it returns; a caller's own DynamoDB calls beside
// the store (a read of its business rows) may use it too.
func AsUnavailable(err error) error {
	var (
		api  smithy.APIError
		resp *awshttp.ResponseError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &api) && transientCodes[api.ErrorCode()],
		errors.As(err, &resp) && resp.HTTPStatusCode() >= 500,
		errors.Is(err, context.DeadlineExceeded):
		return &unavailableError{err}
	}
	return err
}

// transientCodes are DynamoDB's error codes for a request it could not do
// now, whatever the request.
var transientCodes = map[string]bool{
	"ThrottlingException": true, "ProvisionedThroughputExceededException": true, "RequestLimitExceeded": true,
	"TransactionConflictException": true, "TransactionInProgressException": true, "InternalServerError": true,
	"InternalFailure": true, "ServiceUnavailable": true,
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

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

func (e *MismatchError) Error() string { return ErrFingerprintMismatch.Error() }

// Is makes errors.Is(err, ErrFingerprintMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }

// WriteConditionError names the business write, by its index in the
// writes passed to Commit, whose condition failed.
type WriteConditionError struct {
	Index int
}

func (e *WriteConditionError) Error() string {
	return fmt.Sprintf("idem: business write %d: condition failed", e.Index)
}

// Is makes errors.Is(err, ErrWriteConditionFailed) true.
func (e *WriteConditionError) Is(target error) bool { return target == ErrWriteConditionFailed }

// UnknownClaimError reports a claim whose write DynamoDB did not answer
// with a verdict at some attempt (a timeout, a server error), however the
// SDK's last retry ended: it may have been applied, its answer lost, so
// the key may now be IN_FLIGHT under a lease nobody holds. Only a claim
// refused by its condition, or refused unprocessed (a 4xx) at every attempt, is known not to
// have happened; Begin returns that one's error as it is. Whoever takes the lease over
// once it ends (a reconciler) finds the record; a retry meanwhile gets
// *InFlightError. Err is the SDK's error.
type UnknownClaimError struct {
	// LeaseExpiresAt and RecordExpiresAt are the claim's, had it landed.
	LeaseExpiresAt, RecordExpiresAt time.Time
	Err                             error
}

func (e *UnknownClaimError) Error() string {
	return "idem: claim outcome unknown: " + e.Err.Error()
}

func (e *UnknownClaimError) Unwrap() error { return e.Err }
