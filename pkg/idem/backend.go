package idem

import (
	"context"
	"iter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Backend is what Do and the Lambda middleware need of a store: claim a
// key, then settle the lease. *Store and the in-memory store of package
// memstore implement it, and so does a ReplayCache around either.
type Backend interface {
	Begin(ctx context.Context, key Key, fp Fingerprint, intent []byte) (Begun, error)
	Commit(ctx context.Context, l *Lease, resp Response, writes ...types.TransactWriteItem) error
	Fail(ctx context.Context, l *Lease, resp Response) error
	Release(ctx context.Context, l *Lease) error
}

// RecoveryBackend is a Backend that also keeps leases alive and resolves
// the commands whose attempt died: what a reconciler or a sweeper needs,
// and what the conformance suite (package idemtest) checks.
type RecoveryBackend interface {
	Backend
	Heartbeat(ctx context.Context, l *Lease) error
	Postpone(ctx context.Context, l *Lease, until time.Time) error
	TakeOver(ctx context.Context, key Key) (*Lease, error)
	Preempt(ctx context.Context, key Key, created time.Time) (*Lease, error)
	Get(ctx context.Context, key Key) (*Record, error)
	StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[StuckLease, error]
	Shards() int
}

var _ RecoveryBackend = (*Store)(nil)
