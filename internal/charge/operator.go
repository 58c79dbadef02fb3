package charge

import (
	"context"
	"errors"
	"fmt"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// SettleByOperator settles the IN_FLIGHT command key names, as an operator
// found it in the provider's records. res.Status is what the provider did:
//   - StatusCharged for a charge, or StatusRefunded for a refund, with
//     ChargeID the provider's id for it;
//   - StatusDeclined, with its DeclineCode;
//   - StatusNotFound, which releases the key.
//
// It is the way out for a parked command (OutcomeParked), which nothing
// automatic settles. Its lease is postponed, so TakeOver refuses it. The
// provider no longer deduplicates its reference, so no retry may resend
// it.
//
// res.Reference must be the command's provider reference, the one the
// operator looked up. A record not IN_FLIGHT is left alone and returned as
// it is, with OutcomeNothingToDo. So is another intent under a reused key.
//
// Otherwise the lease is preempted (idem.Backend.Preempt), so whoever held
// it can no longer write. The command is settled as Reconcile settles it.
// That is the charge row and the API's 201 in one transaction, the 402, or
// RELEASED.
//
// In several Regions it settles only where MaySettle allows. Otherwise it
// returns MaySettle's Outcome and the record as it is, with nothing written.
//
// The record returned is the settled one, read back. It is nil for a
// release whose retention had run out: the key is free. An error leaves
// the command IN_FLIGHT, for the operator to settle again. One after the
// preemption's write queues its key for the reconciler too. Every step is
// fenced, so a second run settles it once.
func (s *Service) SettleByOperator(ctx context.Context, key idem.Key, res provider.Result) (Outcome, *idem.Record, error) {
	op, err := s.op(key)
	if err != nil {
		return "", nil, fmt.Errorf("charge: operator settle: %w", err)
	}
	// Checked before the preemption, so a bad call takes no lease.
	done := op.done()
	switch {
	case res.Status == done && res.ChargeID == "":
		return "", nil, errors.New("charge: operator settle: the provider's id for what it did is needed")
	case res.Status != done && res.Status != provider.StatusDeclined && res.Status != provider.StatusNotFound:
		return "", nil, fmt.Errorf("charge: operator settle: provider status %q settles no %s command: it is %s, declined or not found",
			res.Status, key.Operation(), done)
	}
	rec, err := s.cfg.Store.Get(ctx, key)
	if err != nil {
		return "", nil, fmt.Errorf("charge: operator settle: %w", err)
	}
	if rec.Status != idem.StatusInFlight || op.reference(key, rec.CreatedAt) != res.Reference {
		return OutcomeNothingToDo, rec, nil
	}
	a, refused := s.admitCommand(ctx, key, rec.CreatedAt)
	if refused != nil {
		return refused.Outcome, rec, nil
	}
	defer a.cancel()
	ctx = a.ctx
	outcome, err := s.settleKnown(ctx, key, rec.CreatedAt, res)
	if err != nil {
		return "", nil, fmt.Errorf("charge: operator settle: %w", err)
	}
	rec, err = s.cfg.Store.Get(ctx, key)
	switch {
	case errors.Is(err, idem.ErrNotFound) && outcome == OutcomeReleased:
		// A release keeps the retention counted from the command's
		// creation. For a parked command it has run out. The key is free,
		// and its next request is a new command.
		return outcome, nil, nil
	case err != nil:
		return outcome, nil, fmt.Errorf("charge: operator settle: read back: %w", err)
	}
	return outcome, rec, nil
}
