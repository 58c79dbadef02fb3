// Package stripesim provides a stateful, in-memory simulation of the part
// of Stripe's API the stripe adapter uses. It keeps Stripe's idempotency
// semantics. Tests run it in-process (httptest.NewServer(sim)).
//
// stripe-mock checks that requests are well formed but keeps no state; this
// simulator keeps what the contract depends on:
//
//   - Idempotency keys: a request with a known key and the same parameters
//     replays the saved answer. That is its status and body, with
//     Idempotent-Replayed: true. With other parameters it answers 400
//     idempotency_error. While the first request is still executing it
//     answers 409 idempotency_key_in_use. Requests that fail validation or
//     are rate limited save nothing. A key expires KeyWindow after its first
//     use, by the simulator's clock: 24 hours unless Options say otherwise.
//     After that the same request executes again.
//   - Refunds: a PaymentIntent's refunds never take back more than its
//     amount. A refund beyond what is left answers 400 amount_too_large,
//     and one of a fully refunded PaymentIntent 400 charge_already_refunded.
//     Neither saves anything under its key. A refund's key is held as a
//     PaymentIntent's, and its fingerprint names the endpoint: a key first
//     used for a charge is refused as idempotency_error.
//   - Authorizations: capture_method=manual leaves a PaymentIntent in
//     requires_capture, holding its amount. A capture (amount_to_capture,
//     at most amount_capturable) or a cancel runs under idempotency keys
//     as a refund does. A capture or cancel the status forbids answers
//     400 payment_intent_unexpected_state and saves nothing. Seven days
//     (AuthorizationWindow) after its creation, by the simulator's clock,
//     an authorization is canceled with the reason automatic. The
//     simulator notices at its next request. Intent and Ledger count the
//     captures performed.
//   - Search lags: a PaymentIntent shows up in /v1/payment_intents/search
//     only SearchLag after it was created, as Stripe's eventually
//     consistent search does. Retrieving it by id sees it at once.
//
// # API
//
//	POST /v1/payment_intents             amount, currency, payment_method, confirm=true,
//	                                     metadata[...], error_on_requires_action, payment_method_types[],
//	                                     capture_method?
//	GET  /v1/payment_intents/{id}
//	GET  /v1/payment_intents/search      query=metadata['KEY']:'VALUE' (the only form supported)
//	POST /v1/payment_intents/{id}/capture amount_to_capture?
//	POST /v1/payment_intents/{id}/cancel  cancellation_reason?
//	POST /v1/refunds                     payment_intent, amount?, metadata[...]
//	GET  /v1/refunds                     payment_intent?, limit?, starting_after? (newest first)
//
// Every request must carry the configured secret key as a bearer token.
//
// # Test payment methods
//
// The payment_method picks the behaviour, like Stripe's test PaymentMethods:
//
//	pm_card_visa, pm_card_*                 succeeded
//	pm_card_refundFail                      succeeded; its refunds succeed, then fail
//	                                        (failure_reason expired_or_canceled_card)
//	                                        when FailRefunds is called
//	pm_card_chargeDeclined                  402 card_error card_declined, decline_code generic_decline
//	pm_card_chargeDeclinedInsufficientFunds 402 card_error card_declined, decline_code insufficient_funds
//	pm_card_authenticationRequired          requires_action, or with error_on_requires_action
//	                                        402 card_error authentication_required
//	pm_sim_rate_limited                     429 rate_limit, nothing executed or saved
//	pm_sim_api_error                        charges, then answers (and saves) 500 api_error
//	pm_sim_timeout                          charges and saves the answer, then answers nothing
//	                                        until the client gives up (replays answer normally)
//	pm_sim_late                             answers nothing until the client gives up, while the
//	                                        key stays in progress; the charge lands only when
//	                                        Land is called (an edge that timed out while its
//	                                        backend goes on)
//	anything else                           400 resource_missing, "No such PaymentMethod: '…'"
//	                                        (Stripe quotes it: adapters must not pass it on)
//
// A request left unanswered waits at most 30 seconds for its client to give
// up; clients under test should time out sooner.
//
// # Webhooks
//
// With Options.WebhookURL and WebhookSecret set, every PaymentIntent that
// settles raises one event. It settles when it succeeds, or is declined
// with a last payment error, or when a pm_sim_late charge lands. The event
// is payment_intent.succeeded or payment_intent.payment_failed, with the
// PaymentIntent as its object. It is posted from its own goroutine, signed
// as Stripe signs. The header is Stripe-Signature: t=<unix time>,v1=<hex
// HMAC-SHA256 of "<t>.<payload>">. stripe-go's webhook package makes it.
// The event is posted again, signed anew, until it is answered 2xx or has
// had WebhookAttempts tries. The pause between tries starts at WebhookRetry
// and doubles each time. WebhooksDelivered counts the acknowledged events.
// WaitWebhooks waits for the deliveries in progress.
//
// An authorization raises payment_intent.amount_capturable_updated. Its
// capture raises payment_intent.succeeded. Its cancel or expiry raises
// payment_intent.canceled.
//
// A new refund raises refund.created, with the Refund as its object, and
// charge.refunded, with the Charge and its refunds newest first. A refund
// that fails raises refund.updated and refund.failed. Stripe leaves a
// Charge's refunds out since API version 2022-11-15; the simulator keeps
// them, as older versions do. Events go in no promised order, as Stripe's.
package stripesim
