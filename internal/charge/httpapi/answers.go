package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// chargeJSON is the API's representation of a charge.
type chargeJSON struct {
	ID                string `json:"id"`
	Amount            int64  `json:"amount"`
	Currency          string `json:"currency"`
	Description       string `json:"description,omitempty"`
	Status            string `json:"status"`
	ProviderReference string `json:"provider_reference"`
	CreatedAt         string `json:"created_at"`
}

func chargeBody(c charge.Charge) []byte {
	b, _ := json.Marshal(chargeJSON{ // only strings and integers: cannot fail
		ID: c.ID, Amount: c.Money.Amount, Currency: c.Money.Currency, Description: c.Description,
		Status: "succeeded", ProviderReference: c.ProviderReference,
		CreatedAt: c.CreatedAt.UTC().Format(charge.TimeLayout),
	})
	return b
}

// Answers are the answers the service stores, rendered as the API sends
// them: built the same way by the handler and by the reconciler, so a
// retry replays the same bytes whoever settled the command.
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
