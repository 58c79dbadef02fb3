package charge

import (
	"context"
	"errors"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"go.opentelemetry.io/otel/trace"
)

// Reconcile resolves a command whose first attempt may have died between
// charging and recording, however old it is, by asking the provider what
// became of its reference once its lease has run out (idem.Recover, with
// the provider lookup as the resolver): the table in the package
// documentation says what each answer leads to.
func (s *Service) Reconcile(ctx context.Context, key idem.Key) (Outcome, error) {
	r := &reconciling{Service: s}
	resolve := r.resolve
	if key.Operation() == NotificationOperation {
		resolve = releaseEvent
	} else if err := s.prepare(ctx); err != nil {
		// Before the take-over: the message is delivered again, and
		// the record stays as it was.
		return "", err
	}
	rec, err := idem.Recover(ctx, s.backend, key, resolve)
	switch {
	case rec.Lease == nil && err != nil:
		return "", err
	case rec.Lease == nil && rec.Status == idem.StatusInFlight:
		return OutcomeStillLeased, nil
	case rec.Lease == nil:
		return OutcomeNothingToDo, nil
	case err == nil && r.found != "":
		return r.found, nil
	}
	return s.settled(ctx, rec.Lease, rec.Status, r.charged, err)
}

// reconciling is one Reconcile's resolver, with what it found that the
// record's status will not say: why the command stays IN_FLIGHT, and the
// charge its outcome commits.
type reconciling struct {
	*Service
	found   Outcome
	charged *Charge
}

// resolve asks the provider what became of the charge of the command
// lease holds, taken over from its dead attempt (idem.Resolver).
func (r *reconciling) resolve(ctx context.Context, lease *idem.Lease) (idem.Outcome, error) {
	s, key := r.Service, lease.Key
	in, err := storedIntent(lease)
	if err != nil {
		return idem.Outcome{}, err
	}
	rp := s.replayer(lease, in)
	if rp != nil {
		// A replay is a send: the heartbeat moves the attempt deadline,
		// from which a later "not found" waits out the settle window.
		switch err := s.cfg.Store.Heartbeat(ctx, lease); {
		case errors.Is(err, idem.ErrLeaseLost):
			r.found = OutcomeStillLeased
			return idem.Outcome{}, nil
		case err != nil:
			return idem.Outcome{}, err
		}
	}
	tracing.Int(trace.SpanFromContext(ctx), tracing.AttrAttempts, lease.Attempts)
	res, err := s.lookup(ctx, lease, in, rp)
	if errors.Is(err, provider.ErrRejected) {
		// The replay was refused in a way that proves it cannot succeed
		// (provider.LookupRequest): nothing was or will be charged, and
		// a retry is answered provider-rejected once it asks again.
		s.cfg.Logger.WarnContext(ctx, "reconcile: the provider refused the replayed request; released",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err))
		return idem.NotApplied(idem.Response{}), nil
	}
	if err != nil {
		until := s.cfg.Clock().Add(s.backoff(lease.Attempts))
		s.cfg.Logger.WarnContext(ctx, "reconcile: provider lookup failed; postponed",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err), "attempts", lease.Attempts, "until", until)
		r.found = OutcomeDeferred
		return idem.Postponed(until), nil
	}
	if res.Status != provider.StatusNotFound {
		out, charged, err := s.verdict(lease, in, res)
		r.charged = charged
		return out, err
	}
	if settled := lease.AttemptDeadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Clock().Before(settled) {
		r.found = OutcomeNotSettled
		return idem.Postponed(settled), nil
	}
	if !s.deduplicated(lease) {
		s.cfg.Logger.ErrorContext(ctx, "reconcile: no charge found for a command older than the provider's dedup window; parked for an operator, not released",
			"key_hash", key.LogHash(), "created_at", lease.CreatedAt, "attempts", lease.Attempts)
		r.found = OutcomeParked
		return idem.Postponed(s.cfg.Clock().Add(s.cfg.RetryCap)), nil
	}
	return idem.NotApplied(idem.Response{}), nil
}

// settle completes a command taken over from its first attempt (by
// Notify, or an operator) as out says; charged is the charge out commits,
// if any.
func (s *Service) settle(ctx context.Context, lease *idem.Lease, out idem.Outcome, charged *Charge) (Outcome, error) {
	status, err := idem.Settle(ctx, s.backend, lease, out)
	return s.settled(ctx, lease, status, charged, err)
}

// settled names what became of a command whose settlement under lease
// left it in status, or failed with err: a charge row already there
// (charged, its own) is recorded by rowExists.
func (s *Service) settled(ctx context.Context, lease *idem.Lease, status idem.Status, charged *Charge, err error) (Outcome, error) {
	switch {
	case errors.Is(err, idem.ErrWriteCondition) && charged != nil:
		outcome, _, err := s.rowExists(ctx, lease, *charged)
		if outcome == OutcomeCreated {
			outcome = OutcomeResolved
		}
		return outcome, err
	case err != nil:
		return "", err
	case status == idem.StatusReleased:
		return OutcomeReleased, nil
	case status == idem.StatusSucceeded:
		return OutcomeResolved, nil
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
