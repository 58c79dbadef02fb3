// Package model provides the randomized model-based test of the whole charge
// path: the charge handler, the idempotency store, the sweep over stuck
// leases and the reconciler, on the DynamoDB/SQS emulator with the provider
// simulator, under random interleavings of client retries, concurrent
// duplicates, crashes, lease expiry, provider faults and DynamoDB faults.
//
// The package holds tests only. `make test` runs 200 random histories and
// `make soak` runs 5,000; a failure prints the rapid seed and the shrunk
// sequence of steps that reproduces it.
package model
