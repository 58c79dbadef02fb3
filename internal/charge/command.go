package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// steps are what a keyed command does under its key's lease. Its operation
// says the rest.
type steps struct {
	op operation
	// noun names the command in logs: "charge", "refund".
	noun string
	// hold writes what the command must hold before the provider is
	// asked (a refund's amount); nil if nothing. A refusal ends there.
	hold func(ctx context.Context, l *idem.Lease) (refusal, error)
	// send asks the provider to act.
	send func(ctx context.Context, l *idem.Lease) (provider.Result, error)
}

// refusal is a command refused before the provider was asked. why names
// it, and out is what its record keeps.
type refusal struct {
	why Outcome
	out idem.Outcome
}

// run is the path every keyed command takes. idem.Do claims the key, the
// provider is asked once, and the outcome is recorded. intent is what the
// record keeps for the reconciler.
func (s *Service) run(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent any, st steps) (Result, error) {
	in, _ := json.Marshal(intent) // a struct of strings and numbers
	var (
		said    *provider.Result // the provider's answer, if the outcome's writes fail
		refused Outcome          // why the provider did not act
	)
	w := waiterOf(ctx)
	res, err := idem.Do(ctx, s.backend, key, fp, in, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		// Having waited, this command took the key over: the holder released
		// it, or its record expired.
		w.work()
		if !s.deduplicated(l) {
			// A re-claim past the provider's dedup window. A request sent
			// now would act anew if the first one landed. So the provider
			// is asked, never sent to. Anything but an answer leaves the
			// command IN_FLIGHT for the reconciler, which parks it.
			s.cfg.Logger.WarnContext(ctx, st.noun+": reference past the provider's dedup window; looked up, not sent",
				"key_hash", l.Key.LogHash(), "created_at", l.CreatedAt)
			pres, err := st.op.lookup(ctx, l)
			if err != nil || pres.Status == provider.StatusNotFound {
				return idem.Unknown(idem.Response{}), err
			}
			said = &pres
			return st.op.verdict(ctx, l, pres)
		}
		if st.hold != nil {
			r, err := st.hold(ctx, l)
			switch {
			case err != nil:
				// The hold may have been placed. It is undone before the
				// release, and nothing was sent.
				refused = OutcomeBusy
				return s.release(ctx, st.op, l)
			case r.why != "":
				refused = r.why
				return r.out, nil
			}
		}
		pres, err := st.send(ctx, l)
		switch {
		case errors.Is(err, provider.ErrRejected):
			refused = OutcomeRejected
			s.cfg.Logger.ErrorContext(ctx, "provider rejected the "+st.noun+" request", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
			return s.release(ctx, st.op, l)
		case errors.Is(err, provider.ErrUnavailable):
			refused = OutcomeUnavailable
			return s.release(ctx, st.op, l)
		case err != nil:
			return idem.Unknown(idem.Response{}), err
		}
		said = &pres
		return st.op.verdict(ctx, l, pres)
	}, func(o *idem.DoOptions) {
		o.Wait, o.Reserve = s.cfg.InflightWait, s.recordReserve()
		o.OnWait = func(context.Context, idem.Key) bool { return w.wait(key, s.cfg.InflightWait) }
	})
	return s.result(ctx, key, st.op, w, res, said, refused, err)
}

// WaitHooks are what a request calls around a wait for another's work:
// its key's holder, or a capture or cancel in flight. A caller that counts
// the request's cost gives it back, then takes it again.
type WaitHooks struct {
	// OnWait is called once, as the request starts waiting at most wait
	// on what on names. It returns whether the request waits. If not, the
	// request answers at once what a wait that ran out would. worked: the
	// request did new work before, and keeps its count. Else it only
	// waits, for now.
	OnWait func(on idem.Key, wait time.Duration, worked bool) bool
	// OnWork is called once, if the request, having waited, does new work
	// after all. It took its key over, or makes or settles the move itself.
	OnWork func()
}

// waitHooksKey holds a request's WaitHooks in a context.
type waitHooksKey struct{}

// WithWaitHooks returns ctx carrying hooks for the requests served with it.
func WithWaitHooks(ctx context.Context, hooks WaitHooks) context.Context {
	return context.WithValue(ctx, waitHooksKey{}, hooks)
}

// waiter calls a request's WaitHooks, each once: OnWait as it first
// waits, OnWork as it then first works. worked: it did new work, waited or
// not. refused: OnWait refused the wait.
type waiter struct {
	hooks                   WaitHooks
	waited, worked, refused bool
}

// waiterOf returns a waiter for the hooks ctx carries, if any.
func waiterOf(ctx context.Context) *waiter {
	hooks, _ := ctx.Value(waitHooksKey{}).(WaitHooks)
	return &waiter{hooks: hooks}
}

