package stripe

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/provider"
)

// The webhook events that settle a charge, or change an authorization:
// EventSucceeded comes after a capture too.
const (
	EventSucceeded  = "payment_intent.succeeded"
	EventFailed     = "payment_intent.payment_failed"
	EventAuthorized = "payment_intent.amount_capturable_updated"
	EventCanceled   = "payment_intent.canceled"
)

// intentEvents are the status each PaymentIntent event must report.
// EventAuthorized names none: it says an amount changed, so its
// PaymentIntent's state is read as it stands.
var intentEvents = map[string]provider.Status{
	EventSucceeded: provider.StatusCharged,
	EventFailed:    provider.StatusDeclined,
	EventCanceled:  provider.StatusCanceled,
}

// The webhook events about a refund. The first three carry the Refund;
// EventChargeRefunded carries the Charge, with its refunds on API versions
// before 2022-11-15 only.
const (
	EventRefundCreated  = "refund.created"
	EventRefundUpdated  = "refund.updated"
	EventRefundFailed   = "refund.failed"
	EventChargeRefunded = "charge.refunded"
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

// Event is a verified webhook event, as far as it concerns our charges
// and refunds.
type Event struct {
	ID   string // evt_…, the same for every delivery of the event
	Type string
	// Reference and Command are the PaymentIntent's or the Refund's
	// metadata[chargeonce_reference] and metadata[chargeonce_command]:
	// empty for an event about anything else, or about an object we did
	// not create. Row is its metadata[chargeonce_row], empty on objects
	// created before the adapter sent it.
	Reference, Command, Row string
	// Result is the object's outcome: for EventSucceeded (StatusCharged,
	// with the Amount received), EventFailed (StatusDeclined),
	// EventAuthorized (StatusAuthorized, with the Amount capturable) and
	// EventCanceled (StatusCanceled) the PaymentIntent's; for the refund
	// events the Refund's (StatusRefunded, or StatusDeclined once it
	// failed), its id as ChargeID. Its Status is empty for any other event,
	// and for a refund with no outcome yet.
	Result provider.Result
}

// CheckSignature refuses a Stripe-Signature header no signing secret
// verifies. It is missing or malformed, has no v1 signature, or is older
// than tolerance (zero means DefaultWebhookTolerance). It parses the
// header and reads the wall clock as stripe-go does. So it refuses only
// what ParseWebhook would, and without the secret. The error wraps
// ErrSignature.
func CheckSignature(header string, tolerance time.Duration) error {
	if header == "" {
		return fmt.Errorf("%w: %w", ErrSignature, webhook.ErrNotSigned)
	}
	var signed time.Time
	signatures := 0
	for pair := range strings.SplitSeq(header, ",") {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || strings.Contains(value, "=") {
			return fmt.Errorf("%w: %w", ErrSignature, webhook.ErrInvalidHeader)
		}
		switch name {
		case "t":
			unix, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSignature, webhook.ErrInvalidHeader)
			}
			signed = time.Unix(unix, 0)
		case "v1":
			// stripe-go skips a signature that is not hex.
			if _, err := hex.DecodeString(value); err == nil {
				signatures++
			}
		}
	}
	switch {
	case signatures == 0:
		return fmt.Errorf("%w: %w", ErrSignature, webhook.ErrNoValidSignature)
	case time.Since(signed) > cmp.Or(tolerance, DefaultWebhookTolerance):
		return fmt.Errorf("%w: %w", ErrSignature, webhook.ErrTooOld)
	}
	return nil
}

// ParseWebhook verifies a webhook delivery with stripe-go's webhook package
// (the endpoint's signing secret, whsec_…, and a timestamp at most
// tolerance old; zero means DefaultWebhookTolerance) and reads its event.
// The event's API version is not required to match stripe-go's: only the
// PaymentIntent's id, status, amounts, metadata and last payment error are read,
// or the Refund's id, status, failure reason and metadata, which every
// version has in the same form. A Charge's refunds are read where the
// version includes them.
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
	switch ev.Type {
	case EventSucceeded, EventFailed, EventAuthorized, EventCanceled:
		return readIntent(out, ev.Data)
	case EventRefundCreated, EventRefundUpdated, EventRefundFailed:
		var rf stripego.Refund
		if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &rf) != nil || rf.ID == "" {
			return Event{}, ErrUnreadable
		}
		return readRefund(out, &rf)
	case EventChargeRefunded:
		var ch stripego.Charge
		if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &ch) != nil || ch.ID == "" {
			return Event{}, ErrUnreadable
		}
		if rf := newestOurs(&ch); rf != nil {
			return readRefund(out, rf)
		}
	}
	return out, nil
}

// readIntent reads a payment_intent event's PaymentIntent into out.
func readIntent(out Event, data *stripego.EventData) (Event, error) {
	var pi stripego.PaymentIntent
	if data == nil || json.Unmarshal(data.Raw, &pi) != nil || pi.ID == "" {
		return Event{}, ErrUnreadable
	}
	out.Reference, out.Command, out.Row = pi.Metadata[MetadataReference], pi.Metadata[MetadataCommand], pi.Metadata[MetadataRow]
	res, ok := paymentState(&pi)
	if want, named := intentEvents[out.Type]; !ok || named && res.Status != want {
		// The event and its object disagree: believe neither.
		return Event{}, ErrUnreadable
	}
	res.Reference = out.Reference
	out.Result = res
	return out, nil
}

// readRefund reads a Refund into out. A refund.failed event about a
// Refund that did not fail is refused, like a bad signature.
func readRefund(out Event, rf *stripego.Refund) (Event, error) {
	out.Reference, out.Command, out.Row = rf.Metadata[MetadataReference], rf.Metadata[MetadataCommand], rf.Metadata[MetadataRow]
	res, ok := refundOutcome(rf)
	if out.Type == EventRefundFailed && res.Status != provider.StatusDeclined {
		return Event{}, ErrUnreadable
	}
	if ok {
		res.Reference = out.Reference
		out.Result = res
	}
	return out, nil
}

// newestOurs is the newest of a Charge's refunds that carries our
// reference, or nil: the refund a charge.refunded event is most likely
// about.
func newestOurs(ch *stripego.Charge) *stripego.Refund {
	var newest *stripego.Refund
	if ch.Refunds == nil {
		return nil
	}
	for _, rf := range ch.Refunds.Data {
		if rf != nil && rf.Metadata[MetadataReference] != "" && (newest == nil || rf.Created > newest.Created) {
			newest = rf
		}
	}
	return newest
}
