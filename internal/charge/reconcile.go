package charge

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Reconcile resolves a command whose first attempt may have died
// unrecorded, however old it is. Once its lease has run out, it asks the
// provider what became of its reference. idem.Recover runs the operation's
// lookup as the resolver. The table in docs/contract.md says what each
// answer leads to.
func (s *Service) Reconcile(ctx context.Context, key idem.Key) (Outcome, error) {
	a := s.admit(ctx, key.Tenant())
	switch {
	case a.refused != nil && a.refused.Outcome == OutcomeBusy:
		return "", errFence
	case a.refused != nil:
		// The serving Region's sweeper finds the command.
		return OutcomeNothingToDo, nil
	}
	defer a.cancel()
	ctx = a.ctx
	if bypass, ok := bypasses[key.Operation()]; ok {
		return bypass(s, ctx, key, a)
	}
	op, err := s.op(key)
	if err != nil {
		return "", err
	}
	// Before the take-over: on failure the message is delivered again. The
	// record stays as it was.
	if err := s.prepare(ctx); err != nil {
		return "", err
	}
	r := &reconciling{Service: s, op: op}
	rec, err := idem.Recover(ctx, s.backend, key, r.resolve)
	if out, done, err := untaken(rec, err); done {
		return out, err
	}
	if err == nil && r.found != "" {
		return r.found, nil
	}
	return s.resolution(ctx, op, rec.Lease, rec.Status, r.said, err)
}

// untaken names what Recover found when it took no lease. done is false
// when it took one.
func untaken(rec idem.Result, err error) (out Outcome, done bool, _ error) {
	switch {
	case rec.Lease != nil:
		return "", false, nil
	case errors.Is(err, idem.ErrClaimedElsewhere):
		// Stranded: the Region that claimed it has not replicated.
		return OutcomeFailoverPending, true, nil
	case err != nil:
		return "", true, err
	case rec.Status == idem.StatusInFlight:
		return OutcomeStillLeased, true, nil
	}
	return OutcomeNothingToDo, true, nil
}

// reconciling is one Reconcile's resolver. It keeps what the record's
// status will not say. found is why the command stays IN_FLIGHT. said is
// the provider's answer its outcome commits.
type reconciling struct {
	*Service
	op    operation
	found Outcome
	said  *provider.Result
}

// resolve asks the provider what became of the command lease holds
// (idem.Resolver). The lease was taken over from a dead attempt.
func (r *reconciling) resolve(ctx context.Context, lease *idem.Lease) (idem.Outcome, error) {
	s, key := r.Service, lease.Key
	tracing.Int(trace.SpanFromContext(ctx), tracing.AttrAttempts, lease.Attempts)
	res, err := r.op.lookup(ctx, lease)
	switch {
	case errors.Is(err, errStillLeased):
		r.found = OutcomeStillLeased
		return idem.Outcome{}, nil
	case errors.Is(err, errStore):
		return idem.Outcome{}, err
	case errors.Is(err, provider.ErrRejected):
		// The replay was refused in a way that proves it cannot succeed
		// (provider.LookupRequest). Nothing was or will be done. A retry
		// is answered provider-rejected once it asks again.
		s.cfg.Logger.WarnContext(ctx, "reconcile: the provider refused the replayed request; released",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err))
		return s.release(ctx, r.op, lease)
	case err != nil:
		until := s.cfg.Store.Now().Add(s.backoff(lease.Attempts))
		s.cfg.Logger.WarnContext(ctx, "reconcile: provider lookup failed; postponed",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err), "attempts", lease.Attempts, "until", until)
		r.found = OutcomeDeferred
		return idem.Postponed(until), nil
	case res.Status != provider.StatusNotFound:
		r.said = &res
		return r.op.verdict(ctx, lease, res)
	}
	if windowEnd := lease.AttemptDeadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Store.Now().Before(windowEnd) {
		r.found = OutcomeNotSettled
		return idem.Postponed(windowEnd), nil
	}
	if !s.deduplicated(lease) {
		s.cfg.Logger.ErrorContext(ctx, "reconcile: the provider has nothing for a command older than its dedup window; parked for an operator, not released",
			"key_hash", key.LogHash(), "created_at", lease.CreatedAt, "attempts", lease.Attempts)
		r.found = OutcomeParked
		return idem.Postponed(s.cfg.Store.Now().Add(s.cfg.RetryCap)), nil
	}
	return s.release(ctx, r.op, lease)
}

// complete settles a command taken over from its first attempt, as out
// says. Notify and an operator take such commands. said is the provider's
// answer out commits, if any.
func (s *Service) complete(ctx context.Context, op operation, lease *idem.Lease, out idem.Outcome, said *provider.Result) (Outcome, error) {
	status, err := idem.Settle(ctx, s.backend, lease, out)
	return s.resolution(ctx, op, lease, status, said, err)
}

// resolution names what became of a command settled under lease. It is in
// status, or its settlement failed with err. Writes that failed their
// condition, for the provider's answer said, are settled by op.rewrite.
func (s *Service) resolution(ctx context.Context, op operation, lease *idem.Lease, status idem.Status, said *provider.Result, err error) (Outcome, error) {
	switch {
	case errors.Is(err, idem.ErrWriteCondition) && said != nil:
		outcome, _, err := op.rewrite(ctx, lease, *said)
		if outcome == OutcomeCreated {
			outcome = op.resolved()
		}
		return outcome, err
	case err != nil:
		return "", err
	case status == idem.StatusReleased:
		return OutcomeReleased, nil
	case status == idem.StatusSucceeded:
		return op.resolved(), nil
	default:
		return OutcomeResolvedDeclined, nil
	}
}

// backoff is how long a key waits after its n-th failed attempt.
func (s *Service) backoff(attempts int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempts && d < s.cfg.RetryCap; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryCap)
}
