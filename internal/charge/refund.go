package charge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/actor"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Refund refunds req of tenant's charge chargeID once for the intent key
// names: a key of RefundOperation. A charge that is unknown, another
// tenant's or not refundable is answered with nothing stored. The amount
// is held on the charge's row before the provider is asked, so concurrent
// refunds never exceed the charge. fp is ParseRefundBody's.
func (s *Service) Refund(ctx context.Context, key idem.Key, chargeID string, req RefundRequest, fp idem.Fingerprint) (Result, error) {
	if key.Operation() != RefundOperation {
		return Result{}, fmt.Errorf("charge: refund under a key of operation %q", key.Operation())
	}
	if !IsChargeID(chargeID) {
		return Result{Outcome: OutcomeNotFound, Idle: true}, nil
	}
	a := s.admit(ctx, key.Tenant())
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	c, found, err := s.cfg.Rows.Get(ctx, key.Tenant(), chargeID)
	if res, done, err := unread(found, err); done {
		return a.missing(res, s.cfg.Store.Now()), err
	}
	if res := a.unreplicated(c.CreatedAt, s.cfg.Store.Now()); res != nil {
		return *res, nil
	}
	if c.Status != StatusSucceeded {
		return Result{Outcome: OutcomeStateConflict, Charge: &c, Idle: true}, nil
	}
	if err := s.prepare(ctx); err != nil {
		return Result{}, err
	}
	kept := refundIntent{Charge: c.ID, ProviderCharge: c.ProviderChargeID, Amount: req.Amount, Currency: c.Money.Currency, Reason: req.Reason, By: claimant(ctx)}
	if all := kept.Amount == 0; all {
		// All that settled refunds leave, as an explicit amount would be.
		// Refunds in flight hold part of it for now, not for good.
		kept.Amount = max(c.Money.Amount-c.AmountRefunded, 0)
	}
	out, err := s.run(ctx, key, fp, kept, steps{op: refunds{s}, noun: "refund",
		hold: func(ctx context.Context, l *idem.Lease) (refusal, error) {
			return s.holdRefund(ctx, l, c, kept, req.Amount == 0)
		},
		send: func(ctx context.Context, l *idem.Lease) (provider.Result, error) {
			return s.refund(ctx, refundRequest(l, kept))
		},
	})
	if out.Outcome == OutcomeStateConflict && err == nil {
		// The charge moved since it was read: the answer names its state now.
		if now, found, rerr := s.cfg.Rows.Get(ctx, c.Tenant, c.ID); rerr == nil && found {
			out.Charge = &now
		}
	}
	return out, err
}

