package charge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Capturing and cancelling an authorization set a state; they append
// nothing. So they need no idempotency key and no record: the charge's row
// is the record. A conditional update moves it from StatusRequiresCapture
// to StatusCapturing (or StatusCanceling) with an attempt deadline, before
// the provider is asked. Only the request that made that move asks; any
// other waits for its outcome. One proven not made frees the row, and
// the other makes its own. A repeat of a settled one finds the state it
// set. The provider call carries a reference derived from the
// charge and the operation, so the provider deduplicates a re-sent one.
// A move left unsettled (a crash, a lost answer) is settled by reading
// the provider's state of the payment, never by a timer.

// transitionLease is how long a move's attempt may take before another
// request or the reconciler may settle it from the provider's state.
const transitionLease = 30 * time.Second

// pending is a move in flight, as its row holds it. waited: its deadline
// was moved past the provider's settle window, which is then not waited
// for again.
type pending struct {
	amount   int64
	deadline time.Time
	waited   bool
	// attempt names the move's attempt, unchanged when its deadline is
	// postponed: a revert is proven of it alone. Empty on rows moved
	// before attempts were named.
	attempt string
}

// move is a state-setting operation: from its start state, through its
// transitional one, to its end.
type move struct {
	name, via, to string
	// done answers the move made, now or before.
	done Outcome
	call func(Provider, context.Context, provider.PaymentRequest) (provider.Result, error)
}

var (
	captureMove = move{"capture", StatusCapturing, StatusSucceeded, OutcomeCaptured, Provider.Capture}
	cancelMove  = move{"cancel", StatusCanceling, StatusCanceled, OutcomeCanceled, Provider.Cancel}
)

// ErrAmountAboveAuthorized: a capture asked for more than the
// authorization holds.
var ErrAmountAboveAuthorized = &InvalidError{"amount", "more than the authorized amount"}

// Capture captures amount (zero: all) of tenant's authorized charge id.
// A repeat of a settled capture with the same amount or none answers the
// charge; one while it runs waits for it, up to InflightWait.
func (s *Service) Capture(ctx context.Context, tenant, id string, amount int64) (Result, error) {
	return s.transit(ctx, tenant, id, captureMove, amount)
}

// Cancel cancels tenant's authorized charge id, releasing the hold. A
// repeat answers the canceled charge.
func (s *Service) Cancel(ctx context.Context, tenant, id string) (Result, error) {
	return s.transit(ctx, tenant, id, cancelMove, 0)
}

