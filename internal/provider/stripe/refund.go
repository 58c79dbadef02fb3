package stripe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// refundPage is how many refunds a lookup reads a page: Stripe's most.
const refundPage = 100

var (
	errNotPaymentIntent = errors.New("charge is not a PaymentIntent id (pi_...)")
	// paymentIntentPattern is a PaymentIntent id, the ChargeID Charge
	// answers.
	paymentIntentPattern = regexp.MustCompile(`^pi_[A-Za-z0-9]{1,255}$`)
)

// refunds is the part of stripe-go's Refund service the adapter uses.
type refunds interface {
	Create(ctx context.Context, params *stripego.RefundCreateParams) (*stripego.Refund, error)
	List(ctx context.Context, params *stripego.RefundListParams) stripego.Seq2[*stripego.Refund, error]
}

// Refund creates a Refund of req.Amount of the PaymentIntent req.Charge,
// with req.Reference as its idempotency key. The Result has
// StatusRefunded and the refund's id (re_…), or StatusDeclined for a
// refund that failed. Errors wrap provider.ErrUnavailable, ErrAmbiguous or
// ErrRejected, read as Charge reads them.
func (a *Adapter) Refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	res, kind, cause := a.refund(ctx, req)
	return a.finish(ctx, "refund", req.Reference, res, kind, cause)
}

func (a *Adapter) refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error, error) {
	if err := validateRefund(req); err != nil {
		return provider.Result{}, provider.ErrRejected, err
	}
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return provider.Result{}, provider.ErrUnavailable, err
	}
	params := &stripego.RefundCreateParams{
		PaymentIntent: stripego.String(req.Charge),
		Amount:        stripego.Int64(req.Amount),
		Metadata:      map[string]string{MetadataReference: req.Reference},
	}
	addMetadata(params.Metadata, req.Command, req.Row)
	params.SetIdempotencyKey(req.Reference)
	// As create's: the trace follows the transport's own re-sends.
	ctx, sent := provider.TraceSend(ctx)
	rf, err := a.refunds.Create(ctx, params)
	if err != nil {
		kind, cause := classify(err, sent)
		return provider.Result{}, kind, cause
	}
	res, ok := refundOutcome(rf)
	if !ok {
		return provider.Result{}, provider.ErrAmbiguous, fmt.Errorf("%w: %s is %s", errNotSettled, rf.ID, rf.Status)
	}
	res.Reference = req.Reference
	return res, nil, nil
}

// LookupRefund lists the refunds of the PaymentIntent req.Charge and
// answers the one that carries req.Reference: the best of them, should a
// reference re-sent after its key expired have made several. A miss is
// StatusNotFound, trustworthy only after SettleWindow. Every error wraps
// provider.ErrUnavailable.
func (a *Adapter) LookupRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	res, err := a.findRefund(ctx, req)
	return a.lookupDone(ctx, "lookup_refund", req.Reference, res, err)
}

func (a *Adapter) findRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error) {
	switch {
	case !referencePattern.MatchString(req.Reference):
		return provider.Result{}, errBadReference
	case !paymentIntentPattern.MatchString(req.Charge):
		return provider.Result{}, errNotPaymentIntent
	}
	params := &stripego.RefundListParams{PaymentIntent: stripego.String(req.Charge)}
	params.Limit = stripego.Int64(refundPage)
	var best *stripego.Refund
	for rf, err := range a.refunds.List(ctx, params) {
		if err != nil {
			return provider.Result{}, causeOf(err)
		}
		if rf.Metadata[MetadataReference] == req.Reference && (best == nil || betterRefund(rf, best)) {
			best = rf
		}
	}
	if best == nil {
		return provider.Result{Status: provider.StatusNotFound}, nil
	}
	if res, ok := refundOutcome(best); ok {
		return res, nil
	}
	return provider.Result{}, fmt.Errorf("%w: %s is %s", errNotSettled, best.ID, best.Status)
}

// betterRefund reports whether rf is a better answer for a reference than
// best: one that refunds wins, then the newer.
func betterRefund(rf, best *stripego.Refund) bool {
	res, _ := refundOutcome(rf)
	bestRes, _ := refundOutcome(best)
	if ok, bestOK := res.Status == provider.StatusRefunded, bestRes.Status == provider.StatusRefunded; ok != bestOK {
		return ok
	}
	return rf.Created > best.Created
}

// refundOutcome answers a Refund's outcome, or false if it has none yet
// (requires_action, which card refunds never need). A pending refund
// counts as refunded: Stripe has taken it, it cannot be canceled, and its
// amount is no longer refundable. Should the issuer return it later, its
// status turns failed and a webhook says so.
func refundOutcome(rf *stripego.Refund) (provider.Result, bool) {
	switch rf.Status {
	case stripego.RefundStatusSucceeded, stripego.RefundStatusPending:
		return provider.Result{Status: provider.StatusRefunded, ChargeID: rf.ID}, true
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		return provider.Result{Status: provider.StatusDeclined, ChargeID: rf.ID, DeclineCode: cmp.Or(string(rf.FailureReason), string(rf.Status))}, true
	default:
		return provider.Result{}, false
	}
}

func validateRefund(req provider.RefundRequest) error {
	switch {
	case !referencePattern.MatchString(req.Reference):
		return errBadReference
	case !paymentIntentPattern.MatchString(req.Charge):
		return errNotPaymentIntent
	case req.Amount < 1:
		return errBadAmount
	case !currencyPattern.MatchString(req.Currency):
		return errBadCurrency
	}
	return nil
}
