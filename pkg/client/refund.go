package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// RefundReason says why a charge is refunded.
type RefundReason string

// The reasons the API accepts.
const (
	ReasonDuplicate           RefundReason = "duplicate"
	ReasonFraudulent          RefundReason = "fraudulent"
	ReasonRequestedByCustomer RefundReason = "requested_by_customer"
)

// Refund is a refund of a charge as the API describes it.
type Refund struct {
	ID                string       `json:"id"`
	ChargeID          string       `json:"charge_id"`
	Amount            int64        `json:"amount"`
	Currency          string       `json:"currency"`
	Reason            RefundReason `json:"reason,omitempty"`
	Status            string       `json:"status"`
	ProviderReference string       `json:"provider_reference"`
	CreatedAt         time.Time    `json:"created_at"`
}

// RefundResult is the outcome of a successful Refund.
type RefundResult struct {
	Refund Refund
	Receipt
}

// RefundOption sets an optional member of a refund request.
type RefundOption func(*refundRequest)

// WithRefundAmount refunds amount (in the charge's minor units) instead of
// all that remains of the charge. It is sent as given: 0 is refused by the
// API, never taken for "all".
func WithRefundAmount(amount int64) RefundOption {
	return func(r *refundRequest) { r.Amount = &amount }
}

// WithRefundReason says why the charge is refunded.
func WithRefundReason(reason RefundReason) RefundOption {
	return func(r *refundRequest) { r.Reason = reason }
}

type refundRequest struct {
	Amount *int64       `json:"amount,omitempty"` // nil: all that remains
	Reason RefundReason `json:"reason,omitempty"`
}

// Refund refunds the charge chargeID, at most once for id: all that
// remains of it, or the amount WithRefundAmount gives. The caller mints
// id once, when the intent to refund is formed, outside any retry loop,
// as for Create. Refund retries as Create does, with id and the same body
// bytes, and calling it again with the same id and arguments resumes the
// intent: it never refunds twice. The refund's own failures match
// ErrRefundExceedsCharge, ErrRefundLimit, ErrChargeState (a charge that
// is not StatusSucceeded) or ErrRefundDeclined; an unknown or another
// tenant's charge matches ErrNotFound.
func (c *Client) Refund(ctx context.Context, chargeID string, id CommandID, opts ...RefundOption) (RefundResult, error) {
	var req refundRequest
	for _, opt := range opts {
		opt(&req)
	}
	re, rc, err := command[Refund](ctx, c, "refund "+chargeID, id, chargePath(chargeID)+"/refunds", req)
	return RefundResult{Refund: re, Receipt: rc}, err
}

// GetRefund reads the refund refundID of the charge chargeID, retrying as
// Get does. An unknown refund or charge, or another tenant's, is a
// *ProblemError matching ErrNotFound.
func (c *Client) GetRefund(ctx context.Context, chargeID, refundID string) (Refund, error) {
	return exchange[Refund](ctx, c, "get refund "+refundID, http.MethodGet, chargePath(chargeID)+"/refunds/"+url.PathEscape(refundID), nil, nil)
}
