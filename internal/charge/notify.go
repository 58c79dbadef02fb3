package charge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Notification is the provider's own, verified word on a charge's outcome. It
// is a signed webhook event, delivered at least once.
type Notification struct {
	// Provider names the sender ("stripe"). EventID is its id for the event,
	// the same for every delivery.
	Provider, EventID string
	// Command is the command the charge was sent for
	// (provider.ChargeRequest.Command). It is zero when the event is about
	// nothing of ours.
	Command idem.Key
	// Reference is the provider reference the charge was sent under.
	Reference string
	// Row is the id of the command's row in the charges table, as the
	// provider carried it. It is empty for a command sent before rows were
	// carried.
	Row string
	// Result is the charge's outcome: StatusCharged or StatusDeclined. Any
	// other status settles nothing.
	Result provider.Result
}

// Key is the key that deduplicates n's event: "acme#provider-event#stripe:evt_…".
// Its tenant is the command's, so the Region serving that tenant claims it.
func (n Notification) Key() (idem.Key, error) {
	return idem.NewKey(n.Command.Tenant(), NotificationOperation, n.Provider+":"+n.EventID)
}

// settles reports whether n can settle a command at all. The command must be
// of an operation the service runs. The status must be that operation's: a
// charge's is never a refund's.
func (s *Service) settles(n Notification) bool {
	op, ours := s.ops[n.Command.Operation()]
	if !ours {
		return false
	}
	switch n.Result.Status {
	case op.done(), provider.StatusDeclined:
		return true
	case provider.StatusAuthorized, provider.StatusCanceled:
		// An authorization made, or ended: a charge's word alone.
		return n.Command.Operation() == ChargeOperation
	}
	return false
}

// Notify settles the command a provider's notification names, once per event
// id. A charge is recorded as soon as the provider says what happened,
// whoever answered it. The table in docs/contract.md says what each delivery
// does.
func (s *Service) Notify(ctx context.Context, n Notification) (Result, error) {
	if !s.settles(n) {
		return Result{Outcome: OutcomeNothingToDo}, nil
	}
	dedup, err := n.Key()
	if err != nil {
		return Result{Outcome: OutcomeNothingToDo}, nil // not an id the provider sends
	}
	a := s.admit(ctx, n.Command.Tenant())
	switch {
	case a.refused != nil && a.refused.Outcome == OutcomeWrongRegion:
		return s.settledThere(ctx, dedup, *a.refused)
	case a.refused != nil:
		return *a.refused, nil
	case !a.Unreplicated.IsZero():
		// The event may concern writes not replicated here: delivered
		// again once they have.
		a.cancel()
		return Result{Outcome: OutcomeFailoverPending, RetryAt: s.cfg.Store.Now().Add(failoverRetry)}, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	lease, res, err := s.claimEvent(ctx, dedup, notified(ctx, n))
	if lease == nil {
		return res, err
	}
	outcome, err := s.settleNotified(ctx, n)
	if err != nil {
		// Released for the redelivery, which settles the command again from
		// the start. Settling twice changes nothing. A store busy for now,
		// with the event released, is busy. Anything else after the claim
		// is pending, never 500: another settler took the command
		// (ErrLeaseLost), or the event's record stays. So is a failure
		// once a preemption may have written (errPreempted).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueTimeout)
		defer cancel()
		rerr := s.cfg.Store.Release(rctx, lease)
		if rerr != nil {
			s.cfg.Logger.WarnContext(ctx, "notify: releasing the event failed", "error_class", ErrorClass(rerr))
		}
		if transient(err) && !errors.Is(err, errPreempted) && rerr == nil {
			return Result{Outcome: OutcomeBusy}, nil
		}
		s.cfg.Logger.WarnContext(ctx, "notify: settling the event failed; delivered again", "error_class", ErrorClass(err))
		return Result{Outcome: OutcomeAmbiguous, RetryAt: s.cfg.Store.Now()}, nil
	}
	if err := s.cfg.Store.Commit(ctx, lease, idem.Response{}); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		// The command is settled; only the event's record is not. A
		// redelivery finds the command settled.
		s.cfg.Logger.WarnContext(ctx, "notify: recording the event failed", "error_class", ErrorClass(err))
	}
	return Result{Outcome: outcome}, nil
}

// settledThere answers an event for a tenant another Region serves.
// Every Region's endpoint has the event, and the serving one settles it.
// This one acknowledges it once that Region's record of it has replicated
// here. Until then it answers wrong, and the provider keeps the event. So
// should this Region come to serve the tenant first, the event comes
// back to it.
func (s *Service) settledThere(ctx context.Context, key idem.Key, wrong Result) (Result, error) {
	rec, err := s.cfg.Store.Get(ctx, key)
	switch {
	case err == nil && rec.Status == idem.StatusSucceeded:
		return Result{Outcome: OutcomeReplayed, Replayed: true}, nil
	case err == nil || errors.Is(err, idem.ErrNotFound):
		return wrong, nil
	case transient(err):
		return Result{Outcome: OutcomeBusy}, nil
	}
	return Result{}, fmt.Errorf("charge: notify: %w", err)
}

