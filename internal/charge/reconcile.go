package charge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// operation is one kind of command sent to the provider: creating a charge,
// refunding one. The shared paths reach it only through this: the
// reconciler, a notification, an operator's settlement. A new operation is
// its own file and a line in operations (service.go).
type operation interface {
	// reference is the provider reference of the command key names,
	// created at created.
	reference(key idem.Key, created time.Time) string
	// lookup asks the provider what became of the command lease holds.
	// It sends nothing that could act anew. errStillLeased: the lease
	// was lost while it asked.
	lookup(ctx context.Context, lease *idem.Lease) (provider.Result, error)
	// verdict is the command's outcome, given the provider's answer.
	verdict(ctx context.Context, lease *idem.Lease, res provider.Result) (idem.Outcome, error)
	// undo takes back what the command wrote before asking the provider,
	// before it is released: a refund's hold on its charge.
	undo(ctx context.Context, lease *idem.Lease) error
	// rewrite settles a command whose verdict's writes failed their
	// condition (idem.ErrWriteCondition).
	rewrite(ctx context.Context, lease *idem.Lease, res provider.Result) (Outcome, idem.Response, error)
	// done is the provider status that says it did the command
	// (StatusCharged, StatusRefunded), and resolved the outcome of a
	// command settled so by the reconciler, a notification or an operator.
	done() (provider.Status, Outcome)
	// row is the id of the row in the charges table that the command
	// rec records writes.
	row(rec *idem.Record) (string, error)
	// notified applies the provider's word n to the command's row, the
	// system of record, which outlives the command's record. found is
	// false unless row is the id of a row there under n's reference.
	notified(ctx context.Context, n Notification, row string) (out Outcome, found bool, err error)
}

// errStillLeased: another attempt took the lease while the command was
// looked up. errStore: a lookup's own write to the store failed; the
// message is delivered again, as for any failure of the table.
var (
	errStillLeased = errors.New("charge: lease taken while looking up")
	errStore       = errors.New("charge: the store failed while looking up")
	// errFence: the Region's fence could not be read; nothing was done.
	errFence = errors.New("charge: the Region's fence could not be read")
)

// op is the operation of the command key names, or an error for a key of
// no operation the service runs.
func (s *Service) op(key idem.Key) (operation, error) {
	if op, ok := s.ops[key.Operation()]; ok {
		return op, nil
	}
	return nil, fmt.Errorf("charge: no operation %q", key.Operation())
}

// Reconcile resolves a command whose first attempt may have died between
// the provider's effect and its record, however old it is. Once its lease
// has run out, it asks the provider what became of its reference
// (idem.Recover, with the operation's lookup as the resolver). The table in
// the package documentation says what each answer leads to.
func (s *Service) Reconcile(ctx context.Context, key idem.Key) (Outcome, error) {
	// A notification's record is the provider's, in every Region.
	a := admitted{Serving: Serving{Here: true}, ctx: ctx, cancel: func() {}}
	if key.Operation() != NotificationOperation {
		a = s.admit(ctx, key.Tenant())
	}
	switch {
	case a.refused != nil && a.refused.Outcome == OutcomeBusy:
		return "", errFence
	case a.refused != nil:
		// The serving Region's sweeper finds the command.
		return OutcomeNothingToDo, nil
	}
	defer a.cancel()
	ctx = a.ctx
	if key.Operation() == TransitionOperation {
		return s.reconcileMove(ctx, key, a)
	}
	var resolve idem.Resolver = releaseEvent
	r := &reconciling{Service: s}
	if key.Operation() != NotificationOperation {
		op, err := s.op(key)
		if err != nil {
			return "", err
		}
		// Before the take-over: on failure the message is delivered
		// again, and the record stays as it was.
		if err := s.prepare(ctx); err != nil {
			return "", err
		}
		r.op, resolve = op, r.resolve
	}
	rec, err := idem.Recover(ctx, s.backend, key, resolve)
	switch {
	case rec.Lease == nil && errors.Is(err, idem.ErrClaimedElsewhere):
		// Stranded: the Region that claimed it has not replicated.
		return OutcomeFailoverPending, nil
	case rec.Lease == nil && err != nil:
		return "", err
	case rec.Lease == nil && rec.Status == idem.StatusInFlight:
		return OutcomeStillLeased, nil
	case rec.Lease == nil:
		return OutcomeNothingToDo, nil
	case err == nil && r.found != "":
		return r.found, nil
	}
	return s.settled(ctx, r.op, rec.Lease, rec.Status, r.answer, err)
}

