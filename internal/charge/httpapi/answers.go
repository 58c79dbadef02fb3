package httpapi

import (
	"cmp"
	"encoding/json"
	"net/http"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// chargeJSON is the API's representation of a charge.
type chargeJSON struct {
	ID                string       `json:"id"`
	Amount            int64        `json:"amount"`
	Currency          string       `json:"currency"`
	Description       string       `json:"description,omitempty"`
	Status            string       `json:"status"`
	ProviderReference string       `json:"provider_reference"`
	CreatedAt         string       `json:"created_at"`
	AmountRefunded    int64        `json:"amount_refunded"`
	AmountAuthorized  int64        `json:"amount_authorized,omitempty"`
	Refunds           []refundJSON `json:"refunds,omitempty"`
	RefundsHasMore    bool         `json:"refunds_has_more,omitempty"`
}

func chargeBody(c charge.Charge) []byte {
	j := chargeJSON{
		ID: c.ID, Amount: c.Money.Amount, Currency: c.Money.Currency, Description: c.Description,
		Status: c.Status, ProviderReference: c.ProviderReference,
		CreatedAt: c.CreatedAt.UTC().Format(charge.TimeLayout), AmountRefunded: c.AmountRefunded,
		AmountAuthorized: c.AmountAuthorized, RefundsHasMore: c.MoreRefunds,
	}
	for _, r := range c.Refunds {
		j.Refunds = append(j.Refunds, refundOf(r))
	}
	b, _ := json.Marshal(j) // only strings and integers: cannot fail
	return b
}

// refundJSON is the API's representation of a refund.
type refundJSON struct {
	ID                string `json:"id"`
	ChargeID          string `json:"charge_id"`
	Amount            int64  `json:"amount"`
	Currency          string `json:"currency"`
	Reason            string `json:"reason,omitempty"`
	Status            string `json:"status"`
	ProviderReference string `json:"provider_reference"`
	CreatedAt         string `json:"created_at"`
}

func refundOf(r charge.Refund) refundJSON {
	return refundJSON{
		ID: r.ID, ChargeID: r.ChargeID, Amount: r.Money.Amount, Currency: r.Money.Currency, Reason: r.Reason,
		Status: cmp.Or(r.Status, charge.StatusSucceeded), ProviderReference: r.ProviderReference,
		CreatedAt: r.CreatedAt.UTC().Format(charge.TimeLayout),
	}
}

func refundBody(r charge.Refund) []byte {
	b, _ := json.Marshal(refundOf(r)) // only strings and integers: cannot fail
	return b
}

// refundListJSON is the API's representation of a page of refunds.
type refundListJSON struct {
	Data    []refundJSON `json:"data"`
	HasMore bool         `json:"has_more"`
}

func refundListBody(l charge.RefundList) []byte {
	j := refundListJSON{Data: make([]refundJSON, 0, len(l.Refunds)), HasMore: l.HasMore}
	for _, r := range l.Refunds {
		j.Data = append(j.Data, refundOf(r))
	}
	b, _ := json.Marshal(j) // only strings, integers and a bool: cannot fail
	return b
}

// Answers are the answers the service stores, rendered as the API sends
// them. The handler and the reconciler build them the same way. So a
// retry replays the same bytes, whoever settled the command.
type Answers struct{}

var _ charge.Answers = Answers{}

// Created is the 201 of a charge that succeeded.
func (Answers) Created(c charge.Charge) idem.Response {
	return idem.Response{
		Status:  http.StatusCreated,
		Headers: map[string]string{"Content-Type": ContentTypeJSON, "Location": "/charges/" + c.ID},
		Body:    chargeBody(c),
	}
}

// Declined is the 402 of a declined card.
func (Answers) Declined(code string) idem.Response {
	return problem(ProblemDeclined, "The card was declined ("+code+"). Retrying this key returns this answer; use a new key for a new attempt.")
}

// Conflicting is the 500 of a command whose charge row conflicts with the
// provider's answer.
func (Answers) Conflicting() idem.Response {
	return problem(ProblemChargeConflict, "This charge's record conflicts with the provider's answer. Contact support with the Idempotency-Key.")
}

// RefundCreated is the 201 of a refund that succeeded.
func (Answers) RefundCreated(r charge.Refund) idem.Response {
	return idem.Response{
		Status:  http.StatusCreated,
		Headers: map[string]string{"Content-Type": ContentTypeJSON, "Location": "/charges/" + r.ChargeID + "/refunds/" + r.ID},
		Body:    refundBody(r),
	}
}

// RefundDeclined is the 409 of a refund the provider refused for good.
func (Answers) RefundDeclined(code string) idem.Response {
	return problem(ProblemRefundDeclined, "The provider refused the refund ("+code+"). Nothing was refunded. Retrying this key returns this answer.")
}

// RefundLimit is the 409 of a refund of a charge whose settled refunds
// reach the limit.
func (Answers) RefundLimit() idem.Response {
	return problem(ProblemRefundLimit, "The charge has as many refunds as a charge may have. Nothing was refunded. Retrying this key returns this answer; a new key is refused too.")
}

// RefundExceeds is the 409 of a refund beyond what settled refunds leave.
func (Answers) RefundExceeds() idem.Response {
	return problem(ProblemRefundExceeds, "The charge's settled refunds leave less than this amount. Nothing was refunded. Retrying this key returns this answer; a new key asks again.")
}
