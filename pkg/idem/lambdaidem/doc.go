// Package lambdaidem wraps AWS Lambda handlers with pkg/idem: API Gateway
// HTTP APIs (payload 2.0, HTTP) and REST APIs (REST), and SQS batches
// (SQS). A handler runs at most once per intent, and its business writes
// are committed with the idempotency record in one transaction.
//
// For APIs, by default, the key comes from a header (Idempotency-Key),
// the tenant from the authorizer's principal, the fingerprint from the
// canonical JSON body; Options changes each (a key function, a tenant
// from a JWT claim, a Lambda authorizer's context, the IAM caller or a
// constant, a fingerprint of some members of the body) and adds a hook on
// replays. A retry gets the stored response with Idempotent-Replayed:
// true; the idempotency contract's refusals are answered as
// application/problem+json (RFC 9457), their types these slugs after
// Options.ProblemBase (DefaultProblemBase unless set):
//
//	status  type                       when
//	400     invalid-idempotency-key    the key is missing or invalid
//	400     invalid-request            the body cannot be fingerprinted (by default: not one valid JSON value)
//	401     unauthorized               no usable tenant
//	409     request-in-progress        another attempt holds the key, or it ended without an outcome (Retry-After)
//	422     idempotency-key-reused     the key was used with another request
//	500     internal-error             the handler failed after settling
//	503     service-unavailable        the store failed; nothing ran (Retry-After)
//	503     outcome-pending            the outcome is not known yet (Retry-After; the detail says what resolves it, and when)
//
// Options.Migration lets an API adopt the key before its callers send
// it: a request without one runs unprotected and is answered with a
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