// reconciling is one Reconcile's resolver, with what it found that the
// record's status will not say: why the command stays IN_FLIGHT, and the
// provider's answer its outcome commits.
type reconciling struct {
	*Service
	op     operation
	found  Outcome
	answer *provider.Result
}

// resolve asks the provider what became of the command lease holds, taken
// over from its dead attempt (idem.Resolver).
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
		// (provider.LookupRequest): nothing was or will be done, and a
		// retry is answered provider-rejected once it asks again.
		s.cfg.Logger.WarnContext(ctx, "reconcile: the provider refused the replayed request; released",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err))
		return s.release(ctx, r.op, lease)
	case err != nil:
		until := s.cfg.Clock().Add(s.backoff(lease.Attempts))
		s.cfg.Logger.WarnContext(ctx, "reconcile: provider lookup failed; postponed",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err), "attempts", lease.Attempts, "until", until)
		r.found = OutcomeDeferred
		return idem.Postponed(until), nil
	case res.Status != provider.StatusNotFound:
		r.answer = &res
		return r.op.verdict(ctx, lease, res)
	}
	if settled := lease.AttemptDeadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Clock().Before(settled) {
		r.found = OutcomeNotSettled
		return idem.Postponed(settled), nil
	}
	if !s.deduplicated(lease) {
		s.cfg.Logger.ErrorContext(ctx, "reconcile: the provider has nothing for a command older than its dedup window; parked for an operator, not released",
			"key_hash", key.LogHash(), "created_at", lease.CreatedAt, "attempts", lease.Attempts)
		r.found = OutcomeParked
		return idem.Postponed(s.cfg.Clock().Add(s.cfg.RetryCap)), nil
	}
	return s.release(ctx, r.op, lease)
}

// release is the outcome of a command proven not done by the provider,
// once op has taken back what it wrote before asking. If that fails, the
// command stays IN_FLIGHT, to be released later.
func (s *Service) release(ctx context.Context, op operation, lease *idem.Lease) (idem.Outcome, error) {
	if err := op.undo(ctx, lease); err != nil {
		return idem.Unknown(idem.Response{}), err
	}
	return idem.NotApplied(idem.Response{}), nil
}

// settle completes a command taken over from its first attempt (by
// Notify, or an operator) as out says; answer is the provider's answer out
// commits, if any.
func (s *Service) settle(ctx context.Context, op operation, lease *idem.Lease, out idem.Outcome, answer *provider.Result) (Outcome, error) {
	status, err := idem.Settle(ctx, s.backend, lease, out)
	return s.settled(ctx, op, lease, status, answer, err)
}

// settled names what became of a command whose settlement under lease
// left it in status, or failed with err. Writes that failed their
// condition, for the provider's answer, are settled by op.rewrite.
func (s *Service) settled(ctx context.Context, op operation, lease *idem.Lease, status idem.Status, answer *provider.Result, err error) (Outcome, error) {
	switch {
	case errors.Is(err, idem.ErrWriteCondition) && answer != nil:
		outcome, _, err := op.rewrite(ctx, lease, *answer)
		if outcome == OutcomeCreated {
			_, outcome = op.done()
		}
		return outcome, err
	case err != nil:
		return "", err
	case status == idem.StatusReleased:
		return OutcomeReleased, nil
	case status == idem.StatusSucceeded:
		_, resolved := op.done()
		return resolved, nil
	default:
		return OutcomeResolvedDec, nil
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