// claimEvent claims the event's deduplication key. It returns a lease to
// process it, or the Result to answer without processing. An event whose
// processing died is taken over and processed again. in is the record's
// intent: who sent the event, and what it settles.
func (s *Service) claimEvent(ctx context.Context, key idem.Key, in []byte) (*idem.Lease, Result, error) {
	begun, err := s.cfg.Store.Begin(ctx, key, idem.FingerprintOf([]byte(key.ClientKey())), in)
	var inflight *idem.InFlightError
	switch {
	case errors.As(err, &inflight) && inflight.LeaseExpiresAt.Before(s.cfg.Store.Now()):
		lease, err := s.cfg.Store.TakeOver(ctx, key)
		switch {
		case errors.As(err, &inflight):
			return nil, Result{Outcome: OutcomeConflict, RetryAt: inflight.LeaseExpiresAt}, nil
		case errors.Is(err, idem.ErrCompleted):
			return nil, Result{Outcome: OutcomeReplayed, Replayed: true}, nil
		case err != nil:
			// A take-over whose answer was lost may have landed.
			return nil, Result{Outcome: OutcomeAmbiguous, RetryAt: s.cfg.Store.Now()}, nil
		}
		return lease, Result{}, nil
	case errors.As(err, &inflight):
		return nil, Result{Outcome: OutcomeConflict, RetryAt: inflight.LeaseExpiresAt}, nil
	case err != nil:
		return unclaimed(err)
	case begun.Replay != nil:
		return nil, Result{Outcome: OutcomeReplayed, Replayed: true}, nil
	}
	return begun.Lease, Result{}, nil
}

// releaseEvent resolves the record of an event whose delivery died (an
// idem.Resolver). Reconcile takes it over once its lease ran out, and
// releases it. It then leaves the stuck-lease index. The provider redelivers
// the event until it is answered 2xx. The redelivery claims it again and
// processes it from the start. Nothing is asked: the settlement is fenced, so
// settling twice changes nothing.
func releaseEvent(context.Context, *idem.Lease) (idem.Outcome, error) {
	return idem.NotApplied(idem.Response{}), nil
}

// reconcileEvent is Reconcile for an event's key. Its record, whose delivery
// died, is released, asking nothing.
func (s *Service) reconcileEvent(ctx context.Context, key idem.Key, _ admitted) (Outcome, error) {
	rec, err := idem.Recover(ctx, s.backend, key, releaseEvent)
	if out, done, err := untaken(rec, err); done {
		return out, err
	}
	if err != nil {
		return "", err
	}
	return OutcomeReleased, nil
}

// unclaimed answers an event whose key could not be claimed. A claim that
// may have landed is pending: a redelivery takes it over once its lease
// ends. A store failing for now is busy.
func unclaimed(err error) (*idem.Lease, Result, error) {
	if unknown, ok := errors.AsType[*idem.UnknownClaimError](err); ok {
		return nil, Result{Outcome: OutcomeAmbiguous, RetryAt: unknown.LeaseExpiresAt}, nil
	}
	if transient(err) {
		return nil, Result{Outcome: OutcomeBusy}, nil
	}
	return nil, Result{}, err
}

// settleNotified settles what n names. Its row, once written, takes the
// event: the row outlives the command's record. With no row yet, the
// command's record, IN_FLIGHT or released, is settled.
func (s *Service) settleNotified(ctx context.Context, n Notification) (Outcome, error) {
	op := s.ops[n.Command.Operation()]
	if n.Row != "" {
		if out, found, err := op.notified(ctx, n, n.Row); found || err != nil {
			return out, err
		}
	}
	rec, err := s.waitAttempt(ctx, n.Command)
	switch {
	case errors.Is(err, idem.ErrNotFound) || err == nil && op.reference(n.Command, rec.CreatedAt) != n.Reference:
		// No record of this command: past retention, or the key names a newer
		// intent.
		if n.Row != "" && n.Result.Status == op.done() {
			// Done at the provider, with no row and no record. An operator
			// must record it.
			s.cfg.Logger.ErrorContext(ctx, "notify: the provider reports a command done that has no row and no record",
				"key_hash", n.Command.LogHash(), "row", n.Row)
		}
		return OutcomeNothingToDo, nil
	case err != nil:
		return "", err
	case rec.Status == idem.StatusSucceeded:
		// Settled since its row was read, or named by an event without a row.
		return s.notifiedRow(ctx, op, n, rec)
	case rec.Status != idem.StatusInFlight && rec.Status != idem.StatusReleased:
		return OutcomeNothingToDo, nil
	case (n.Result.Status == provider.StatusAuthorized || n.Result.Status == provider.StatusCanceled) && !authorizeOnly(rec):
		// An authorization's word, on a charge captured at once. Its
		// capture's outcome, charged or declined, is the one that settles it.
		return OutcomeNothingToDo, nil
	}
	if rec.Status == idem.StatusReleased {
		// Released on evidence the provider now contradicts. The charge is
		// recorded, or no retry may ever learn of it. One past the dedup
		// window would charge again.
		s.cfg.Logger.WarnContext(ctx, "notify: the provider reports an outcome for a released command; recorded",
			"key_hash", n.Command.LogHash(), "charge_id", n.Result.ChargeID)
	}
	out, err := s.settleKnown(ctx, n.Command, rec.CreatedAt, n.Result)
	if err == nil && out == OutcomeNothingToDo {
		// Its own attempt may have settled it since the read. Then its row
		// takes the event.
		return s.notifiedRow(ctx, op, n, rec)
	}
	return out, err
}

