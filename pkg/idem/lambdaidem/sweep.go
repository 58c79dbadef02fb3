package lambdaidem

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// DefaultSweepMargin is how long before its invocation's deadline Sweep
// stops, unless SweepOptions.Margin says otherwise.
const DefaultSweepMargin = 10 * time.Second

// SweepOptions configure Sweep. Zero fields take the defaults.
type SweepOptions struct {
	// Margin is how long before the invocation's deadline the sweep
	// stops, so the command being resolved can still be settled and the
	// summary logged. Default DefaultSweepMargin.
	Margin time.Duration
	// Logger receives one line per run with what it found, settled and
	// failed, never a key. Default slog.Default().
	Logger *slog.Logger
}

// Sweep wraps idem.Sweep as the handler of a scheduled Lambda: every run
// recovers each command whose lease ran out, as resolve says
// (idem.ByOperation for several operations). It returns the run's
// idem.Swept, and an error when a command could not be settled, so the
// function's Errors metric is what to alarm on. A run cut short by its
// margin is no failure: what it did not reach waits for the next run.
// pkg/idem's docs/recovery.md has the schedule, the IAM and the alarms.
func Sweep(b idem.Backend, resolve idem.Resolver, optFns ...func(*SweepOptions)) func(context.Context) (idem.Swept, error) {
	o := SweepOptions{Margin: DefaultSweepMargin}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return func(ctx context.Context) (idem.Swept, error) {
		run := ctx
		if deadline, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			run, cancel = context.WithDeadline(ctx, deadline.Add(-o.Margin))
			defer cancel()
		}
		swept, err := idem.Sweep(run, b, resolve)
		cut := run.Err() != nil && ctx.Err() == nil
		if cut {
			err = withoutDeadline(err)
		}
		o.Logger.InfoContext(ctx, "idem: sweep", "found", swept.Found, "settled", swept.Settled,
			"failed", swept.Failed, "unreadable", swept.Unreadable, "cut_short", cut)
		return swept, err
	}
}

// withoutDeadline is err without the errors of a context that ended:
// those of a run cut short at its margin, which the next run takes up.
func withoutDeadline(err error) error {
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var kept []error
	for _, e := range errs {
		if !errors.Is(e, context.DeadlineExceeded) {
			kept = append(kept, e)
		}
	}
	return errors.Join(kept...)
}
