package charge

import (
	"encoding/json"
	"net/http"
	"time"

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

// timeLayout keeps milliseconds, the precision records store.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// ContentTypeJSON and ContentTypeProblem are the response media types.
const (
	ContentTypeJSON    = "application/json"
	ContentTypeProblem = "application/problem+json"
)

func (c Charge) body() []byte {
	b, _ := json.Marshal(chargeJSON{ // only strings and integers: cannot fail
		ID: c.ID, Amount: c.Money.Amount, Currency: c.Money.Currency, Description: c.Description,
		Status: "succeeded", ProviderReference: c.ProviderReference,
		CreatedAt: c.CreatedAt.UTC().Format(timeLayout),
	})
	return b
}

// createdResponse is the 201 an intent answers when its charge succeeds,
// built the same way by the handler and by the reconciler, so a retry
// replays the same bytes whoever completed the command.
func createdResponse(c Charge) idem.Response {
	return idem.Response{
		Status:  http.StatusCreated,
		Headers: map[string]string{"Content-Type": ContentTypeJSON, "Location": "/charges/" + c.ID},
		Body:    c.body(),
	}
}

// ProblemType is a stable problem type (RFC 9457) the API answers with.
type ProblemType struct {
	Slug   string
	Title  string
	Status int
}

// ProblemBase prefixes every problem type URI.
const ProblemBase = "https://chargeonce.dev/problems/"

// The problem types; api/openapi.yaml documents the same list.
var (
	ProblemInvalidKey         = ProblemType{"invalid-idempotency-key", "Invalid Idempotency-Key header", http.StatusBadRequest}
	ProblemInvalidRequest     = ProblemType{"invalid-request", "Invalid request", http.StatusBadRequest}
	ProblemTooLarge           = ProblemType{"payload-too-large", "Request body too large", http.StatusRequestEntityTooLarge}
	ProblemUnsupportedMedia   = ProblemType{"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType}
	ProblemUnauthorized       = ProblemType{"unauthorized", "No tenant in the authorizer context", http.StatusUnauthorized}
	ProblemInProgress         = ProblemType{"request-in-progress", "A request with this key is in progress", http.StatusConflict}
	ProblemKeyReused          = ProblemType{"idempotency-key-reused", "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity}
	ProblemDeclined           = ProblemType{"card-declined", "Card declined", http.StatusPaymentRequired}
	ProblemUnavailable        = ProblemType{"provider-unavailable", "Card provider unavailable; nothing was charged", http.StatusServiceUnavailable}
	ProblemOutcomePending     = ProblemType{"outcome-pending", "Outcome not known yet; retry with the same key", http.StatusServiceUnavailable}
	ProblemNotFound           = ProblemType{"not-found", "Charge not found", http.StatusNotFound}
	ProblemInternal           = ProblemType{"internal-error", "Internal error", http.StatusInternalServerError}
	ProblemChargeConflict     = ProblemType{"charge-conflict", "Charge record conflicts with the provider", http.StatusInternalServerError}
	ProblemProviderRejected   = ProblemType{"provider-rejected", "Card provider refused the request; nothing was charged", http.StatusBadGateway}
	ProblemServiceUnavailable = ProblemType{"service-unavailable", "Service temporarily unavailable; nothing was charged", http.StatusServiceUnavailable}
)

type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// problem renders p with an optional detail. Details come from this package's
// own messages, never from an internal error.
func problem(p ProblemType, detail string) idem.Response {
	b, _ := json.Marshal(problemJSON{Type: ProblemBase + p.Slug, Title: p.Title, Status: p.Status, Detail: detail})
	return idem.Response{Status: p.Status, Headers: map[string]string{"Content-Type": ContentTypeProblem}, Body: b}
}

// declinedResponse is the 402 stored as a permanent failure.
func declinedResponse(code string) idem.Response {
	return problem(ProblemDeclined, "The card was declined ("+code+"). Retrying this key returns this answer; use a new key for a new attempt.")
}

// retryAfter is the Retry-After value (seconds) for a lease ending at until.
func retryAfter(now, until time.Time) int {
	s := int(until.Sub(now).Seconds() + 0.999)
	return min(max(s, 1), 30)
}
