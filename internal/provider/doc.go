// Package provider provides the contract every card provider adapter keeps,
// the wire types, and an HTTP client for our own provider API (the one
// providersim simulates).
//
// # The contract
//
// The charge path (internal/charge) calls an adapter with three methods:
// Charge, Lookup and Guarantees. Refunds add two more: Refund and
// LookupRefund (see Refunds below). Authorizations add Capture, Cancel
// and State (see Authorizations below). An adapter for any provider, ours or a
// real one such as Stripe (package stripe), must keep these promises; the
// suite in package providertest checks them against every adapter.
//
// Deduplication. Every charge carries a caller-chosen Reference. Within the
// adapter's DedupWindow a reference is charged at most once, however many
// times and however concurrently it is sent: a later send answers the first
// send's result (the same ChargeID, the same decline) or an error, never a
// second charge. A zero DedupWindow means for ever. Past the window a
// reference sent again may be charged again: the caller must not re-send a
// reference that old.
//
// Lookup. Lookup(reference) has no side effects. It answers StatusCharged
// or StatusDeclined with the same ChargeID and DeclineCode that Charge
// answered, or StatusNotFound. A "not found" is trustworthy only once the
// adapter's SettleWindow has passed since the last send of the reference
// had to be on its way: before that, a request still travelling inside the
// provider (an edge that timed out while its backend goes on, an index that
// lags) may yet show up. The caller waits out the window before it acts on
// "not found" (internal/charge postpones the key until then).
//
// Errors. A declined card is a result, not an error: Charge answers
// StatusDeclined with a DeclineCode and a nil error. Every error from
// Charge wraps exactly one of:
//
//   - ErrUnavailable: nothing happened. The provider guaranteed it did not
//     process the request (for our API a 503 with the Provider-Not-Processed
//     header, or a 429), or the transport never got a connection for any
//     attempt at it (TraceSend), or the context was done before sending.
//     Safe to retry at once.
//   - ErrRejected: nothing happened, and sending the same request again will
//     not help: the provider refused it as invalid (a 4xx), or the adapter
//     refused it before sending.
//   - ErrAmbiguous: the request may have been processed (a timeout after
//     sending, a connection dropped while waiting for the answer, a dial
//     error after an earlier attempt got a connection, an error answer to
//     a request the transport re-sent after writing it, a 5xx, an unreadable
//     answer, another request for the reference in progress).
//     The outcome is unknown: reconcile with Lookup before the reference is
//     released.
//
// Every Lookup error wraps ErrUnavailable: a lookup has no side effects, so
// "ask again later" is always the right answer.
//
// Secrets. The card source is a secret: no adapter puts it in an error or
// a log record, and ChargeRequest redacts it when printed or logged.
// Providers quote what they were sent in their error messages, so an
// adapter keeps only their codes.
//
// Guarantees. Each adapter declares its DedupWindow and SettleWindow with
// Guarantees(); the charge path reads them instead of assuming.
//
// # Refunds
//
// A RefundRequest names the charge by the provider's id for it: the
// ChargeID that Charge answered. Its Reference is the refund's own, never
// the charge's. A refund keeps the charge's promises, with these
// differences:
//
//   - Deduplication. Within DedupWindow a refund reference refunds at most
//     once, and a later send answers the first result. The same reference
//     with other parameters is refused: it never answers another refund's
//     result.
//   - Amount. A charge's refunds never add up to more than its amount. A
//     refund beyond what is left is ErrRejected and refunds nothing. So is
//     a refund of an unknown or declined charge.
//   - Results. StatusRefunded carries the provider's refund id as
//     ChargeID. StatusDeclined, with a DeclineCode, is a refund the
//     provider accepted and then failed for good. A refund may turn from
//     refunded to declined later; the provider's notifications say so.
//   - Errors wrap the same sentinels, on the same proofs, as Charge's.
//     ErrRejected proves that this send refunded nothing. It proves nothing
//     of an earlier send of the reference that was ambiguous: LookupRefund
//     tells what that one did.
//   - LookupRefund has no side effects. It answers StatusNotFound for a
//     reference never refunded, trustworthy only after SettleWindow. Every
//     error wraps ErrUnavailable.
//
// # Authorizations
//
// A ChargeRequest with AuthorizeOnly holds the amount and does not
// capture it. Its success is StatusAuthorized. Capture and Cancel then set
// the authorization's state. They name it by the provider's id (the
// ChargeID). Each carries a Reference derived from the charge and the
// operation. These operations set a state, so they need no idempotency
// record of ours:
//
//   - Deduplication. A capture or cancel re-sent under its reference
//     answers the first result.
//   - At most once. An authorization is captured at most once and
//     canceled at most once, whatever the references. A capture of a
//     captured charge answers StatusCharged and its Amount. It captures
//     nothing more.
//   - Amount. A capture takes at most the amount authorized; 0 takes all.
//     A capture beyond it is ErrRejected and captures nothing. The rest is
//     released.
//   - Conflicts. A capture of a canceled or expired authorization answers
//     StatusCanceled and captures nothing. A cancel of a captured charge
//     answers StatusCharged and cancels nothing.
//   - Expiry. An authorization the provider held too long (Stripe: seven
//     days) ends as if canceled.
//   - Errors wrap the same sentinels, on the same proofs, as Charge's.
//     ErrUnavailable proves that nothing was captured or canceled. A
//     capture or cancel of an unknown or declined charge is ErrRejected.
//   - State has no side effects. It answers StatusAuthorized (the Amount
//     held), StatusCharged (the Amount taken), StatusCanceled,
//     StatusDeclined or StatusNotFound. Every error wraps ErrUnavailable.
//
// Lookup answers the charge's creation, not its present state. Use State
// for that. A refund takes back only what a capture took.
//
// # The HTTP client
//
// Client talks to our provider API: /v1/charges for charges, /v1/refunds
// for refunds, /v1/payments/{id} for a charge's state, capture and
// cancel. The provider deduplicates for ever (DedupWindow zero) and
// its lookups are authoritative once a travelling request has landed
// (DefaultSettleWindow). The client never retries on its
// own, and it refuses redirects, which would re-send a charge.
package provider