// wait is called before each pause for another's work on what on names,
// which lasts at most budget in all. It reports whether to pause.
func (w *waiter) wait(on idem.Key, budget time.Duration) bool {
	if w.waited {
		return !w.refused
	}
	w.waited = true
	w.refused = w.hooks.OnWait != nil && !w.hooks.OnWait(on, budget, w.worked)
	return !w.refused
}

// work is called before each step of new work. Only the first after a
// wait calls OnWork.
func (w *waiter) work() {
	if w.worked {
		return
	}
	w.worked = true
	if w.waited && w.hooks.OnWork != nil {
		w.hooks.OnWork()
	}
}

// result names what became of a command run. refused says why the provider
// did not act. said is its answer, if the outcome's writes failed. A claim
// that may have landed, or a lease left IN_FLIGHT, is work the reconciler
// will finish: w counts it again.
func (s *Service) result(ctx context.Context, key idem.Key, op operation, w *waiter, res idem.Result, said *provider.Result, refused Outcome, err error) (Result, error) {
	if inflight, ok := errors.AsType[*idem.InFlightError](err); ok {
		return Result{Outcome: OutcomeConflict, RetryAt: inflight.LeaseExpiresAt, KeyExpiresAt: inflight.RecordExpiresAt, Idle: true}, nil
	}
	if mismatch, ok := errors.AsType[*idem.MismatchError](err); ok {
		return Result{Outcome: OutcomeMismatch, KeyExpiresAt: mismatch.RecordExpiresAt, Idle: true}, nil
	}
	if unknown, ok := errors.AsType[*idem.UnknownClaimError](err); ok {
		w.work()
		return s.unknownClaim(ctx, key, unknown)
	}
	// With a lease, nothing says another Region holds the command. Its
	// settlement may have landed before its claim's clear was refused.
	if res.Lease == nil {
		if elsewhere, ok := s.claimedElsewhere(ctx, key, err); ok {
			return elsewhere, nil
		}
	}
	switch {
	case res.Lease == nil && transient(err):
		// DynamoDB refused the claim unprocessed at every attempt. Nothing
		// is stored, and nothing reached the provider.
		return Result{Outcome: OutcomeBusy, Idle: true}, nil
	case res.Lease == nil && err != nil:
		return Result{}, err
	case res.Replayed:
		return Result{Outcome: OutcomeReplayed, Stored: &res.Response, Replayed: true, KeyExpiresAt: res.RecordExpiresAt, Idle: true}, nil
	case errors.Is(err, idem.ErrWriteCondition) && said != nil:
		outcome, resp, err := op.rewrite(ctx, res.Lease, *said)
		if err != nil {
			return s.ambiguous(ctx, res.Lease, err)
		}
		return Result{Outcome: outcome, Stored: &resp, KeyExpiresAt: res.Lease.RecordExpiresAt}, nil
	case err != nil || res.Status == idem.StatusInFlight:
		// An inherited lease, its fn not run, is the reconciler's work too.
		w.work()
		return s.ambiguous(ctx, res.Lease, err)
	case res.Status == idem.StatusReleased:
		return Result{Outcome: refused, KeyExpiresAt: res.RecordExpiresAt}, nil
	case res.Status == idem.StatusSucceeded:
		return Result{Outcome: OutcomeCreated, Stored: &res.Response, KeyExpiresAt: res.RecordExpiresAt}, nil
	case refused != "":
		return Result{Outcome: refused, Stored: &res.Response, KeyExpiresAt: res.RecordExpiresAt}, nil
	default:
		return Result{Outcome: OutcomeDeclined, Stored: &res.Response, KeyExpiresAt: res.RecordExpiresAt}, nil
	}
}

// release is the outcome of a command the provider proved not done. op
// first takes back what it wrote before asking. If that fails, the command
// stays IN_FLIGHT, to be released later.
func (s *Service) release(ctx context.Context, op operation, lease *idem.Lease) (idem.Outcome, error) {
	if err := op.undo(ctx, lease); err != nil {
		return idem.Unknown(idem.Response{}), err
	}
	return idem.NotApplied(idem.Response{}), nil
}

// ambiguous answers a command whose effect may have happened unrecorded.
// Its record stays IN_FLIGHT, queued for the reconciler once its lease has
// run out.
func (s *Service) ambiguous(ctx context.Context, lease *idem.Lease, cause error) (Result, error) {
	s.cfg.Logger.WarnContext(ctx, "charge outcome unknown; queued for reconciliation",
		"key_hash", lease.Key.LogHash(), "cause", ErrorClass(cause), "delay_ms", lease.ExpiresAt.Sub(s.cfg.Store.Now()).Milliseconds())
	s.enqueue(ctx, lease.Key, lease.ExpiresAt)
	outcome := OutcomeAmbiguous
	if errors.Is(cause, idem.ErrLeaseLost) {
		outcome = OutcomeLeaseLost
	}
	return Result{Outcome: outcome, RetryAt: lease.ExpiresAt, KeyExpiresAt: lease.RecordExpiresAt}, nil
}