// transit runs m on tenant's charge id.
func (s *Service) transit(ctx context.Context, tenant, id string, m move, amount int64) (Result, error) {
	if !IsChargeID(id) {
		return Result{Outcome: OutcomeNotFound, Idle: true}, nil
	}
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	// The wait is real time, as idem.Do's: a test's frozen clock must not
	// make it endless.
	until := s.providerEnd(ctx, time.Now().Add(s.cfg.InflightWait))
	asked := false // the provider's state, once per request: asking again would spin
	// A request that waits for a move in flight gives its cost back. It
	// takes it again only as it asks the provider itself: it holds the move,
	// or settles it. One that only found its answer is idle.
	w := waiterOf(ctx)
	// mine is this request's move, begun unanswered: it may have landed.
	var mine *Charge
	looked := false // refused a wait, the row read once more
	for {
		c, found, err := s.cfg.Rows.Get(ctx, tenant, id)
		switch {
		case mine != nil && err != nil:
			// Only a read could tell whether it landed.
			return s.moveUnknown(ctx, *mine, m, err), nil
		case mine != nil && c.Status == m.via && c.transition.attempt == mine.transition.attempt:
			// This request's own move, its answer lost: it is not awaited.
			w.work()
			return s.send(ctx, c, m)
		}
		mine = nil // the row does not hold it
		if res, done, err := unread(found, err); done {
			return a.missing(res, s.cfg.Store.Now()), err
		}
		now := s.cfg.Store.Now()
		if res := a.unreplicated(c.CreatedAt, now); res != nil {
			return *res, nil
		}
		switch {
		case c.Status == m.to && (amount == 0 || amount == c.Money.Amount):
			return Result{Outcome: m.done, Charge: &c, Idle: !w.worked}, nil
		case c.Status == StatusCapturing || c.Status == StatusCanceling:
			// A move in flight is awaited. Made, it is this request's
			// answer. Proven not made, the row is back in
			// StatusRequiresCapture, and this request makes its own.
			if !now.Before(c.transition.deadline) && !asked {
				// Its attempt's time is up: settled from the provider's
				// state, then read again. A provider that cannot say
				// leaves it unknown for now. A refused wait settles it
				// too, as one that ran out would.
				asked = true
				w.work()
				switch out, err := s.settleMove(ctx, c); {
				case out == OutcomeDeferred || transient(err):
					return Result{Outcome: OutcomeAmbiguous, RetryAt: now.Add(time.Second)}, nil
				case err != nil:
					return Result{}, err
				}
				continue
			}
			if looked {
				return Result{Outcome: OutcomeConflict, RetryAt: c.transition.deadline, Idle: !w.worked}, nil
			}
			if left := time.Until(until); left > 0 {
				if !w.wait(transitionKey(c), left) {
					// A wait refused answers as one that ran out: by one
					// more read. The move may have ended meanwhile.
					looked = true
					continue
				}
				if err := pause(ctx, min(notifyPause, left)); err != nil {
					return Result{}, err
				}
				continue
			}
			return Result{Outcome: OutcomeConflict, RetryAt: c.transition.deadline, Idle: !w.worked}, nil
		case c.Status != StatusRequiresCapture:
			return Result{Outcome: OutcomeStateConflict, Charge: &c, Idle: !w.worked}, nil
		case amount > c.Money.Amount:
			return Result{Outcome: OutcomeInvalid, Charge: &c}, ErrAmountAboveAuthorized
		}
		// amount stays as the request named it: none matches a capture
		// another request makes first.
		want := amount
		if want == 0 {
			want = c.Money.Amount
		}
		if err := s.prepare(ctx); err != nil {
			return Result{}, err // before the move: nothing written
		}
		moved := c
		moved.Status, moved.transition = m.via, pending{amount: want, deadline: now.Add(transitionLease), attempt: rand.Text()}
		err = s.cfg.Rows.beginMove(ctx, c, m, moved.transition)
		if errors.Is(err, errMoveUnknown) {
			mine = &moved
		}
		switch {
		case errors.Is(err, errMoved):
			continue // moved first by another request, or by this one
		case mine != nil:
			return s.moveUnknown(ctx, moved, m, err), nil
		case transient(err):
			return Result{Outcome: OutcomeBusy}, nil
		case err != nil:
			return Result{}, err
		}
		// Only now does this request hold the move: a twin that lost it waits.
		w.work()
		return s.send(ctx, moved, m)
	}
}

// moveUnknown answers c's move, begun by this request, that may have
// landed with nothing sent. The provider's state settles it.
func (s *Service) moveUnknown(ctx context.Context, c Charge, m move, cause error) Result {
	s.cfg.Logger.WarnContext(ctx, "charge: "+m.name+" move unknown; queued for reconciliation", "charge_id", c.ID, "cause", ErrorClass(cause))
	s.enqueue(ctx, transitionKey(c), c.transition.deadline)
	return Result{Outcome: OutcomeAmbiguous, RetryAt: c.transition.deadline}
}

// send asks the provider to make c's move, begun by this request, and
// settles the row as it answers.
func (s *Service) send(ctx context.Context, c Charge, m move) (Result, error) {
	pctx, cancelCall := context.WithDeadline(ctx, s.providerEnd(ctx, c.transition.deadline.Add(-s.cfg.CommitReserve)))
	req := provider.PaymentRequest{Reference: TransitionReference(c.ID, m.name), Charge: c.ProviderChargeID, Amount: c.transition.amount}
	res, err := s.ask(pctx, "provider."+m.name, func(ctx context.Context) (provider.Result, error) { return m.call(s.cfg.Provider, ctx, req) })
	cancelCall()
	switch {
	case errors.Is(err, provider.ErrRejected):
		s.revert(ctx, c)
		return Result{Outcome: OutcomeRejected}, nil
	case errors.Is(err, provider.ErrUnavailable):
		s.revert(ctx, c)
		return Result{Outcome: OutcomeUnavailable}, nil
	case err != nil:
		// Due at the deadline: a move the provider made settles then. One
		// it did not make waits out the settle window (settleMove).
		s.cfg.Logger.WarnContext(ctx, "charge: "+m.name+" outcome unknown; queued for reconciliation", "charge_id", c.ID, "cause", ErrorClass(err))
		s.enqueue(ctx, transitionKey(c), c.transition.deadline)
		return Result{Outcome: OutcomeAmbiguous, RetryAt: c.transition.deadline}, nil
	}
	after, err := s.applyState(ctx, c, res)
	if err != nil {
		s.enqueue(ctx, transitionKey(c), c.transition.deadline)
		return Result{Outcome: OutcomeAmbiguous, RetryAt: c.transition.deadline}, nil
	}
	if after.Status != m.to {
		return Result{Outcome: OutcomeStateConflict, Charge: &after}, nil
	}
	return Result{Outcome: m.done, Charge: &after}, nil
}

