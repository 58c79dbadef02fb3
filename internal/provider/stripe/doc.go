// Package stripe provides a card provider adapter for Stripe, on
// stripe-go, keeping the contract of package provider.
//
// # Charge
//
// A charge is one PaymentIntent, created and confirmed in one call
// (POST /v1/payment_intents with confirm=true): amount in minor units,
// currency in lower case, payment_method the request's Source, which must
// be a PaymentMethod id ("pm_…"; the adapter refuses anything else, and
// never sees card numbers), payment_method_types=card, and our Reference
// both as the Idempotency-Key and as metadata[chargeonce_reference]; the
// request's Command, if any, as metadata[chargeonce_command], and its Row
// as metadata[chargeonce_row], so that a webhook event about the
// PaymentIntent leads back to the command and to its row.
//
// The Result's ChargeID is the PaymentIntent's id ("pi_…"), for charges and
// for declines alike: it exists for every outcome, the idempotency key
// created exactly it, search finds it, and refunds take it. (The charge
// behind it, latest_charge, changes if a PaymentIntent is confirmed again,
// which this adapter never does.)
//
// Outcomes:
//
//   - succeeded: StatusCharged.
//   - a card error (HTTP 402: card_declined, expired_card, incorrect_cvc,
//     …): StatusDeclined with Stripe's decline_code, or its error code
//     when it gives none.
//   - 3-D Secure and other customer actions are out of scope: the adapter
//     sends error_on_requires_action=true, so Stripe fails such a payment
//     with the card error authentication_required, a decline. A
//     PaymentIntent found in requires_action reads the same way.
//   - processing (an asynchronous payment): ErrAmbiguous; the lookup
//     resolves it once Stripe has.
//
// Errors, per the contract:
//
//   - 429 (rate limits, lock timeouts), a request for which no attempt
//     got a connection (provider.TraceSend), or a context done before
//     sending: ErrUnavailable. Stripe executes nothing and saves no
//     idempotent result for these.
//   - 409 idempotency_key_in_use: ErrAmbiguous. This request did nothing,
//     but another one with the same reference is executing.
//   - 400 idempotency_error (the reference was first used with other
//     parameters): ErrRejected wrapping ErrKeyReused. This request charged
//     nothing; the first one may have. It cannot happen while the charge
//     path sends one intent's parameters under one reference.
//   - any other 4xx (invalid parameters, an unknown PaymentMethod, a bad
//     API key): ErrRejected.
//   - 5xx, a connection dropped after sending, a timeout, an unreadable
//     answer: ErrAmbiguous. Stripe saves even a 500 as the key's answer
//     once the endpoint began executing, so nothing is known.
//
// The adapter never retries (stripe-go's own retries are off): the caller
// decides, and the reference keeps every retry idempotent. Go's HTTP
// transport may still re-send a request whose reused connection closed
// before any answer (it treats a request with an Idempotency-Key as
// replayable); to Stripe that is a replay, never a second charge. If that
// re-send cannot dial, Stripe may have executed the first send: the charge
// is ErrAmbiguous, not ErrUnavailable, since a request counts as never
// sent only when no attempt got a connection. Nor does an error answer to
// such a re-send (a 429 or a 401 from Stripe's edge) say anything of the
// first send: it is ErrAmbiguous too (provider.Sent.Resent); only a result
// (a charge, a decline) is taken from it.
//
// Errors carry Stripe's type, code, decline code, parameter name and
// request id (an *Error), never its message: Stripe quotes the request in
// messages ("No such PaymentMethod: 'pm_…'"). For the same reason
// stripe-go's own logging is off; the adapter logs one record per call
// through its Logger, without the source.
//
// # Lookup
//
// Lookup(reference) searches PaymentIntents by metadata and reads each hit
// by id, which is strongly consistent. Stripe's search is eventually
// consistent: "under normal operating conditions, data is searchable in
// less than a minute; occasionally propagation can be up to an hour behind
// during outages". A search miss is therefore answered as not_found but is
// trustworthy only after the settle window below, which the charge path
// waits out. If several PaymentIntents carry the reference (a reference
// re-sent after its key expired), a succeeded one wins.
//
// LookupRequest(provider.LookupRequest) is the surer lookup, the one the
// charge path's reconciler uses: while Stripe still holds the key
// (FirstSent plus DedupWindow, less an hour's margin for clock skew and
// transit) it replays the original request under the same key. The replay
// is authoritative at once: Stripe answers the saved result, or 409 while
// the first request still executes (ErrUnavailable: ask again), or, if the
// first request never reached Stripe, executes it now. That last case
// charges, exactly once, the intent the client asked for, so a replay
// never answers not_found: it rolls the intent forward. A replay needs the
// original parameters, Source included: the charge path keeps the source
// with the intent once CheckSource has found it a PaymentMethod id, so it
// never stores card data. Outside the window, if Stripe reports the key
// reused, or if the replay answers (or replays its saved) server error, it
// falls back to search.
//
// # Refunds
//
// A refund is one Refund (POST /v1/refunds). Its payment_intent is the
// request's Charge, the PaymentIntent id that Charge answered. Its amount
// is in minor units. Our Reference is its Idempotency-Key and its
// metadata[chargeonce_reference]; the Command and Row, if any, are its
// metadata[chargeonce_command] and metadata[chargeonce_row]. Stripe refunds in the PaymentIntent's
// currency, so the request's currency is checked for form and not sent.
//
// Outcomes:
//
//   - succeeded or pending: StatusRefunded, with the Refund's id (re_…).
//     A pending refund counts: Stripe has taken it, and its amount is no
//     longer refundable. A card refund cannot be canceled. Should the
//     issuer return it, its status turns failed and a webhook says so.
//   - failed or canceled: StatusDeclined, with Stripe's failure_reason as
//     the DeclineCode (or the status when it gives none).
//   - requires_action, which card refunds never need: ErrAmbiguous. The
//     lookup answers once Stripe has settled it.
//
// Errors read as a charge's. Stripe refuses a refund beyond what the
// PaymentIntent has left with 400 invalid_request_error
// (charge_already_refunded once nothing is left): ErrRejected, nothing
// refunded. So is a refund of an unknown PaymentIntent, or of one without
// a successful charge. A key Stripe holds for another refund, or for a
// charge, is ErrRejected wrapping ErrKeyReused.
//
// LookupRefund lists the PaymentIntent's refunds
// (GET /v1/refunds?payment_intent=…, every page). It answers the one whose
// metadata carries the reference, or not_found. Stripe documents a lag
// for search, not for lists. A miss still counts only after the settle
// window: a refund Stripe accepted may still be executing. If several
// refunds carry the reference, one that refunds wins, then the newest.
// That happens only to a reference re-sent after its key expired. As for
// a charge, the caller must not send a refund reference older than
// DedupWindow less DedupMargin (Promises.Deduplicates).
//
// # Authorizations
//
// An authorize-only charge is a PaymentIntent created with
// capture_method=manual. Stripe answers requires_capture:
// StatusAuthorized.
//
// Capture posts to /v1/payment_intents/{id}/capture. It sends
// amount_to_capture when the request names an amount. Cancel posts to
// /v1/payment_intents/{id}/cancel. Both send our Reference as the
// Idempotency-Key. A re-send answers the key's saved result. Their
// answers and errors read as a charge's.
//
// Stripe refuses a capture or cancel the PaymentIntent's status forbids:
// 400 payment_intent_unexpected_state. That send changed nothing. The
// adapter then reads the PaymentIntent by id and answers its state:
//
//   - succeeded: StatusCharged with amount_received. A second capture
//     under another key lands here, and captures nothing.
//   - canceled: StatusCanceled. Stripe cancels an authorization it has
//     held seven days (cancellation_reason automatic).
//   - anything else (a declined PaymentIntent): ErrRejected.
//
// If that read fails, the answer is ErrUnavailable: this send changed
// nothing. A capture beyond amount_capturable is 400 amount_too_large:
// ErrRejected.
//
// State reads the PaymentIntent by id (GET /v1/payment_intents/{id}).
// requires_capture is StatusAuthorized with amount_capturable. succeeded
// is StatusCharged with amount_received. canceled is StatusCanceled. A
// declined one reads as Lookup reads it. An unknown id (404
// resource_missing) is StatusNotFound. Reads by id are strongly
// consistent, so no settle window applies.
//
// A lookup by search reads a PaymentIntent's present state. An
// authorization it finds captured reads StatusCharged. One it finds
// canceled reads as a decline, as before. A replay answers the key's
// saved result: StatusAuthorized.
//
// # Guarantees
//
//   - DedupWindow 24h: Stripe keeps an idempotency key at least 24 hours
//     after its first use; a reference re-sent later may charge again.
//   - SettleWindow 65m: the search index may lag up to an hour during
//     outages (SearchLag), plus provider.DefaultSettleWindow for a request
//     Stripe accepted to finish executing after our side gave up.
//
// # Configuration
//
// New takes the secret API key (sk_… or a restricted rk_… key allowed to
// write PaymentIntents and Refunds; publishable keys are refused). In production it
// comes from AWS Secrets Manager, never from the template in clear text;
// the adapter keeps it inside stripe-go's client and never logs it.
//
// # Webhooks
//
// ParseWebhook verifies a webhook delivery's Stripe-Signature with
// stripe-go's webhook package (the endpoint's signing secret, a timestamp
// at most DefaultWebhookTolerance old). It reads payment_intent events
// into the reference, the command and the outcome, read from the
// PaymentIntent as State reads it:
//
//   - payment_intent.succeeded: StatusCharged, with amount_received. It
//     comes after a capture too.
//   - payment_intent.payment_failed: StatusDeclined.
//   - payment_intent.amount_capturable_updated: the PaymentIntent's state
//     as it stands, StatusAuthorized for a new authorization.
//   - payment_intent.canceled: StatusCanceled.
//
// An event whose type and PaymentIntent disagree is refused, like a bad
// signature. The amount_capturable_updated event names an amount, not a
// status, so it is read as it stands.
//
// It reads refund.created, refund.updated and refund.failed from their
// Refund, as LookupRefund reads it. A refund.failed event about a refund
// that did not fail is refused. A charge.refunded event carries the
// Charge: the newest of its refunds that carries our reference is read.
// Since API version 2022-11-15 Stripe leaves a Charge's refunds out. Such
// an event then reads as one about nothing of ours, and the refund events
// tell the outcome.
package stripe
