package provider

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Guarantees are what a provider adapter promises about the provider
// behind it. The charge path relies on them; see the package doc.
type Guarantees struct {
	// DedupWindow is how long the provider deduplicates a reference: a
	// charge sent again within it returns the first result instead of
	// charging again. Zero means for ever.
	DedupWindow time.Duration
	// DedupMargin is the part of DedupWindow no request may start in: a
	// request sent then could still reach the provider after the window,
	// as a new charge. Deduplicates applies it.
	DedupMargin time.Duration
	// SettleWindow is how long after the last charge attempt had to be
	// sent a "not found" from Lookup can be trusted. Before that, a
	// request still travelling inside the provider (an edge that timed
	// out while its backend goes on) may yet charge.
	SettleWindow time.Duration
}

// Deduplicates reports whether a reference first sent at or after created
// may still be sent at now: only while the provider will deduplicate it,
// DedupMargin to spare. Every path that sends a request asks this first;
// one that may not send looks the reference up instead.
func (g Guarantees) Deduplicates(created, now time.Time) bool {
	return g.DedupWindow == 0 || now.Before(created.Add(g.DedupWindow-g.DedupMargin))
}

// DefaultSettleWindow is the settle window of a provider that states
// none: long enough for any request the provider accepted to land.
const DefaultSettleWindow = 5 * time.Minute

// Status is the provider's verdict on a reference.
type Status string

// The statuses the provider reports.
const (
	StatusCharged  Status = "charged"
	StatusDeclined Status = "declined"
	StatusNotFound Status = "not_found"
	// StatusRefunded: the provider refunded the reference (a refund's
	// result; a refund that failed for good is StatusDeclined).
	StatusRefunded Status = "refunded"
	// StatusAuthorized: the provider holds the amount on the card, not
	// captured yet (an authorize-only charge's result, or its state).
	StatusAuthorized Status = "authorized"
	// StatusCanceled: the authorization was canceled or expired; the
	// provider holds nothing and captured nothing.
	StatusCanceled Status = "canceled"
)

// HeaderNotProcessed is the response header by which the provider, answering
// 503, guarantees that it did not process the request.
const HeaderNotProcessed = "Provider-Not-Processed"

// Sentinel errors; see the package documentation for what each one lets the
// caller conclude. Errors returned by the Client wrap exactly one of them
// together with the underlying cause.
var (
	ErrUnavailable = errors.New("provider unavailable, request not processed")
	ErrAmbiguous   = errors.New("provider outcome unknown, request may have been processed")
	ErrRejected    = errors.New("request rejected, not carried out")
)

// redacted replaces the card source wherever a ChargeRequest is printed.
const redacted = "[redacted]"

// ChargeRequest asks the provider to charge Amount (in minor units of
// Currency) to the card Source. Reference is the caller's idempotency key.
//
// Source is a secret: String, GoString and LogValue redact it, so printing or
// logging a ChargeRequest never reveals it. Only the JSON encoding sent to the
// provider carries it.
//
// Command names the command the charge belongs to (an idem.Key's String,
// tenant#operation#client-key), for an adapter that attaches it to the
// charge so that the provider's notifications lead back to the command (the
// stripe adapter sends it as metadata). Logs name keys only by hash, so
// String, GoString and LogValue leave it out too, and our provider API is
// not sent it.
//
// Row names the charge's row in our charges table, attached like
// Command. A notification finds the row by it once the command's record
// has expired.
//
// AuthorizeOnly asks the provider to hold the amount and not capture it:
// success is then StatusAuthorized, and Capture or Cancel settles it.
type ChargeRequest struct {
	Reference     string `json:"reference"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	Source        string `json:"source"`
	AuthorizeOnly bool   `json:"authorize_only,omitempty"`
	Command       string `json:"-"`
	Row           string `json:"-"`
}

// String formats the request for %v and %s, with the source redacted.
func (r ChargeRequest) String() string {
	return fmt.Sprintf("{Reference:%s Amount:%d Currency:%s Source:%s AuthorizeOnly:%t}", r.Reference, r.Amount, r.Currency, redacted, r.AuthorizeOnly)
}

// GoString formats the request for %#v, with the source redacted.
func (r ChargeRequest) GoString() string {
	return fmt.Sprintf("provider.ChargeRequest{Reference:%q, Amount:%d, Currency:%q, Source:%q, AuthorizeOnly:%t}", r.Reference, r.Amount, r.Currency, redacted, r.AuthorizeOnly)
}

// LogValue implements slog.LogValuer, leaving the source out.
func (r ChargeRequest) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("reference", r.Reference),
		slog.Int64("amount", r.Amount),
		slog.String("currency", r.Currency),
		slog.Bool("authorize_only", r.AuthorizeOnly),
	)
}

// LookupRequest asks what became of a charge, carrying what an adapter
// that looks up by replaying the original request needs (the stripe
// adapter replays it while Stripe still holds the idempotency key): the
// original request, Source included, and when its reference was first
// sent. Printing or logging it redacts the source, as for ChargeRequest.
type LookupRequest struct {
	ChargeRequest
	// FirstSent is at or before the reference's first send; an adapter
	// measures its DedupWindow from it.
	FirstSent time.Time
}

// RefundRequest asks the provider to refund Amount (in minor units of
// Currency) of the charge it knows as Charge. Reference is the refund's
// own idempotency key, never the charge's. Command and Row name the
// refund's command and row, as for ChargeRequest, and are left out of
// our provider API.
type RefundRequest struct {
	Reference string `json:"reference"`
	Charge    string `json:"charge"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Command   string `json:"-"`
	Row       string `json:"-"`
}

// PaymentRequest asks the provider to capture or cancel the authorization
// it knows as Charge (the ChargeID an authorize-only charge answered).
// Reference is ours, derived from the charge and the operation, so the
// provider deduplicates a re-sent capture or cancel. Amount is what a
// capture takes, at most the amount authorized; 0 takes all of it. A
// cancel sends none.
type PaymentRequest struct {
	Reference string
	Charge    string
	Amount    int64
}

// Result is the provider's answer for one reference: a charge's, a
// refund's (StatusRefunded, or StatusDeclined for one that failed), or a
// capture's, a cancel's or a payment's state.
type Result struct {
	Status      Status `json:"status"`
	Reference   string `json:"reference,omitempty"`
	ChargeID    string `json:"id,omitempty"` // the provider's id for what it did: "pc_…", or a refund's "rf_…"
	DeclineCode string `json:"decline_code,omitempty"`
	// Amount is what a capture's or a state's answer says the payment
	// took (StatusCharged) or holds (StatusAuthorized).
	Amount int64 `json:"amount,omitempty"`
}

// StatusError is the cause, wrapped together with a sentinel error, when the
// provider answers with an HTTP status that is not a result. Retrieve it with
// errors.As.
type StatusError struct {
	StatusCode int
}

// Unauthorized reports whether err is the provider refusing the client's
// secret (401) with the proof that it did not act on the request: not the
// answer to a re-send, which may be another request's.
func Unauthorized(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusUnauthorized && !errors.Is(err, ErrAmbiguous)
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}
