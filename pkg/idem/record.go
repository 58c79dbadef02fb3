package idem

import (
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// Status is a record's place in the lifecycle. ABSENT is the lack of a
// (live) record, so it has no value here.
type Status string

// The stored states.
const (
	StatusInFlight        Status = "IN_FLIGHT"
	StatusSucceeded       Status = "SUCCEEDED"
	StatusFailedPermanent Status = "FAILED_PERMANENT"
	// StatusReleased is ABSENT with a memory: the effect verifiably did not
	// happen, and until retention ends the key may be claimed again by the
	// same request only (with the same CreatedAt, so the same derived
	// references), never by another.
	StatusReleased Status = "RELEASED"
)

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusFailedPermanent }

// Lease is the right to complete one command, held by one attempt. Its
// token fences every write: once the lease is taken over, the holder's
// Commit, Fail, Release, Heartbeat and Postpone all fail with ErrLeaseLost.
type Lease struct {
	Key       Key
	Token     string
	ExpiresAt time.Time // the lease
	// CreatedAt is the command's first attempt. It names this use of the
	// key: a claim after a release keeps it, a claim after retention gets
	// a new one, so references derived from (Key, CreatedAt) tell two
	// intents under one key apart.
	CreatedAt time.Time
	// RecordExpiresAt is, while the command is unsettled, the earliest the
	// key may stop deduplicating (if this lease released the command);
	// once this lease has settled it, when it does.
	RecordExpiresAt time.Time
	// AttemptDeadline is when the last attempt at the effect had to be
	// sent by: the end of the lease it ran under (Begin, Heartbeat).
	AttemptDeadline time.Time
	// Attempts counts the take-overs: how often the command has been
	// resolved by someone other than its first attempt.
	Attempts int
	Intent   []byte // what Begin stored for reconciliation
	// Inherited: the command's claim is another Region's, taken on
	// once it yielded (Ledger). Its attempts there may have acted.
	// So only a Resolver settles it: Do never runs its function
	// under such a lease.
	Inherited bool

	// committed is the digest of the business writes of this lease's
	// Commit once one may have been applied, so that a second Commit with
	// other writes is refused rather than taken for its retry.
	committed *string
}

// Begun is the outcome of Begin that lets the caller go on: either it owns
// a new lease (Lease != nil), or the command already finished and Replay
// is its stored response.
type Begun struct {
	Lease           *Lease
	Replay          *Response
	RecordExpiresAt time.Time
	// Status is IN_FLIGHT with a Lease, the terminal status with a Replay.
	Status Status
}

// Record is a stored command as Get reads it. StuckLeases gives only its
// Key, LeaseExpiresAt and Attempts.
type Record struct {
	Key            Key
	Status         Status
	Fingerprint    string // the lower-case hex form, Fingerprint.String
	CreatedAt      time.Time
	ExpiresAt      time.Time // end of retention; zero while IN_FLIGHT
	LeaseExpiresAt time.Time // zero unless IN_FLIGHT
	// AttemptDeadline is when the last attempt at the effect had to be
	// sent by; zero unless IN_FLIGHT.
	AttemptDeadline time.Time
	Attempts        int // take-overs so far
	// LeaseToken is the token of the lease that holds the record (while
	// IN_FLIGHT) or last held it: whoever settled it.
	LeaseToken string
	Intent     []byte
	Response   *Response // nil unless terminal
	// Region is the Region whose store last leased the record. It is
	// empty for a store without one.
	Region string
}

func init() {
	// Only a store may read or set what its Commit may have applied.
	policy.LeaseCommitted = func(l any) **string { return &l.(*Lease).committed }
}
