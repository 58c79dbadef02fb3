package stripe

import (
	"context"
	"errors"
	"fmt"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// Capture captures req.Amount (0: all that is held) of the PaymentIntent
// req.Charge, with req.Reference as its idempotency key. The Result has
// StatusCharged and the amount received, or StatusCanceled for an
// authorization canceled or expired: nothing captured. Errors wrap
// provider.ErrUnavailable, ErrAmbiguous or ErrRejected, read as Charge
// reads them.
func (a *Adapter) Capture(ctx context.Context, req provider.PaymentRequest) (provider.Result, error) {
	return a.payment(ctx, "capture", req, func(ctx context.Context) (*stripego.PaymentIntent, error) {
		params := &stripego.PaymentIntentCaptureParams{}
		if req.Amount > 0 {
			params.AmountToCapture = stripego.Int64(req.Amount)
		}
		params.SetIdempotencyKey(req.Reference)
		return a.intents.Capture(ctx, req.Charge, params)
	})
}

// Cancel cancels the PaymentIntent req.Charge, with req.Reference as its
// idempotency key; req.Amount is not sent. The Result has StatusCanceled,
// or StatusCharged with the amount received if it was captured: nothing
// canceled. Errors read as Capture's.
func (a *Adapter) Cancel(ctx context.Context, req provider.PaymentRequest) (provider.Result, error) {
	req.Amount = 0
	return a.payment(ctx, "cancel", req, func(ctx context.Context) (*stripego.PaymentIntent, error) {
		params := &stripego.PaymentIntentCancelParams{}
		params.SetIdempotencyKey(req.Reference)
		return a.intents.Cancel(ctx, req.Charge, params)
	})
}

// State reads the PaymentIntent charge: StatusAuthorized (the amount
// capturable), StatusCharged (the amount received), StatusCanceled,
// StatusDeclined, or StatusNotFound for an id Stripe does not know. The
// Result's Reference is the PaymentIntent's metadata's. Every error wraps
// provider.ErrUnavailable.
func (a *Adapter) State(ctx context.Context, charge string) (provider.Result, error) {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	res, err := a.state(ctx, charge)
	if err != nil {
		return a.finish(ctx, "state", charge, res, provider.ErrUnavailable, err)
	}
	return a.finish(ctx, "state", charge, res, nil, nil)
}

func (a *Adapter) state(ctx context.Context, charge string) (provider.Result, error) {
	if !paymentIntentPattern.MatchString(charge) {
		return provider.Result{}, errNotPaymentIntent
	}
	pi, err := a.intents.Retrieve(ctx, charge, nil)
	var se *stripego.Error
	switch {
	case errors.As(err, &se) && se.Code == stripego.ErrorCodeResourceMissing:
		return provider.Result{Status: provider.StatusNotFound}, nil
	case err != nil:
		return provider.Result{}, causeOf(err)
	}
	res, ok := paymentState(pi)
	if !ok {
		return provider.Result{}, fmt.Errorf("%w: %s is %s", errNotSettled, pi.ID, pi.Status)
	}
	res.Reference = pi.Metadata[MetadataReference]
	return res, nil
}

// payment sends a capture or a cancel (op) of req.Charge with send and
// answers the PaymentIntent's state after it.
func (a *Adapter) payment(ctx context.Context, op string, req provider.PaymentRequest, send func(context.Context) (*stripego.PaymentIntent, error)) (provider.Result, error) {
	res, kind, cause := a.changePayment(ctx, req, send)
	if kind == nil {
		res.Reference = req.Reference
	}
	return a.finish(ctx, op, req.Reference, res, kind, cause)
}

func (a *Adapter) changePayment(ctx context.Context, req provider.PaymentRequest, send func(context.Context) (*stripego.PaymentIntent, error)) (provider.Result, error, error) {
	if err := validatePayment(req); err != nil {
		return provider.Result{}, provider.ErrRejected, err
	}
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return provider.Result{}, provider.ErrUnavailable, err
	}
	// As create's: the trace follows the transport's own re-sends.
	traced, sent := provider.TraceSend(ctx)
	pi, err := send(traced)
	if err == nil {
		if res, ok := paymentState(pi); ok && (res.Status == provider.StatusCharged || res.Status == provider.StatusCanceled) {
			return res, nil, nil
		}
		return provider.Result{}, provider.ErrAmbiguous, fmt.Errorf("%w: %s is %s", errNotSettled, pi.ID, pi.Status)
	}
	kind, cause := classify(err, sent)
	if !errors.Is(kind, provider.ErrRejected) || !unexpectedState(cause) {
		return provider.Result{}, kind, cause
	}
	// Stripe refused this send for the PaymentIntent's state, so it
	// changed nothing: that state is the answer, if it is final.
	pi, err = a.intents.Retrieve(ctx, req.Charge, nil)
	if err != nil {
		return provider.Result{}, provider.ErrUnavailable, causeOf(err)
	}
	if res, ok := paymentState(pi); ok && (res.Status == provider.StatusCharged || res.Status == provider.StatusCanceled) {
		return res, nil, nil
	}
	return provider.Result{}, provider.ErrRejected, cause
}

// unexpectedState reports whether err is Stripe refusing a capture or a
// cancel for the PaymentIntent's status: captured, canceled (an expired
// authorization too) or declined.
func unexpectedState(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == string(stripego.ErrorCodePaymentIntentUnexpectedState)
}

// paymentState answers a PaymentIntent's state as a payment: held
// (requires_capture, its amount capturable), captured (succeeded, its
// amount received) or canceled; else its outcome as a charge (settled).
func paymentState(pi *stripego.PaymentIntent) (provider.Result, bool) {
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		return provider.Result{Status: provider.StatusCharged, ChargeID: pi.ID, Amount: pi.AmountReceived}, true
	case stripego.PaymentIntentStatusCanceled:
		return provider.Result{Status: provider.StatusCanceled, ChargeID: pi.ID}, true
	case stripego.PaymentIntentStatusRequiresCapture:
		return provider.Result{Status: provider.StatusAuthorized, ChargeID: pi.ID, Amount: pi.AmountCapturable}, true
	}
	return settled(pi)
}

func validatePayment(req provider.PaymentRequest) error {
	switch {
	case !referencePattern.MatchString(req.Reference):
		return errBadReference
	case !paymentIntentPattern.MatchString(req.Charge):
		return errNotPaymentIntent
	case req.Amount < 0:
		return errBadAmount
	}
	return nil
}
