// Package model provides the randomized model-based test of the whole charge
// path: the charge handler, the idempotency store, the sweep over stuck
// leases and the reconciler, on the DynamoDB/SQS emulator with the provider
// simulator, under random interleavings of client retries, concurrent
// duplicates, crashes, lease expiry, retention passing and key reuse, a
// provider that charges after it said "not found" or timed out, provider
// outages, DynamoDB refusals and lost answers, and crashed owners coming
// back to write with stale leases.
//
// TestChargePathModelStripe runs the same model with PROVIDER=stripe: the
// Stripe adapter on the stateful Stripe simulator (stripesim), whose search
// lags by an hour, with Stripe's test PaymentMethods as sources and an
// outage that answers 503. There the reconciler replays requests, rolls
// forward those that never arrived, and parks a command older than
// Stripe's key window that Stripe has no charge for: the one end state
// besides SUCCEEDED, FAILED_PERMANENT and RELEASED the model accepts.
//
// The files follow the model's concerns. env_test.go builds the stack:
// tables, queue, provider simulators and the clock. faults_test.go holds
// what a history injects, actions_test.go what its clients, clock, sweeper
// and reconciler do. invariants_test.go holds the checks along the way and
// at the end. model_test.go holds the entry points and the history loop. A
// new operation declares its weighted actions and its invariant in a file
// of its own, and adds them to the lists in model_test.go.
//
// The package holds tests only. `make test` runs 1,000 random histories
// and 200 in Stripe mode, and `make soak` runs 20,000; a failure prints
// the rapid seed and the shrunk sequence of steps that reproduces it.
package model
