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
	// StatusReleased is ABSENT with a memory: the effect verifiably did
	// not happen. Until retention ends, only the same request may claim
	// the key again. It keeps its CreatedAt, so its derived references.
	// Another request never may.
	StatusReleased Status = "RELEASED"
)

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusFailedPermanent }

// Lease is the right to complete one command, held by one attempt. Its
// token fences every write. Once the lease is taken over, the holder's
// writes fail with ErrLeaseLost: Commit, Fail, Release, Heartbeat and
// Postpone.
type Lease struct {
	Key       Key
	Token     string
	ExpiresAt time.Time // the lease
	// CreatedAt is the command's first attempt. It names this use of the
	// key. A claim after a release keeps it, and a claim after retention
	// gets a new one. So references derived from (Key, CreatedAt) tell two
	// intents under one key apart.
	CreatedAt time.Time
	// RecordExpiresAt is, while the command is unsettled, the earliest the
	// key may stop deduplicating. That is if this lease released the
	// command. Once this lease has settled it, it is when the key does.
	RecordExpiresAt time.Time
	// AttemptDeadline is when the last attempt at the effect had to be
	// sent by. That is the end of the lease it ran under (Begin,
	// Heartbeat).
	AttemptDeadline time.Time
	// Attempts counts the take-overs. That is how often someone other than
	// its first attempt resolved the command.
	Attempts int
	Intent   []byte // what Begin stored for reconciliation
	// Inherited: the command's claim is another Region's, taken on
	// once it yielded (Ledger). Its attempts there may have acted.
	// So only a Resolver settles it: Do never runs its function
	// under such a lease.
	Inherited bool

	// committed is the digest of the business writes of this lease's
	// Commit, once one may have been applied. A second Commit with other
	// writes is then refused, not taken for its retry.
	committed *string
	// marked: a release's end may stand on the command's Ledger claim.
	// Another lease of the command, or this one's release, may have set it.
	marked bool
}

// Begun is the outcome of Begin that lets the caller go on. Either it owns
// a new lease (Lease != nil). Or the command already finished, and Replay
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
	// LeaseToken is the token of the lease that holds the record while
	// IN_FLIGHT, or last held it. That is whoever settled it.
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
	policy.LeaseMarked = func(l any) *bool { return &l.(*Lease).marked }
}
