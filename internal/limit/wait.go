package limit

import (
	"context"
	"errors"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MaxWaiters is how many requests may start waiting on one thing in flight
// in a window of WaitSpan, fleet-wide. So at most twice as many wait on it
// at once. A retry storm on one key then spends little of its tenant's
// concurrency.
const MaxWaiters = 2

// DefaultWaitSpan is the default Options.WaitSpan: INFLIGHT_WAIT's default.
const DefaultWaitSpan = 2 * time.Second

// Wait asks for one of the MaxWaiters waits on what on names: a hash of a
// scoped key, or of a charge's move. Granted, it gives tk's count back:
// the request does no new work while it waits. Its wait counts against
// the concurrency at once, fleet-wide. With keep, the request did new work
// before: it keeps its count, and only its wait counts. Refused, it gives
// nothing back yet: the request answers at once, and Done gives its count
// back as a replay's, with no share of its own. A failed or slow write
// refuses too. The write waits callTimeout at most. After a call of tk's
// timed out, the table is not asked: the wait is refused. Answering at
// once is honest and cheap, and the client retries.
func (l *Limiter) Wait(ctx context.Context, tk *Ticket, on string, wait time.Duration, keep bool) bool {
	if tk.hung {
		l.o.Logger.WarnContext(ctx, "the table timed out on this request; not waiting", "tenant", tk.tenant, "on", on)
		return false
	}
	now, _ := l.clock.instant()
	start := now.Truncate(l.o.WaitSpan)
	var granted bool
	hung, err := l.call(ctx, func(ctx context.Context) (err error) {
		granted, err = l.store.TakeWait(ctx, tk.tenant, on, start, l.o.WaitSpan, MaxWaiters)
		return err
	})
	tk.hung = hung
	if err != nil {
		l.o.Logger.WarnContext(ctx, "taking a wait failed; not waiting", "tenant", tk.tenant, "on", on, "error_class", errorClass(err), "error", err.Error())
	}
	if granted {
		l.await(ctx, tk, wait, !keep)
	}
	return granted
}

// errorClass names a failed write of the table for the logs.
func errorClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "deadline"
	case errors.Is(err, idem.ErrUnavailable):
		return "store_unavailable"
	default:
		return "internal"
	}
}
