package charge

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// ChargeOperation scopes idempotency keys used to create charges.
const ChargeOperation = "create-charge"

// Limits on a charge request.
const (
	MinAmount      = 1
	MaxAmount      = 99_999_999
	MaxSourceLen   = 64
	MaxDescription = 500 // characters
)

// CommandID is the client's identity for one intent (its Idempotency-Key),
// minted once, before the first attempt, and sent with every retry.
type CommandID string

// Money is an amount in the currency's minor units.
type Money struct {
	Amount   int64
	Currency string // ISO 4217
}

// Request is a validated request to charge a card.
type Request struct {
	Money       Money
	Source      string // card token; never logged or stored
	Description string
	// AuthorizeOnly holds the amount without capturing it ("capture":
	// false): Capture or Cancel settles it later.
	AuthorizeOnly bool
}

// ErrInvalidRequest is matched by every *InvalidError.
var ErrInvalidRequest = errors.New("charge: invalid request")

// InvalidError names the field a request got wrong.
type InvalidError struct {
	Field, Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("charge: %s: %s", e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalidRequest }

// NewRequest validates the parts of a charge request.
func NewRequest(amount int64, currency, source, description string) (Request, error) {
	switch {
	case amount < MinAmount || amount > MaxAmount:
		return Request{}, &InvalidError{"amount", fmt.Sprintf("must be between %d and %d minor units", MinAmount, MaxAmount)}
	case !knownCurrency(currency):
		return Request{}, &InvalidError{"currency", "not an ISO 4217 currency code"}
	case source == "":
		return Request{}, &InvalidError{"source", "required"}
	case len(source) > MaxSourceLen:
		return Request{}, &InvalidError{"source", fmt.Sprintf("longer than %d characters", MaxSourceLen)}
	case !printableASCII(source):
		return Request{}, &InvalidError{"source", "not printable ASCII"}
	case utf8.RuneCountInString(description) > MaxDescription:
		return Request{}, &InvalidError{"description", fmt.Sprintf("longer than %d characters", MaxDescription)}
	case !utf8.ValidString(description) || hasControl(description):
		// ParseBody has already refused a body whose strings are not
		// UTF-8; this holds for a caller that passes its own strings.
		return Request{}, &InvalidError{"description", "contains control characters or invalid UTF-8"}
	}
	return Request{Money: Money{Amount: amount, Currency: currency}, Source: source, Description: description}, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// Charge is a completed charge, as stored and as returned by the API.
type Charge struct {
	ID                string
	Tenant            string
	Money             Money
	Description       string
	ProviderReference string
	ProviderChargeID  string
	IdempotencyKey    CommandID
	CreatedAt         time.Time
	// Status is the charge's state (the Status constants).
	Status string
	// AmountAuthorized is what an authorization held, for a charge
	// created to capture later; Money is then what is held or captured.
	AmountAuthorized int64
	// transition is the capture or cancel in flight, while Status is
	// StatusCapturing or StatusCanceling.
	transition pending
	// AmountRefunded is what its settled refunds returned. Refunds are
	// its oldest, at most EmbeddedRefunds, when read with the charge
	// (Service.Get); MoreRefunds says it has more.
	AmountRefunded int64
	Refunds        []Refund
	MoreRefunds    bool
	// refundClaimed is AmountRefunded and the holds of refunds in flight.
	refundClaimed int64
}

// A charge's statuses. A charge created to capture later is
// StatusRequiresCapture until Capture (StatusCapturing, then
// StatusSucceeded) or Cancel (StatusCanceling, then StatusCanceled)
// settles it. Every other charge is StatusSucceeded from the start.
const (
	StatusRequiresCapture = "requires_capture"
	StatusCapturing       = "capturing"
	StatusSucceeded       = "succeeded"
	StatusCanceling       = "canceling"
	StatusCanceled        = "canceled"
)

// ChargeID is the id of the charge an intent creates. It is derived from
// the key and the record's creation. So a key reused after retention names
// a new intent, with its own charge.
func ChargeID(k idem.Key, created time.Time) string {
	return derive("ch_", "charge-id", k, created, 24)
}

// IsChargeID reports whether id has the form ChargeID gives: "ch_" and 24
// lower-case hex digits. Any other id names no charge, so a read of it
// needs no call; one over DynamoDB's 1,024-byte sort key would fail.
func IsChargeID(id string) bool { return isDerived(id, "ch_") }

// ErrNotChargeID says an id is not of the form IsChargeID holds.
var ErrNotChargeID = errors.New("not a charge id: ch_ and 24 lower-case hex digits")

// isDerived reports whether id is prefix and 24 lower-case hex digits.
func isDerived(id, prefix string) bool {
	hexPart, ok := strings.CutPrefix(id, prefix)
	if !ok || len(hexPart) != 24 {
		return false
	}
	for i := range len(hexPart) {
		if c := hexPart[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ProviderReference is the reference sent to the provider for an intent.
// It is derived like ChargeID, never random. A re-execution of the intent
// must hit the provider's deduplication. A new intent under a reused key
// must not.
func ProviderReference(k idem.Key, created time.Time) string {
	return derive("co_", "provider-reference", k, created, 32)
}

// derive is the hex SHA-256 of purpose, k and created, behind prefix and
// cut to n hex digits.
func derive(prefix, purpose string, k idem.Key, created time.Time, n int) string {
	var in [320]byte // most inputs fit: the buffer then stays on the stack
	b := append(append(append(in[:0], purpose...), 0), k.String()...)
	b = strconv.AppendInt(append(b, 0), created.UnixMilli(), 10)
	sum := sha256.Sum256(b)
	var out [3 + 2*sha256.Size]byte
	h := append(out[:0], prefix...)
	h = hex.AppendEncode(h, sum[:])
	return string(h[:len(prefix)+n])
}

// RefundOperation scopes the idempotency keys of refunds: a key used to
// create a charge names another intent here.
const RefundOperation = "create-refund"

// RefundRequest is a validated request to refund a charge. Amount zero
// asks for all that remains.
type RefundRequest struct {
	Amount int64
	Reason string
}

// Refund is a completed refund, as stored and as returned by the API.
type Refund struct {
	ID                string
	ChargeID          string
	Tenant            string
	Money             Money
	Reason            string
	ProviderReference string
	ProviderRefundID  string
	IdempotencyKey    CommandID
	CreatedAt         time.Time
	// Status is StatusSucceeded, or RefundFailed for one the provider
	// made and then reported failed (its amount is the charge's again).
	Status string
}

// RefundFailed is the status of a refund the provider reported failed
// after it had succeeded.
const RefundFailed = "failed"

// RefundID is the id of the refund an intent creates, derived like
// ChargeID.
func RefundID(k idem.Key, created time.Time) string {
	return derive("re_", "refund-id", k, created, 24)
}

// IsRefundID reports whether id has the form RefundID gives.
func IsRefundID(id string) bool { return isDerived(id, "re_") }

// RefundReference is the provider reference of a refund intent, derived
// like ProviderReference but never equal to a charge's.
func RefundReference(k idem.Key, created time.Time) string {
	return derive("rf_", "refund-reference", k, created, 32)
}

// NotificationOperation scopes the keys that deduplicate a provider's
// notifications (Notification.Key).
const NotificationOperation = "provider-event"

// TransitionOperation scopes the reconciler's keys for a charge whose
// capture or cancel is unsettled: tenant#settle-charge#<charge id>. No
// record is stored under it.
const TransitionOperation = "settle-charge"

// TransitionReference is the provider reference of a charge's capture or
// cancel: one per charge and operation, so every attempt is deduplicated.
func TransitionReference(chargeID, operation string) string {
	k, _ := idem.NewKey("charge", operation, chargeID) // valid by construction
	return derive("mv_", "transition-reference", k, time.UnixMilli(0), 32)
}