// notifiedRow applies n to the row of the command rec records, if that row
// exists.
func (s *Service) notifiedRow(ctx context.Context, op operation, n Notification, rec *idem.Record) (Outcome, error) {
	row, err := op.row(rec)
	if err != nil {
		return "", err
	}
	out, found, err := op.notified(ctx, n, row)
	if err == nil && !found {
		return OutcomeNothingToDo, nil
	}
	return out, err
}

// settleKnown settles the command key names as res says. res is the
// provider's own word: a notification, or an operator reading its records.
// Whoever holds the lease is preempted. The outcome is a charge with its row,
// a decline, or for StatusNotFound a release. Only the command created at
// created is settled. One settled, gone or replaced by a new intent meanwhile
// is OutcomeNothingToDo.
func (s *Service) settleKnown(ctx context.Context, key idem.Key, created time.Time, res provider.Result) (Outcome, error) {
	op, err := s.op(key)
	if err != nil {
		return "", err
	}
	lease, err := s.cfg.Store.Preempt(ctx, key, created)
	var unknown *idem.UnknownClaimError
	switch {
	case errors.Is(err, idem.ErrNotFound) || errors.Is(err, idem.ErrCompleted):
		return OutcomeNothingToDo, nil
	case errors.As(err, &unknown):
		return "", s.preempted(ctx, key, unknown.LeaseExpiresAt, err)
	case err != nil:
		return "", err
	}
	out, err := s.settlePreempted(ctx, op, lease, res)
	if err != nil {
		return "", s.preempted(ctx, key, lease.ExpiresAt, err)
	}
	return out, nil
}

// settlePreempted settles the command lease preempted as res says.
func (s *Service) settlePreempted(ctx context.Context, op operation, lease *idem.Lease, res provider.Result) (Outcome, error) {
	if res.Status == provider.StatusNotFound {
		out, err := s.release(ctx, op, lease)
		if err != nil {
			return "", err
		}
		return s.complete(ctx, op, lease, out, nil)
	}
	out, err := op.verdict(ctx, lease, res)
	if err != nil {
		return "", err
	}
	return s.complete(ctx, op, lease, out, &res)
}

// errPreempted marks a failure once a preemption may have written. The
// command may be IN_FLIGHT under a lease nobody holds. Or it settled, and
// its Ledger claim did not. Nobody may answer that nothing was recorded.
var errPreempted = errors.New("charge: after a preemption's write")

// preempted queues key for the reconciler once the preempting lease ends
// at until. It settles the command, or its claim (idem.Recover). It
// returns err marked errPreempted.
func (s *Service) preempted(ctx context.Context, key idem.Key, until time.Time, err error) error {
	s.enqueue(ctx, key, until)
	return fmt.Errorf("%w: %w", errPreempted, err)
}

// waitAttempt reads the command's record. While it is IN_FLIGHT with an
// attempt that may still run, it reads again, for up to InflightWait. An
// attempt about to record its own outcome is then not preempted for nothing.
func (s *Service) waitAttempt(ctx context.Context, key idem.Key) (*idem.Record, error) {
	until := s.cfg.Store.Now().Add(s.cfg.InflightWait)
	for {
		rec, err := s.cfg.Store.Get(ctx, key)
		now := s.cfg.Store.Now()
		if err != nil || rec.Status != idem.StatusInFlight || !now.Before(rec.AttemptDeadline) || !now.Before(until) {
			return rec, err
		}
		t := time.NewTimer(min(notifyPause, until.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("charge: notify: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// notifyPause is how often waitAttempt reads the record again.
const notifyPause = 100 * time.Millisecond

// authorizeOnly reports whether rec is a charge to capture later.
func authorizeOnly(rec *idem.Record) bool {
	in, err := storedIntent[intent](rec.Intent)
	return err == nil && in.AuthorizeOnly
}
