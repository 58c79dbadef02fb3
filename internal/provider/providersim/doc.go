// Package providersim provides a stateful simulator of the card provider's
// HTTP API, to run in-process in tests (httptest.NewServer(sim)) or as the
// providersim binary.
//
// Like the real provider it deduplicates charges by reference: a reference
// gets at most one stored result, and every later POST for it answers that
// result, whatever its body says.
//
// It deduplicates refunds by their own reference too. A refund sent again
// answers the first result. The same reference with other parameters is
// refused (422), since the first result would answer for another refund.
// A charge's refunds never add up to more than its amount. A refund beyond
// that, of an unknown or declined charge, or in another currency is
// refused with a 4xx, and refunds nothing.
//
// An authorize-only charge (authorize_only: true) holds its amount:
// status authorized. A capture or a cancel names it by its id. Each is
// deduplicated by its own reference, as a refund is. An authorization is
// captured at most once and canceled at most once, whatever the
// references. A capture under another reference answers the charge's
// state: charged with the amount taken, or canceled. A cancel of a
// captured charge answers charged and cancels nothing. A capture of an
// ended authorization answers canceled and captures nothing. A capture
// beyond the amount authorized is refused. An authorization expires
// AuthorizationTTL after it was made (seven days by default), on the
// simulator's clock. Expire, or its endpoint, ends one at once.
//
// # API
//
//	POST /v1/charges             {"reference","amount","currency","source"}
//	                             -> 200 {"id","reference","status","decline_code"?}
//	GET  /v1/charges/{reference} -> 200 stored result, or 404 {"status":"not_found"}
//	POST /v1/refunds             {"reference","charge","amount","currency"}
//	                             -> 200 {"id":"rf_…","reference","status":"refunded"}
//	GET  /v1/refunds/{reference} -> 200 stored result, or 404 {"status":"not_found"}
//	POST /v1/payments/{id}/capture {"reference","amount"?} (none or 0: all)
//	                             -> 200 {"id","reference","status":"charged"|"canceled","amount"?}
//	POST /v1/payments/{id}/cancel  {"reference"}
//	                             -> 200 {"id","reference","status":"canceled"|"charged","amount"?}
//	GET  /v1/payments/{id}       -> 200 {"id","reference","status","amount"?}: the charge's state
//	                                (authorized, charged, canceled or declined), or 404 not_found
//	POST /v1/authorizations/{id}/expire -> 200 {"id","expired"}: ends an authorization now
//	GET  /v1/ledger              -> what happened to every reference (see Ledger)
//	POST /v1/faults              {"down": true|false} toggles a whole-provider outage
//
// When a secret is configured, every charge, refund, capture, cancel and
// lookup must carry it as a bearer token or gets 401. The ledger, the
// expiry and the fault switch take none. While the provider is down, all
// of those answer 503 with the Provider-Not-Processed header and change
// nothing.
//
// # Test sources
//
// The source field picks the simulated behaviour, like a test card token:
//
//	tok_decline          declined with decline_code card_declined (stored)
//	tok_unavailable_once the reference's first call answers 503 Provider-Not-Processed
//	                     and stores nothing; later calls charge
//	tok_unavailable      every call answers 503 Provider-Not-Processed, nothing stored
//	tok_timeout_once     the reference's first call creates the charge, then the
//	                     connection is closed without a response
//	tok_timeout          as tok_timeout_once, on every call
//	tok_slow             creates the charge, then waits the slow delay before answering
//	                     (the Sim-Delay header, a Go duration, overrides the delay)
//	tok_late_once        the reference's first call is accepted and the connection closed
//	                     unanswered; the charge lands only when Land is called (an edge
//	                     that timed out while the backend goes on). Until then lookups
//	                     answer not_found and further calls 409 (in progress)
//	anything else        charged (tok_visa, by convention)
//
// The Sim-Fault request header (unavailable, timeout or slow) applies the
// matching behaviour to a request whatever its source. It applies to a
// refund, a capture and a cancel the same way: under timeout the
// operation is made, then its answer lost.
package providersim