// revert moves c back from its move, which the provider proved it did not
// make. If that fails the move stays, for the reconciler to settle from
// the provider's state.
func (s *Service) revert(ctx context.Context, c Charge) {
	if _, err := s.cfg.Rows.endMove(ctx, c, StatusRequiresCapture, 0); err != nil && !errors.Is(err, errMoved) {
		s.cfg.Logger.WarnContext(ctx, "charge: reverting a move failed; left for the reconciler", "charge_id", c.ID, "error_class", ErrorClass(err))
		s.enqueue(ctx, transitionKey(c), c.transition.deadline)
	}
}

// applyState settles c's move as the provider's state res says, and
// returns the charge as it now is.
func (s *Service) applyState(ctx context.Context, c Charge, res provider.Result) (Charge, error) {
	var to string
	switch res.Status {
	case provider.StatusCharged:
		to = StatusSucceeded
	case provider.StatusCanceled:
		to = StatusCanceled
	case provider.StatusAuthorized:
		to = StatusRequiresCapture
	default:
		return Charge{}, fmt.Errorf("charge: unexpected provider state %q", res.Status)
	}
	after, err := s.cfg.Rows.endMove(ctx, c, to, res.Amount)
	if errors.Is(err, errMoved) {
		// Settled meanwhile, by another request or the reconciler.
		after, _, err = s.cfg.Rows.Get(ctx, c.Tenant, c.ID)
	}
	return after, err
}

// settleMove settles a move whose attempt's time is up, from the
// provider's state of the payment. A payment still authorized is the
// move not made only once the provider's settle window has passed: a
// request in flight may still land before. Until then it waits, and so
// does the move.
func (s *Service) settleMove(ctx context.Context, c Charge) (Outcome, error) {
	if err := s.prepare(ctx); err != nil {
		return "", err
	}
	res, err := s.cfg.Provider.State(ctx, c.ProviderChargeID)
	if err != nil {
		return OutcomeDeferred, nil
	}
	if res.Status == provider.StatusAuthorized && !c.transition.waited {
		// Counted from the attempt's own deadline, once: a later visit
		// finds the window waited out.
		if windowEnd := c.transition.deadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Store.Now().Before(windowEnd) {
			return OutcomeNotSettled, s.cfg.Rows.postponeMove(ctx, c, windowEnd)
		}
	}
	if _, err := s.applyState(ctx, c, res); err != nil {
		return "", err
	}
	switch res.Status {
	case provider.StatusAuthorized:
		return OutcomeReleased, nil
	case provider.StatusCanceled:
		return OutcomeResolvedCanceled, nil
	}
	return OutcomeResolvedCaptured, nil
}

// reconcileMove is Reconcile for a key of TransitionOperation.
func (s *Service) reconcileMove(ctx context.Context, key idem.Key, a admitted) (Outcome, error) {
	c, found, err := s.cfg.Rows.Get(ctx, key.Tenant(), key.ClientKey())
	switch {
	case err != nil:
		return "", err
	case !found:
		return OutcomeNothingToDo, nil
	case a.unreplicated(c.CreatedAt, s.cfg.Store.Now()) != nil:
		return OutcomeFailoverPending, nil
	case c.Status != StatusCapturing && c.Status != StatusCanceling:
		return OutcomeNothingToDo, nil
	case s.cfg.Store.Now().Before(c.transition.deadline):
		return OutcomeStillLeased, nil
	}
	return s.settleMove(ctx, c)
}

// transitionKey is the reconciler's key for c's move.
func transitionKey(c Charge) idem.Key {
	k, _ := idem.NewKey(c.Tenant, TransitionOperation, c.ID) // the row's tenant and id are valid
	return k
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("charge: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}
