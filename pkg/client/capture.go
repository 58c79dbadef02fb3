package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// WithCaptureLater authorizes only: the provider holds the amount, and the
// charge is StatusRequiresCapture until Capture takes it or Cancel
// releases it. It is part of the request: a retry with the same id must
// carry it too.
func WithCaptureLater() CreateOption {
	return func(r *chargeRequest) {
		later := false
		r.Capture = &later
	}
}

// CaptureOption sets an optional member of a capture request.
type CaptureOption func(*captureRequest)

// WithCaptureAmount captures amount (in the charge's minor units) instead
// of all the charge holds; the rest is released. It is sent as given: 0 is
// refused by the API, never taken for "all".
func WithCaptureAmount(amount int64) CaptureOption {
	return func(r *captureRequest) { r.Amount = &amount }
}

type captureRequest struct {
	Amount *int64 `json:"amount,omitempty"` // nil: all the charge holds
}

// Capture captures the charge chargeID, created with WithCaptureLater. It
// takes all it holds, or the amount WithCaptureAmount gives. It needs no
// command id. It sets the charge's state, and setting a state twice is
// setting it once. The same call again answers the same charge, and the
// provider captures once. So Capture retries network errors, timeouts, 409
// request-in-progress, 429 and 5xx answers with the same request. A caller
// may call it again after any error. A canceled charge, or one captured
// with another amount, is a *ProblemError matching ErrChargeState. It
// carries the charge's ChargeStatus.
func (c *Client) Capture(ctx context.Context, chargeID string, opts ...CaptureOption) (Charge, error) {
	var req captureRequest
	for _, opt := range opts {
		opt(&req)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Charge{}, fmt.Errorf("client: capture %s: %w", chargeID, err)
	}
	return exchange[Charge](ctx, c, "capture "+chargeID, http.MethodPost, chargePath(chargeID)+"/capture", body, stateProofs)
}

// Cancel cancels the charge chargeID, created with WithCaptureLater and not
// captured: the provider releases what it holds. Like Capture it needs no
// command id, retries with the same request, and may be called again after
// any error. A captured charge is a *ProblemError matching ErrChargeState,
// with ChargeStatus StatusSucceeded.
func (c *Client) Cancel(ctx context.Context, chargeID string) (Charge, error) {
	return exchange[Charge](ctx, c, "cancel "+chargeID, http.MethodPost, chargePath(chargeID)+"/cancel", nil, stateProofs)
}
