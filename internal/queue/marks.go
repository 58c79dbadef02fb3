package queue

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net"
	"sync"
	"time"

	"github.com/aws/smithy-go"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Marker keeps, on the record a key names, a mark of the reconcile message
// in flight for it. A Sender marks before it sends. It sends nothing for a
// key already marked, however often the sweeper finds it stuck. Each
// delivery of the message renews the mark; its handler removes it.
// *dynamostore.Store marks idempotency records; charge.QueuedMoves marks
// a charge's row for its move.
type Marker interface {
	// MarkQueued marks key until until, unless a live mark stands or
	// the record needs no message; it reports whether it marked.
	MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error)
	// RenewQueued keeps the mark until until live for hold more.
	RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error
	// UnmarkQueued removes the mark until until, if it is still there.
	UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error
}

var _ Marker = (*dynamostore.Store)(nil)

// MarkHold is how long a mark outlives its message's delivery delay, and
// how long each delivery renews it: a failed delivery comes back after
// VisibilityTimeout, and its handler has ReconcileTimeout more. So a
// message keeps its mark through every redelivery. A mark with no message
// (lost, or its send failed) ends MarkHold after it was due.
const MarkHold = VisibilityTimeout + ReconcileTimeout

// ByOperation is one Marker over several: a key's operation picks its
// own, any other key goes to other.
func ByOperation(byOperation map[string]Marker, other Marker) Marker {
	return byOp{maps.Clone(byOperation), other}
}

type byOp struct {
	m     map[string]Marker
	other Marker
}

func (b byOp) of(key idem.Key) Marker {
	if m, ok := b.m[key.Operation()]; ok {
		return m
	}
	return b.other
}

func (b byOp) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	return b.of(key).MarkQueued(ctx, key, until)
}

func (b byOp) RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error {
	return b.of(key).RenewQueued(ctx, key, until, hold)
}

func (b byOp) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	return b.of(key).UnmarkQueued(ctx, key, until)
}

// mark marks key for a message delivered after delay, and returns the
// message to send; false: send none. A mark not written sends none
// either, and is the error. An unmarked message might copy one in
// flight, and the sweeper finds the key once it is stuck. The mark takes
// at most half the time ctx has left: the send has the rest.
func (s *Sender) mark(ctx context.Context, key idem.Key, delay time.Duration) (Message, bool, error) {
	m := Message{Key: key}
	if s.opt.Marks == nil {
		return m, true, nil
	}
	mctx, cancel := half(ctx)
	defer cancel()
	until := s.opt.Clock().Add(delay + MarkHold)
	marked, err := s.opt.Marks.MarkQueued(mctx, key, until)
	if err != nil || !marked {
		return m, false, err
	}
	m.QueuedUntil = until
	return m, true, nil
}

// markAll marks keys for messages delivered at once, all together. It
// returns the messages to send, the keys whose marks failed, and the
// first error.
func (s *Sender) markAll(ctx context.Context, keys []idem.Key) ([]Message, []idem.Key, error) {
	send := make([]bool, len(keys))
	msgs := make([]Message, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { msgs[i], send[i], errs[i] = s.mark(ctx, k, 0) })
	}
	wg.Wait()
	var (
		out    []Message
		failed []idem.Key
		first  error
	)
	for i, m := range msgs {
		switch {
		case send[i]:
			out = append(out, m)
		case errs[i] != nil:
			failed = append(failed, m.Key)
			first = cmp.Or(first, errs[i])
		}
	}
	return out, failed, first
}

// unsent reports whether err proves SQS took no message: no connection
// was made, or SQS refused the call. Any other failure may follow a send:
// its mark stays, and ends on its own (MarkHold).
func unsent(err error) bool {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	api, ok := errors.AsType[smithy.APIError](err)
	return ok && api.ErrorFault() == smithy.FaultClient
}

// keysOf is the keys of msgs.
func keysOf(msgs []Message) []idem.Key {
	keys := make([]idem.Key, len(msgs))
	for i, m := range msgs {
		keys[i] = m.Key
	}
	return keys
}

// unmark removes m's mark, if it has one, after its send failed: the
// sweeper may then queue its key at once.
func (s *Sender) unmark(ctx context.Context, m Message) {
	if m.QueuedUntil.IsZero() {
		return
	}
	if err := s.opt.Marks.UnmarkQueued(ctx, m.Key, m.QueuedUntil); err != nil {
		s.opt.Logger.WarnContext(ctx, "queue: a mark of an unsent message stays until it ends",
			"key_hash", m.Key.LogHash(), "until", m.QueuedUntil, "error", err.Error())
	}
}

// half is ctx with at most half the time it has left; ctx itself, if it
// has no deadline.
func half(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline.Add(-time.Until(deadline)/2))
}
