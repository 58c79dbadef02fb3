// Package tracing provides the functions' OpenTelemetry spans: the
// invocation's, the idempotency store's calls, the provider's, and the
// trace context a reconcile message carries from the function that sent
// it to the one that reconciles it.
//
// A nil *Tracer is tracing off, the default: every method returns at
// once, allocating nothing, and no instrumentation is installed on the
// SDK or HTTP clients.
//
// Propagation is W3C Trace Context: the sender puts the traceparent (and
// tracestate, if any) in the message's attributes; a message's span
// continues its sender's trace, and so does the invocation's span when
// its batch is that one message (otherwise the invocation's span is a
// root linked to every message's context).
//
// Span attributes carry outcomes, statuses and counts, never an
// idempotency key, a tenant, a card source or a body.
package tracing
