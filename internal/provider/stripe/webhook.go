package stripe

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	stripego "github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// The webhook events that settle a charge.
const (
	EventSucceeded = "payment_intent.succeeded"
	EventFailed    = "payment_intent.payment_failed"
)

// DefaultWebhookTolerance is how old a delivery's signed timestamp may be:
// stripe-go's default, five minutes. An older one may be a replay of a
// captured delivery and is refused.
const DefaultWebhookTolerance = webhook.DefaultTolerance

// Errors of ParseWebhook. Neither says more than that: a delivery is
// verified before anything in it is believed.
var (
	// ErrSignature: the Stripe-Signature header is missing, malformed,
	// does not verify with the signing secret, or is too old.
	ErrSignature = errors.New("stripe: webhook signature does not verify")
	// ErrUnreadable: the signature verified but the payload is not an
	// event this adapter can read.
	ErrUnreadable = errors.New("stripe: webhook event unreadable")
)

// Event is a verified webhook event, as far as it concerns our charges.
type Event struct {
	ID   string // evt_…, the same for every delivery of the event
	Type string
	// Reference and Command are the PaymentIntent's
	// metadata[chargeonce_reference] and metadata[chargeonce_command]:
	// empty for an event about anything else, or about a PaymentIntent we
	// did not create.
	Reference, Command string
	// Result is the PaymentIntent's outcome, for EventSucceeded
	// (StatusCharged) and EventFailed (StatusDeclined); for any other
	// event its Status is empty.
	Result provider.Result
}

// ParseWebhook verifies a webhook delivery with stripe-go's webhook package
// (the endpoint's signing secret, whsec_…, and a timestamp at most
// tolerance old; zero means DefaultWebhookTolerance) and reads its event.
// The event's API version is not required to match stripe-go's: only the
// PaymentIntent's id, status, metadata and last payment error are read,
// which every version has in the same form.
func ParseWebhook(payload []byte, signature, secret string, tolerance time.Duration) (Event, error) {
	if secret == "" {
		return Event{}, fmt.Errorf("%w: no signing secret configured", ErrSignature)
	}
	ev, err := webhook.ConstructEventWithOptions(payload, signature, secret, webhook.ConstructEventOptions{
		Tolerance: cmp.Or(tolerance, DefaultWebhookTolerance), IgnoreAPIVersionMismatch: true,
	})
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return Event{}, fmt.Errorf("%w: %w", ErrSignature, err)
	case err != nil:
		return Event{}, ErrUnreadable // stripe-go's message quotes the payload's parse error
	case ev.ID == "":
		return Event{}, ErrUnreadable
	}
	out := Event{ID: ev.ID, Type: string(ev.Type)}
	if ev.Type != EventSucceeded && ev.Type != EventFailed {
		return out, nil
	}
	var pi stripego.PaymentIntent
	if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &pi) != nil || pi.ID == "" {
		return Event{}, ErrUnreadable
	}
	out.Reference, out.Command = pi.Metadata[MetadataReference], pi.Metadata[MetadataCommand]
	res, ok := settled(&pi)
	switch {
	case !ok, ev.Type == EventSucceeded && res.Status != provider.StatusCharged,
		ev.Type == EventFailed && res.Status != provider.StatusDeclined:
		// The event and its object disagree: believe neither.
		return Event{}, ErrUnreadable
	}
	res.Reference = out.Reference
	out.Result = res
	return out, nil
}
