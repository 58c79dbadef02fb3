package idem_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// plainErrors is a custom Backend as the contract allows one: it wraps a
// store and gives every error as a plain sentinel, never a typed one.
type plainErrors struct{ idem.Backend }

// sentinels are the errors plainErrors keeps, most specific first.
var sentinels = []error{
	context.Canceled, context.DeadlineExceeded, idem.ErrInvalidKey, idem.ErrMismatch, idem.ErrInFlight,
	idem.ErrUnknownClaim, idem.ErrLeaseLost, idem.ErrNotFound, idem.ErrCompleted, idem.ErrWriteCondition,
	idem.ErrTooLarge, idem.ErrUnavailable, idem.ErrUnreadableRecord,
}

func plain(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return fmt.Errorf("plain store: %w", s)
		}
	}
	return errors.New("plain store: " + err.Error())
}

func (p plainErrors) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	b, err := p.Backend.Begin(ctx, key, fp, intent)
	return b, plain(err)
}

func (p plainErrors) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	return plain(p.Backend.Commit(ctx, l, resp, writes...))
}

func (p plainErrors) Fail(ctx context.Context, l *idem.Lease, resp idem.Response) error {
	return plain(p.Backend.Fail(ctx, l, resp))
}

func (p plainErrors) Release(ctx context.Context, l *idem.Lease) error {
	return plain(p.Backend.Release(ctx, l))
}

func (p plainErrors) Heartbeat(ctx context.Context, l *idem.Lease) error {
	return plain(p.Backend.Heartbeat(ctx, l))
}

func (p plainErrors) Postpone(ctx context.Context, l *idem.Lease, until time.Time) error {
	return plain(p.Backend.Postpone(ctx, l, until))
}

func (p plainErrors) TakeOver(ctx context.Context, key idem.Key) (*idem.Lease, error) {
	l, err := p.Backend.TakeOver(ctx, key)
	return l, plain(err)
}

func (p plainErrors) Preempt(ctx context.Context, key idem.Key, created time.Time) (*idem.Lease, error) {
	l, err := p.Backend.Preempt(ctx, key, created)
	return l, plain(err)
}

func (p plainErrors) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	r, err := p.Backend.Get(ctx, key)
	return r, plain(err)
}

func (p plainErrors) StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[idem.Record, error] {
	return func(yield func(idem.Record, error) bool) {
		for r, err := range p.Backend.StuckLeases(ctx, shard, before) {
			if !yield(r, plain(err)) {
				return
			}
		}
	}
}

// TestConformanceWithPlainErrors: the suite holds a store to the contract
// by the sentinels alone, so a custom store that returns them plain
// passes it, as memstore does behind this wrapper.
func TestConformanceWithPlainErrors(t *testing.T) {
	t.Parallel()
	idemtest.RunConformance(t, func(t *testing.T, o idemtest.Options) idemtest.Subject {
		s := memstore.New(func(m *memstore.Options) {
			m.Clock, m.Retention, m.ReleaseRetention, m.DefaultLease, m.Shards = o.Clock, o.Retention, o.ReleaseRetention, o.DefaultLease, o.Shards
		})
		return idemtest.Subject{Store: plainErrors{s}}
	})
}