// unknownClaim answers a claim that may have landed without its answer.
// The record may be IN_FLIGHT with the request. The reconciler may charge
// it once its lease has run out. So the client hears "pending", never
// "nothing was charged". The key is queued as for an ambiguous charge. If
// that fails too, the sweeper finds the lease.
func (s *Service) unknownClaim(ctx context.Context, key idem.Key, unknown *idem.UnknownClaimError) (Result, error) {
	s.cfg.Logger.WarnContext(ctx, "charge: claim outcome unknown; queued for reconciliation",
		"key_hash", key.LogHash(), "cause", ErrorClass(unknown))
	s.enqueue(ctx, key, unknown.LeaseExpiresAt)
	return Result{Outcome: OutcomeAmbiguous, RetryAt: unknown.LeaseExpiresAt, KeyExpiresAt: unknown.RecordExpiresAt}, nil
}

// enqueue queues key for the reconciler once its lease ends at until.
func (s *Service) enqueue(ctx context.Context, key idem.Key, until time.Time) {
	if s.cfg.Queue == nil {
		return
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueTimeout)
	defer cancel()
	if err := s.cfg.Queue.EnqueueReconcile(qctx, key, until.Sub(s.cfg.Store.Now())); err != nil {
		// The sweeper will find the lease once it expires.
		s.cfg.Logger.ErrorContext(ctx, "enqueue reconcile failed", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
	}
}

// prepare makes the provider ready, if it is a Preparer. It runs before a
// command is claimed or taken over.
func (s *Service) prepare(ctx context.Context) error {
	p, ok := s.cfg.Provider.(Preparer)
	if !ok {
		return nil
	}
	if err := p.Prepare(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrProviderNotReady, err)
	}
	return nil
}

// deduplicated reports whether the provider still deduplicates the
// reference of the command lease holds, with its margin
// (provider.Guarantees.Deduplicates). Every path that sends to the
// provider asks this first: Create, a re-claim, the reconciler.
func (s *Service) deduplicated(lease *idem.Lease) bool {
	return s.cfg.Provider.Guarantees().Deduplicates(lease.CreatedAt, s.cfg.Store.Now())
}

// ask makes one provider call, timed into the invocation's metrics. It is
// traced as the span name. Every call the service makes goes through it.
func (s *Service) ask(ctx context.Context, name string, call func(context.Context) (provider.Result, error)) (provider.Result, error) {
	ctx, span := s.cfg.Tracer.Start(ctx, name)
	defer since(ctx, metrics.ProviderLatency, time.Now())
	res, err := call(ctx)
	return endCall(span, res, err)
}

// endCall ends a provider call's span with the provider's status, or its
// failure's class.
func endCall(span trace.Span, res provider.Result, err error) (provider.Result, error) {
	defer span.End()
	if err != nil {
		tracing.Error(span, ErrorClass(err))
	} else {
		tracing.Outcome(span, string(res.Status))
	}
	return res, err
}

// storedIntent reads the intent Begin stored with a command.
func storedIntent[T any](stored []byte) (T, error) {
	var in T
	if err := json.Unmarshal(stored, &in); err != nil {
		return in, fmt.Errorf("charge: stored intent: %w", err)
	}
	return in, nil
}

// The end of a request's time that its store and provider calls leave. The
// reconcile message is sent in it, on its own time. Then the answer leaves
// before the function's deadline, so the gateway never answers for it.
const (
	enqueueTimeout = 750 * time.Millisecond
	answerReserve  = enqueueTimeout + 250*time.Millisecond
)

// answering is ctx less its last answerReserve, for one request's calls.
func answering(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, deadline.Add(-answerReserve))
	}
	return context.WithCancel(ctx)
}

// recordReserve is the part of an answering context's time the provider
// call may not use. Recording its outcome needs it.
func (s *Service) recordReserve() time.Duration {
	return max(s.cfg.CommitReserve-answerReserve, 0)
}

// providerEnd is when a provider call must stop. It is end, or the end of
// an answering ctx less recordReserve if sooner. A wait that may lead to a
// call stops then too, as idem.Do's wait for a key does.
func (s *Service) providerEnd(ctx context.Context, end time.Time) time.Time {
	if deadline, ok := ctx.Deadline(); ok && deadline.Add(-s.recordReserve()).Before(end) {
		return deadline.Add(-s.recordReserve())
	}
	return end
}
