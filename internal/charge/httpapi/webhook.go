package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// RouteWebhook is the route Stripe delivers webhook events to. API Gateway
// sends it to the charge function without the JWT authorizer: the
// Stripe-Signature header is its authentication.
const RouteWebhook = "POST /webhooks/stripe"

// HeaderStripeSignature carries a webhook delivery's signature.
const HeaderStripeSignature = "Stripe-Signature"

// MaxWebhookBytes is the largest webhook payload accepted. A
// PaymentIntent event is a few KiB.
const MaxWebhookBytes = 256 << 10

// WebhookVerifier verifies a webhook delivery's signature over its payload
// and reads its event. An error refuses the delivery with nothing stored,
// with 400. If it wraps ErrVerifierUnavailable, the answer is 500, so that
// the provider delivers it again. An event about nothing of ours is a
// Notification that settles nothing.
type WebhookVerifier func(ctx context.Context, payload []byte, signature string) (charge.Notification, error)

// ErrVerifierUnavailable: the verifier could not verify any delivery,
// since its signing secret could not be read. The delivery may be good.
var ErrVerifierUnavailable = errors.New("httpapi: webhook verifier unavailable")

// ErrWebhooksOff is the error of the verifier a Handler has when none is
// configured. Every delivery is refused.
var ErrWebhooksOff = errors.New("httpapi: no webhook signing secret configured")

// webhook verifies a delivery and hands its notification to the service.
// An acknowledged outcome (200) makes the provider stop redelivering.
// The others are answered so that it redelivers.
func (h *Handler) webhook(ctx context.Context, req events.APIGatewayV2HTTPRequest) (charge.Result, *idem.Response, error) {
	body, refused := requestBody(req, MaxWebhookBytes, "A webhook payload must be at most 262144 bytes.")
	if refused != nil {
		return charge.Result{}, refused, nil
	}
	n, err := h.opt.Webhook(ctx, body, header(req, HeaderStripeSignature))
	if errors.Is(err, ErrVerifierUnavailable) {
		return charge.Result{}, nil, err
	}
	if err != nil {
		// The verifier's errors name what failed, never the payload or
		// the secret.
		h.opt.Logger.WarnContext(ctx, "webhook refused", "request_id", requestID(ctx), "reason", err.Error())
		return charge.Result{}, ref(problem(ProblemInvalidRequest, "The webhook's Stripe-Signature does not verify, or its event cannot be read.")), nil
	}
	res, err := h.svc.Notify(ctx, n)
	return res, nil, err
}

// received is the acknowledgement of a webhook delivery.
func received() idem.Response {
	return idem.Response{Status: http.StatusOK, Headers: map[string]string{"Content-Type": ContentTypeJSON}, Body: []byte(`{"received":true}`)}
}
