// Package charge provides the charge service: creating a card charge at
// most once per customer intent, reading charges back, and resolving
// charges whose outcome was left unknown, by the reconciler's lookup or by
// the provider's own notification (a webhook, Notify), all on top of
// pkg/idem.
//
// The intent's identity is the client's Idempotency-Key, carried as a
// CommandID that every entry point requires. The provider reference and
// the charge id are derived from the scoped key and the record's creation,
// so every re-execution of one intent, by a retry or by the reconciler,
// reaches the provider's deduplication and names the same charge, and a
// key reused after its retention names a new one.
//
// The service knows nothing of HTTP: it returns typed outcomes (Result),
// which internal/charge/httpapi renders, and it stores the answers that
// package's Answers build.
package charge
