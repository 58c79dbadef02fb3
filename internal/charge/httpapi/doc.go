// Package httpapi is the charge API's HTTP layer. It turns API Gateway
// HTTP API (payload 2.0) events into calls of the charge service, and the
// service's outcomes into answers. It is the one place that knows the
// contract of api/openapi.yaml. That is the routes, statuses, problem types
// and headers (Idempotency-Key, Idempotency-Expires, Idempotent-Replayed,
// Retry-After). It also renders the bodies the service stores (Answers).
// So a replay is byte-identical, whoever settled the command.
// RouteWebhook, Stripe's POST /webhooks/stripe, is the one route without a
// tenant. Its deliveries are verified by signature (a WebhookVerifier)
// instead.
//
// To change an HTTP answer, change answer in problems.go (or Answers for a
// stored one) and api/openapi.yaml together. TestProblemsMatchTheSpec
// holds them to each other. pkg/client's own test holds its mapping to the
// spec.
package httpapi
