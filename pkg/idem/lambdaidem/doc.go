// Package lambdaidem wraps AWS Lambda handlers with pkg/idem. HTTP wraps
// an API Gateway HTTP API handler (payload 2.0), REST a REST API handler,
// and SQS an SQS batch handler. A handler runs at most once per intent.
// Its business writes commit with the idempotency record, in one
// transaction. Sweep is the handler of the scheduled function that
// recovers the commands whose attempt died.
//
// For APIs, the key comes from the Idempotency-Key header by default. The
// tenant is the authorizer's principal, and may be any printable text
// without '#' (an Auth0 "auth0|…" subject, say). The default fingerprint,
// FingerprintRequest, covers the route, the method, the path parameters
// and the canonical JSON body. So one key sent with one body to two
// orders is refused, not answered with the first order. Options changes
// each of these, and adds a hook on replays.
//
// The record keeps the request as its Intent, for a Resolver: an [Intent]
// in JSON (route, method, path, body), never a header or the query string.
// Options.Intent changes it. For SQS, the Intent is the message body.
//
// A retry gets the stored response, with Idempotent-Replayed: true.
// Idempotency-Expires, when the store gives it, says until when the key
// deduplicates. The contract's refusals are answered as
// application/problem+json (RFC 9457). Their types are these slugs after
// Options.ProblemBase:
//
//	status  type                     when
//	400     invalid-idempotency-key  the key is missing or invalid
//	400     invalid-request          the request cannot be fingerprinted (by default: its body is not one valid JSON value)
//	401     unauthorized             no usable tenant
//	413     request-too-large        the request's intent is over 190 KiB: nothing was stored
//	409     request-in-progress      another attempt holds the key (idem.ErrInFlight), or ended without an outcome (Retry-After)
//	422     idempotency-key-reused   the key was used with another request (idem.ErrMismatch)
//	500     internal-error           the handler failed after settling
//	503     service-unavailable      the store refused the claim (idem.ErrUnavailable): this request did nothing (Retry-After)
//	503     outcome-pending          the outcome is not known yet (Retry-After; the detail says what resolves it, and when)
//
// The middleware tests the store's errors with errors.Is, so a custom
// Backend may return the plain sentinels. The times of the typed errors
// are used when they are set. Only a claim refused with idem.ErrUnavailable
// proves that this request did nothing; an earlier one with the key may
// have, so the answer asks for a retry with it. Any other store error
// leaves the claim unknown: the answer is outcome-pending.
//
// Options.Migration lets an API adopt the key before its callers send
// it. A request without one runs unprotected, and its answer carries a
// Deprecation header.
//
// For SQS, each record is an intent keyed by its message id, a message
// attribute or a JSON field of its body (the inbox pattern). It is
// fingerprinted by its body or some members of it. The records that need
// another delivery are reported in BatchItemFailures.
//
// This package does not import the SQS SDK, so an HTTP-only user does not
// download it. To hold back a message whose key is held, until its lease
// ends, wire SQSOptions.Visibility to your SQS client:
//
//	o.Visibility = func(ctx context.Context, c lambdaidem.VisibilityChange) error {
//		_, err := client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &c.QueueURL, ReceiptHandle: &c.ReceiptHandle, VisibilityTimeout: c.VisibilityTimeout})
//		return err
//	}
package lambdaidem
