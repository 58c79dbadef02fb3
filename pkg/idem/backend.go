package idem

import (
	"context"
	"iter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Backend is a store of idempotency records. Package dynamostore keeps
// them in DynamoDB and package memstore in memory; a ReplayCache wraps
// either. Every function of this package reads time from Now, so a test
// gives its clock to the store alone.
//
// A custom Backend must keep the contract below, which
// idemtest.RunConformance checks.
//
// Errors. Return the sentinels of this package, wrapped or not, or its
// typed errors: callers test them with errors.Is alone. ErrNotFound,
// ErrCompleted, ErrInFlight (or *InFlightError), ErrMismatch (or
// *MismatchError), ErrLeaseLost, ErrTooLarge, ErrWriteCondition (or
// *WriteConditionError) and ErrUnavailable each mean what their doc says.
//
// Begin. An error wrapping ErrUnavailable, and not ErrUnknownClaim,
// proves that no record was written: only then may a caller answer
// "nothing was done". Any other error, a timeout or a cancelled context
// included, leaves the claim unknown. A Begun always carries
// RecordExpiresAt, never zero.
//
// Context. A method called with a context already done returns an error
// wrapping the context's error and changes nothing.
//
// Regions. A Backend with a Ledger claims a fresh command there first.
// It writes the record under the CreatedAt the Ledger holds. It never
// writes a record another Region claimed or last leased, unless the
// Ledger yields that Region. Begin, TakeOver and Preempt then give
// *ClaimedElsewhereError and write nothing. A claim taken from a Region
// that yields is Inherited. idemtest.RunRegionConformance checks it.
type Backend interface {
	// Now is the store's clock.
	Now() time.Time
	// Begin claims key for the request fingerprinted by fp, storing
	// intent for a reconciler; or returns the stored response of a
	// settled command.
	Begin(ctx context.Context, key Key, fp Fingerprint, intent []byte) (Begun, error)
	// Commit settles the lease's command SUCCEEDED with resp, and applies
	// writes in the same transaction.
	Commit(ctx context.Context, l *Lease, resp Response, writes ...types.TransactWriteItem) error
	// Fail settles it FAILED_PERMANENT with resp.
	Fail(ctx context.Context, l *Lease, resp Response) error
	// Release frees the key for a retry of the same request.
	Release(ctx context.Context, l *Lease) error
	// Heartbeat extends a live lease; it never shortens it.
	Heartbeat(ctx context.Context, l *Lease) error
	// Postpone ends an attempt and keeps others off the key until until.
	Postpone(ctx context.Context, l *Lease, until time.Time) error
	// TakeOver gives a new lease on a command whose lease ran out.
	TakeOver(ctx context.Context, key Key) (*Lease, error)
	// Preempt gives a new lease on the command created at created,
	// whatever its lease, for a caller that knows its outcome.
	Preempt(ctx context.Context, key Key, created time.Time) (*Lease, error)
	// Get reads a record.
	Get(ctx context.Context, key Key) (*Record, error)
	// StuckLeases lists one shard's commands whose lease ran out before
	// before, oldest first.
	StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[Record, error]
	// Shards is the number of shards StuckLeases reads.
	Shards() int
}
