package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// RefundOperation scopes the idempotency keys of refunds: a key used to
// create a charge names another intent here.
const RefundOperation = "create-refund"

// The reasons a refund may give, as Stripe names them.
var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// RefundRequest is a validated request to refund a charge. Amount zero
// asks for all that remains.
type RefundRequest struct {
	Amount int64
	Reason string
}

// Refund is a completed refund, as stored and as returned by the API.
type Refund struct {
	ID                string
	ChargeID          string
	Tenant            string
	Money             Money
	Reason            string
	ProviderReference string
	ProviderRefundID  string
	IdempotencyKey    CommandID
	CreatedAt         time.Time
	// Status is StatusSucceeded, or RefundFailed for one the provider
	// made and then reported failed (its amount is the charge's again).
	Status string
}

// RefundFailed is the status of a refund the provider reported failed
// after it had succeeded.
const RefundFailed = "failed"

// RefundID is the id of the refund an intent creates, derived like
// ChargeID.
func RefundID(k idem.Key, created time.Time) string {
	return derive("re_", "refund-id", k, created, 24)
}

// IsRefundID reports whether id has the form RefundID gives.
func IsRefundID(id string) bool { return isDerived(id, "re_") }

// RefundReference is the provider reference of a refund intent, derived
// like ProviderReference but never equal to a charge's.
func RefundReference(k idem.Key, created time.Time) string {
	return derive("rf_", "refund-reference", k, created, 32)
}

