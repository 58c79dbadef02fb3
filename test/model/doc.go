// Package model provides the randomized model-based test of the whole charge
// path: the charge handler, the idempotency store, the sweep over stuck
// leases and the reconciler, on the DynamoDB/SQS emulator with the provider
// simulator, under random interleavings of client retries, concurrent
// duplicates, crashes, lease expiry, retention passing and key reuse, a
// provider that charges after it said "not found" or timed out, provider
// outages, DynamoDB refusals and lost answers, and crashed owners coming
// back to write with stale leases.
//
// The package holds tests only. `make test` runs 1,000 random histories
// and `make soak` runs 20,000; a failure prints the rapid seed and the
// shrunk sequence of steps that reproduces it.
package model