// refundIntent is what a refund's record keeps for the reconciler.
type refundIntent struct {
	Charge         string `json:"charge"`
	ProviderCharge string `json:"provider_charge"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Reason         string `json:"reason,omitempty"`
	// By is who asked, for the audit trail (actor.go).
	By *actor.Actor `json:"by,omitempty"`
}

// holdRefund holds kept's amount on the charge c, for the refund l holds.
// Otherwise it says why not, and what the key keeps. all: the request
// named no amount, so kept's is what settled refunds left when c was read.
func (s *Service) holdRefund(ctx context.Context, l *idem.Lease, c Charge, kept refundIntent, all bool) (refusal, error) {
	var err error
	switch {
	case kept.Amount > 0:
		err = s.cfg.Rows.hold(ctx, c, RefundID(l.Key, l.CreatedAt), kept.Amount, s.cfg.MaxRefunds)
	case c.AmountRefunded >= c.Money.Amount:
		// Nothing remains, and what settled refunds returned only
		// grows: final.
		err = errExceedsFinal
	default:
		err = errExceedsHeld
	}
	if errors.Is(err, errExceedsFinal) && all && kept.Amount > 0 {
		// A refund settled since the charge was read: what remains is
		// less, but something may remain. The retry reads it again.
		err = errExceedsHeld
	}
	switch {
	case errors.Is(err, errExceedsFinal):
		return refusal{OutcomeRefundExceeds, idem.Failed(s.cfg.Answers.RefundExceeds())}, nil
	case errors.Is(err, errExceedsHeld):
		return refusal{OutcomeRefundHeld, idem.NotApplied(idem.Response{})}, nil
	case errors.Is(err, errLimitFinal):
		return refusal{OutcomeRefundLimit, idem.Failed(s.cfg.Answers.RefundLimit())}, nil
	case errors.Is(err, errLimitHeld):
		return refusal{OutcomeRefundLimitHeld, idem.NotApplied(idem.Response{})}, nil
	case errors.Is(err, errNotRefundable):
		return refusal{OutcomeStateConflict, idem.NotApplied(idem.Response{})}, nil
	}
	return refusal{}, err
}

// refunds is the operation of refunding a charge, as the shared paths see
// it.
type refunds struct{ *Service }

func (refunds) reference(key idem.Key, created time.Time) string {
	return RefundReference(key, created)
}

// lookup asks the provider for the refund by its reference: nothing is
// sent that could refund.
func (r refunds) lookup(ctx context.Context, lease *idem.Lease) (provider.Result, error) {
	in, err := storedIntent[refundIntent](lease.Intent)
	if err != nil {
		return provider.Result{}, err
	}
	req := refundRequest(lease, in)
	return r.ask(ctx, "provider.LookupRefund", func(ctx context.Context) (provider.Result, error) { return r.cfg.Provider.LookupRefund(ctx, req) })
}

// verdict is a refund to commit with its row and its hold settled. A
// decline is a refusal to store, once its hold is freed.
func (r refunds) verdict(ctx context.Context, lease *idem.Lease, res provider.Result) (idem.Outcome, error) {
	in, err := storedIntent[refundIntent](lease.Intent)
	if err != nil {
		return idem.Outcome{}, err
	}
	switch res.Status {
	case provider.StatusRefunded:
		rf := r.made(lease, in, res)
		return idem.Succeeded(r.cfg.Answers.RefundCreated(rf), r.cfg.Rows.InsertRefund(rf), r.cfg.Rows.settleHold(rf, true)), nil
	case provider.StatusDeclined:
		if err := r.undo(ctx, lease); err != nil {
			return idem.Unknown(idem.Response{}), err
		}
		return idem.Failed(r.cfg.Answers.RefundDeclined(res.DeclineCode)), nil
	default:
		return idem.Outcome{}, fmt.Errorf("charge: unexpected provider status %q for a refund", res.Status)
	}
}

// undo frees the refund's hold.
func (r refunds) undo(ctx context.Context, lease *idem.Lease) error {
	in, err := storedIntent[refundIntent](lease.Intent)
	if err != nil {
		return err
	}
	return r.cfg.Rows.free(ctx, lease.Key.Tenant(), in.Charge, RefundID(lease.Key, lease.CreatedAt), in.Amount)
}

// rewrite settles a refund whose writes failed their condition. Its row
// already there, recorded by an earlier attempt, settles it with that
// row's answer. Otherwise its hold was freed while the provider refunded:
// the refund is recorded all the same, since the money moved, and logged
// for an operator.
func (r refunds) rewrite(ctx context.Context, lease *idem.Lease, res provider.Result) (Outcome, idem.Response, error) {
	in, err := storedIntent[refundIntent](lease.Intent)
	if err != nil {
		return "", idem.Response{}, err
	}
	rf := r.made(lease, in, res)
	row, found, err := r.cfg.Rows.GetRefund(ctx, rf.Tenant, rf.ChargeID, rf.ID)
	outcome, resp, writes := OutcomeCreated, r.cfg.Answers.RefundCreated(row), []types.TransactWriteItem(nil)
	switch {
	case err != nil:
		return "", idem.Response{}, err
	case found && row.ProviderRefundID == rf.ProviderRefundID && row.ProviderReference == rf.ProviderReference:
	case found:
		r.cfg.Logger.ErrorContext(ctx, "refund row conflicts with the provider's answer; stored as a permanent error",
			"key_hash", lease.Key.LogHash(), "refund_id", rf.ID)
		resp = r.cfg.Answers.Conflicting()
		return OutcomeChargeConflict, resp, r.backend.Fail(ctx, lease, resp)
	default:
		r.cfg.Logger.ErrorContext(ctx, "the provider refunded after the refund's hold was freed; recorded beyond the hold",
			"key_hash", lease.Key.LogHash(), "refund_id", rf.ID, "charge_id", rf.ChargeID)
		resp, writes = r.cfg.Answers.RefundCreated(rf), []types.TransactWriteItem{r.cfg.Rows.InsertRefund(rf), r.cfg.Rows.settleHold(rf, false)}
	}
	return outcome, resp, r.backend.Commit(ctx, lease, resp, writes...)
}

func (refunds) done() provider.Status { return provider.StatusRefunded }

func (refunds) resolved() Outcome { return OutcomeResolvedRefunded }

func (refunds) row(rec *idem.Record) (string, error) {
	in, err := storedIntent[refundIntent](rec.Intent)
	if err != nil {
		return "", err
	}
	return refundRowID(in.Charge, RefundID(rec.Key, rec.CreatedAt)), nil
}

// notified records a refund the provider reported failed after it had
// succeeded. A Stripe refund does so: pending, then failed. Its amount
// returns to the charge, and the refund reads failed. Its stored 201
// stays: it was the answer then.
func (r refunds) notified(ctx context.Context, n Notification, row string) (Outcome, bool, error) {
	chargeID, refundID, ok := parseRefundRowID(row)
	if !ok {
		return "", false, nil
	}
	rf, found, err := r.cfg.Rows.GetRefund(ctx, n.Command.Tenant(), chargeID, refundID)
	switch {
	case err != nil || !found || rf.ProviderReference != n.Reference:
		return "", false, err
	case n.Result.Status != provider.StatusDeclined || rf.Status != StatusSucceeded:
		return OutcomeNothingToDo, true, nil
	}
	r.cfg.Logger.WarnContext(ctx, "notify: a refund failed after it succeeded; its amount returns to the charge",
		"key_hash", n.Command.LogHash(), "refund_id", rf.ID, "charge_id", rf.ChargeID)
	if err := r.cfg.Rows.failRefund(ctx, rf); err != nil {
		return "", true, err
	}
	return OutcomeResolvedDeclined, true, nil
}

// made is the refund the command lease holds made, as the provider
// answered res.
func (refunds) made(lease *idem.Lease, in refundIntent, res provider.Result) Refund {
	return Refund{
		ID: RefundID(lease.Key, lease.CreatedAt), ChargeID: in.Charge, Tenant: lease.Key.Tenant(),
		Money: Money{Amount: in.Amount, Currency: in.Currency}, Reason: in.Reason,
		ProviderReference: RefundReference(lease.Key, lease.CreatedAt), ProviderRefundID: res.ChargeID,
		IdempotencyKey: CommandID(lease.Key.ClientKey()), CreatedAt: lease.CreatedAt,
	}
}

// refundRequest is the provider request of the refund lease holds, built
// in one place for its send and its lookup.
func refundRequest(lease *idem.Lease, in refundIntent) provider.RefundRequest {
	return provider.RefundRequest{
		Reference: RefundReference(lease.Key, lease.CreatedAt), Charge: in.ProviderCharge, Amount: in.Amount, Currency: in.Currency,
		Command: lease.Key.String(), Row: refundRowID(in.Charge, RefundID(lease.Key, lease.CreatedAt)),
	}
}

// refund calls the provider, traced as the span provider.Refund.
func (s *Service) refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	return s.ask(ctx, "provider.Refund", func(ctx context.Context) (provider.Result, error) { return s.cfg.Provider.Refund(ctx, req) })
}
