package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
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

// Refund refunds the charge chargeID, at most once for id. It refunds all
// that remains of it, or the amount WithRefundAmount gives. The caller
// mints id once, when the intent to refund is formed, outside any retry
// loop. That is as for Create. Refund retries as Create does, with id and
// the same body bytes. Calling it again with the same id and arguments
// resumes the intent. It never refunds twice. The refund's own failures
// match ErrRefundExceedsCharge, ErrRefundLimit, ErrChargeState or
// ErrRefundDeclined. ErrChargeState means a charge not in StatusSucceeded.
// An unknown or another tenant's charge matches ErrNotFound.
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

// RefundList is a page of a charge's refunds, oldest first.
type RefundList struct {
	Refunds []Refund `json:"data"`
	// HasMore is true when more refunds follow the last of Refunds.
	HasMore bool `json:"has_more"`
}

// ListRefunds reads a page of the charge chargeID's refunds, oldest first.
// It reads at most limit: 1 to 100, or 0 for the API's default, 10. It
// starts after the refund startingAfter names ("" for the oldest). It
// retries as Get does. A startingAfter that is no refund of the charge is
// refused with ErrInvalid. An unknown charge, or another tenant's, is
// ErrNotFound.
func (c *Client) ListRefunds(ctx context.Context, chargeID string, limit int, startingAfter string) (RefundList, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if startingAfter != "" {
		q.Set("starting_after", startingAfter)
	}
	path := chargePath(chargeID) + "/refunds"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return exchange[RefundList](ctx, c, "list refunds of "+chargeID, http.MethodGet, path, nil, nil)
}

// AllRefunds yields every refund of the charge chargeID, oldest first,
// reading pages of 100 with ListRefunds. An error ends it: it is yielded
// with the zero Refund.
func (c *Client) AllRefunds(ctx context.Context, chargeID string) iter.Seq2[Refund, error] {
	return func(yield func(Refund, error) bool) {
		for after := ""; ; {
			page, err := c.ListRefunds(ctx, chargeID, maxRefundsPage, after)
			if err != nil {
				yield(Refund{}, err)
				return
			}
			for _, re := range page.Refunds {
				if !yield(re, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Refunds) == 0 {
				return
			}
			after = page.Refunds[len(page.Refunds)-1].ID
		}
	}
}

// maxRefundsPage is the most refunds a page of ListRefunds holds.
const maxRefundsPage = 100
