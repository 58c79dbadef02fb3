// Package lambdaidem wraps AWS Lambda handlers with pkg/idem: API Gateway
// HTTP APIs (payload 2.0, HTTP) and REST APIs (REST), and SQS batches
// (SQS). A handler runs at most once per intent, and its business writes
// are committed with the idempotency record in one transaction.
//
// For APIs, the key comes from a header (Idempotency-Key), the tenant
// from the authorizer, the fingerprint from the canonical JSON body. A
// retry gets the stored response with Idempotent-Replayed: true; the
// idempotency contract's refusals are answered as application/problem+json
// (RFC 9457), the types those of the chargeonce API:
//
//	status  type (after ProblemBase)   when
//	400     invalid-idempotency-key    the key header is missing or invalid
//	400     invalid-request            the body is not one valid JSON value
//	401     unauthorized               no usable tenant in the authorizer context
//	409     request-in-progress        another attempt holds the key (Retry-After)
//	422     idempotency-key-reused     the key was used with another body
//	500     internal-error             the handler failed after settling
//	503     service-unavailable        the store failed; nothing ran (Retry-After)
//	503     outcome-pending            the outcome is not known yet (Retry-After)
//
// For SQS, each record is an intent keyed by its message id, a message
// attribute or a JSON field of its body (the inbox pattern); the records
// that need another delivery are reported in BatchItemFailures.
package lambdaidem