// refundIntent is what a refund's record keeps for the reconciler.
type refundIntent struct {
	Charge         string `json:"charge"`
	ProviderCharge string `json:"provider_charge"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Reason         string `json:"reason,omitempty"`
}

// ParseRefundBody validates a refund request body, the JSON object of
// POST /charges/{id}/refunds (empty is {}), and returns the request and
// its fingerprint. null is refused: it is not an object. The fingerprint
// covers the charge id, so one key on
// two charges is two requests, and the amount as an integer.
func ParseRefundBody(chargeID string, body []byte) (RefundRequest, idem.Fingerprint, error) {
	if len(body) > MaxBodyBytes {
		return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonTooLarge}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonJSON}
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(canonical, &fields) != nil || fields == nil {
		return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape} // not an object
	}
	var req RefundRequest
	for name, value := range fields {
		switch name {
		case "amount":
			if c := value[0]; c != '-' && (c < '0' || c > '9') {
				return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape}
			}
			if req.Amount, err = ParseAmount(json.Number(value)); err != nil {
				return RefundRequest{}, idem.Fingerprint{}, err
			}
			if req.Amount < MinAmount || req.Amount > MaxAmount {
				return RefundRequest{}, idem.Fingerprint{}, &InvalidError{"amount", fmt.Sprintf("must be between %d and %d minor units", MinAmount, MaxAmount)}
			}
			fields[name] = json.RawMessage(strconv.FormatInt(req.Amount, 10))
		case "reason":
			if json.Unmarshal(value, &req.Reason) != nil {
				return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape}
			}
			if !refundReasons[req.Reason] {
				return RefundRequest{}, idem.Fingerprint{}, &InvalidError{"reason", "must be duplicate, fraudulent or requested_by_customer"}
			}
		default:
			return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape}
		}
	}
	fields["charge"], _ = json.Marshal(chargeID)
	b, _ := json.Marshal(fields) // raw values read from valid JSON
	canonical, err = idem.CanonicalJSON(b)
	if err != nil {
		return RefundRequest{}, idem.Fingerprint{}, fmt.Errorf("charge: re-canonicalize the refund body: %w", err)
	}
	return req, idem.FingerprintOf(canonical), nil
}

// reasonRefundShape is the *BodyError of a refund body of another shape.
const reasonRefundShape = "The body must be an object with an optional number amount and an optional string reason, and no other fields."

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
		return Result{Outcome: OutcomeNotFound}, nil
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
		return a.missing(res, s.cfg.Clock()), err
	}
	if res := a.unreplicated(c, s.cfg.Clock()); res != nil {
		return *res, nil
	}
	if c.Status != StatusSucceeded {
		return Result{Outcome: OutcomeStateConflict, Charge: &c}, nil
	}
	if err := s.prepare(ctx); err != nil {
		return Result{}, err
	}
	kept := refundIntent{Charge: c.ID, ProviderCharge: c.ProviderChargeID, Amount: req.Amount, Currency: c.Money.Currency, Reason: req.Reason}
	if all := kept.Amount == 0; all {
		// All that settled refunds leave, as an explicit amount would
		// be: refunds in flight hold part of it for now, not for good.
		kept.Amount = max(c.Money.Amount-c.AmountRefunded, 0)
	}
	in, _ := json.Marshal(kept)
	op := refunds{s}
	var (
		answer  *provider.Result
		refused Outcome
	)
	res, err := idem.Do(ctx, s.backend, key, fp, in, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		if !s.deduplicated(l) {
			// A re-claim past the provider's dedup window: asked, never
			// sent, as for a charge.
			pres, err := op.lookup(ctx, l)
			if err != nil || pres.Status == provider.StatusNotFound {
				return idem.Unknown(idem.Response{}), err
			}
			answer = &pres
			return op.verdict(ctx, l, pres)
		}
		rf := op.refund(l, kept, provider.Result{})
		var err error
		switch {
		case kept.Amount > 0:
			err = s.cfg.Rows.hold(ctx, c, rf.ID, kept.Amount, s.cfg.MaxRefunds)
		case c.AmountRefunded >= c.Money.Amount:
			// Nothing remains, and what settled refunds returned only
			// grows: final.
			err = errExceedsFinal
		default:
			err = errExceedsHeld
		}
		if errors.Is(err, errExceedsFinal) && req.Amount == 0 && kept.Amount > 0 {
			// A refund settled since the charge was read: what remains is
			// less, but something may remain. The retry reads it again.
			err = errExceedsHeld
		}
		switch {
		case errors.Is(err, errExceedsFinal):
			refused = OutcomeRefundExceeds
			return idem.Failed(s.cfg.Answers.RefundExceeds()), nil
		case errors.Is(err, errExceedsHeld):
			refused = OutcomeRefundHeld
			return idem.NotApplied(idem.Response{}), nil
		case errors.Is(err, errLimitFinal):
			refused = OutcomeRefundLimit
			return idem.Failed(s.cfg.Answers.RefundLimit()), nil
		case errors.Is(err, errLimitHeld):
			refused = OutcomeRefundLimitHeld
			return idem.NotApplied(idem.Response{}), nil
		case errors.Is(err, errNotRefundable):
			refused = OutcomeStateConflict
			return idem.NotApplied(idem.Response{}), nil
		case err != nil:
			// The hold may have been placed: it is freed before the
			// release, and nothing was sent.
			refused = OutcomeBusy
			return s.release(ctx, op, l)
		}
		pres, err := s.refund(ctx, refundRequest(l, kept))
		switch {
		case errors.Is(err, provider.ErrRejected):
			refused = OutcomeRejected
			s.cfg.Logger.ErrorContext(ctx, "provider rejected the refund request", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
			return s.release(ctx, op, l)
		case errors.Is(err, provider.ErrUnavailable):
			refused = OutcomeUnavailable
			return s.release(ctx, op, l)
		case err != nil:
			return idem.Unknown(idem.Response{}), err
		}
		answer = &pres
		return op.verdict(ctx, l, pres)
	}, func(o *idem.DoOptions) {
		o.Wait, o.Reserve = s.cfg.InflightWait, s.recordReserve()
	})
	out, err := s.answer(ctx, key, op, res, answer, refused, err)
	if out.Outcome == OutcomeStateConflict && err == nil {
		// The charge moved since it was read: the answer names its state now.
		if now, found, rerr := s.cfg.Rows.Get(ctx, c.Tenant, c.ID); rerr == nil && found {
			out.Charge = &now
		}
	}
	return out, err
}

// answer names what became of a command Do ran, for an operation whose
// outcomes are answered as a charge's: refused says why the provider did
// not act, answer is its answer if the outcome's writes failed.
func (s *Service) answer(ctx context.Context, key idem.Key, op operation, res idem.Result, answer *provider.Result, refused Outcome, err error) (Result, error) {
	if inflight, ok := errors.AsType[*idem.InFlightError](err); ok {
		return Result{Outcome: OutcomeConflict, RetryAt: inflight.LeaseExpiresAt, KeyExpiresAt: inflight.RecordExpiresAt}, nil
	}
	if mismatch, ok := errors.AsType[*idem.MismatchError](err); ok {
		return Result{Outcome: OutcomeMismatch, KeyExpiresAt: mismatch.RecordExpiresAt}, nil
	}
	if unknown, ok := errors.AsType[*idem.UnknownClaimError](err); ok {
		return s.unknownClaim(ctx, key, unknown)
	}
	if res, ok := s.claimedElsewhere(ctx, key, err); ok {
		return res, nil
	}
	switch {
	case res.Lease == nil && transient(err):
		// DynamoDB refused the claim unprocessed at every attempt: nothing
		// is stored and nothing reached the provider.
		return Result{Outcome: OutcomeBusy}, nil
	case res.Lease == nil && err != nil:
		return Result{}, err
	case res.Replayed:
		return Result{Outcome: OutcomeReplayed, Stored: &res.Response, Replayed: true, KeyExpiresAt: res.RecordExpiresAt}, nil
	case errors.Is(err, idem.ErrWriteCondition) && answer != nil:
		outcome, resp, err := op.rewrite(ctx, res.Lease, *answer)
		if err != nil {
			return s.ambiguous(ctx, res.Lease, err)
		}
		return Result{Outcome: outcome, Stored: &resp, KeyExpiresAt: res.Lease.RecordExpiresAt}, nil
	case err != nil || res.Status == idem.StatusInFlight:
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

// refund calls the provider, traced as provider.Refund.
func (s *Service) refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	return s.ask(ctx, "provider.Refund", func(ctx context.Context) (provider.Result, error) { return s.cfg.Provider.Refund(ctx, req) })
}

// GetRefund returns tenant's refund refundID of the charge chargeID.
func (s *Service) GetRefund(ctx context.Context, tenant, chargeID, refundID string) (Result, error) {
	if !IsChargeID(chargeID) || !IsRefundID(refundID) {
		return Result{Outcome: OutcomeNotFound}, nil
	}
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	rf, found, err := s.cfg.Rows.GetRefund(ctx, tenant, chargeID, refundID)
	if res, done, err := unread(found, err); done {
		return a.missing(res, s.cfg.Clock()), err
	}
	return Result{Outcome: OutcomeFound, Refund: &rf}, nil
}

// refunds is the operation of refunding a charge, as the shared paths see
// it.
type refunds struct{ *Service }

// refund is the refund the command lease holds makes, as the provider
// answered res.
func (refunds) refund(lease *idem.Lease, in refundIntent, res provider.Result) Refund {
	return Refund{
		ID: RefundID(lease.Key, lease.CreatedAt), ChargeID: in.Charge, Tenant: lease.Key.Tenant(),
		Money: Money{Amount: in.Amount, Currency: in.Currency}, Reason: in.Reason,
		ProviderReference: RefundReference(lease.Key, lease.CreatedAt), ProviderRefundID: res.ChargeID,
		IdempotencyKey: CommandID(lease.Key.ClientKey()), CreatedAt: lease.CreatedAt,
	}
}

func (refunds) reference(key idem.Key, created time.Time) string {
	return RefundReference(key, created)
}

// lookup asks the provider for the refund by its reference: nothing is
// sent that could refund.
func (r refunds) lookup(ctx context.Context, lease *idem.Lease) (provider.Result, error) {
	in, err := storedIntent[refundIntent](lease)
	if err != nil {
		return provider.Result{}, err
	}
	req := refundRequest(lease, in)
	return r.ask(ctx, "provider.LookupRefund", func(ctx context.Context) (provider.Result, error) { return r.cfg.Provider.LookupRefund(ctx, req) })
}

// verdict is a refund to commit with its row and its hold settled, or a
// refusal to store once its hold is freed.
func (r refunds) verdict(ctx context.Context, lease *idem.Lease, res provider.Result) (idem.Outcome, error) {
	in, err := storedIntent[refundIntent](lease)
	if err != nil {
		return idem.Outcome{}, err
	}
	switch res.Status {
	case provider.StatusRefunded:
		rf := r.refund(lease, in, res)
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

func (refunds) done() (provider.Status, Outcome) {
	return provider.StatusRefunded, OutcomeResolvedRefund
}

// undo frees the refund's hold.
func (r refunds) undo(ctx context.Context, lease *idem.Lease) error {
	in, err := storedIntent[refundIntent](lease)
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
	in, err := storedIntent[refundIntent](lease)
	if err != nil {
		return "", idem.Response{}, err
	}
	rf := r.refund(lease, in, res)
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

// refundRequest is the provider request of the refund lease holds, built
// in one place for its send and its lookup.
func refundRequest(lease *idem.Lease, in refundIntent) provider.RefundRequest {
	return provider.RefundRequest{
		Reference: RefundReference(lease.Key, lease.CreatedAt), Charge: in.ProviderCharge, Amount: in.Amount, Currency: in.Currency,
		Command: lease.Key.String(), Row: refundRowID(in.Charge, RefundID(lease.Key, lease.CreatedAt)),
	}
}

func (refunds) row(rec *idem.Record) (string, error) {
	var in refundIntent
	if err := json.Unmarshal(rec.Intent, &in); err != nil {
		return "", fmt.Errorf("charge: stored intent: %w", err)
	}
	return refundRowID(in.Charge, RefundID(rec.Key, rec.CreatedAt)), nil
}

// notified records a refund the provider reported failed after it had
// succeeded (a Stripe refund pending, then failed): its amount returns to
// the charge, and the refund reads failed. Its stored 201 stays: it was
// the answer then.
func (r refunds) notified(ctx context.Context, n Notification, row string) (Outcome, bool, error) {
	chargeID, refundID, _ := strings.Cut(row, "#")
	if !IsChargeID(chargeID) || !IsRefundID(refundID) {
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
	return OutcomeResolvedDec, true, nil
}
