// Package model provides the randomized model-based test of the whole
// charge path. It drives the charge handler, the idempotency store, the
// sweep over stuck leases and the reconciler. They run on the
// DynamoDB/SQS emulator with the provider simulator. Histories interleave
// client retries, concurrent duplicates, crashes, lease expiry, retention
// passing and key reuse. The provider may charge after it said "not
// found" or timed out, or be down. DynamoDB refuses requests and loses
// answers, and no answer is 500 internal-error for it. Crashed owners
// come back to write with stale leases.
//
// Refunds run in the same histories. Clients refund the history's
// charges: in part, in full with an empty body, and beyond the amount.
// Distinct keys race on one charge, and one key is retried in turn and
// at once. The faults strike refunds too: providersim's Sim-Fault on
// /v1/refunds, dropped connections, lost transactions and crashes. The
// checks read the provider's own ledger. The provider never refunds a
// command twice, nor a charge beyond its amount. An answer that says
// nothing was refunded stays true, and outcome-pending never says so.
// The provider never refuses a refund: the hold keeps each within what
// the charge has left. Once everything is reconciled, each charge's
// amount_refunded, its refund rows and the provider agree. No hold
// outlives its refund, the charge's refund count is its refund rows,
// and every 201 reads back as answered.
//
// One intent in three authorizes only ("capture": false). Clients
// capture those in full, in part or above the hold, and cancel them.
// They repeat each in turn and at once, and race a capture with a
// cancel. Sim-Fault and dropped connections lose the provider's answer.
// Holds expire: providersim's Expire, or Stripe's seven days on the
// clock. The clock passes attempt deadlines, and the reconciler and the
// sweeper settle moves left in flight. Refunds of uncaptured charges
// must be 409 charge-state-conflict. The provider's ledger is the judge.
// It captures an authorization at most once, within its hold, and
// never both captures and cancels it. Every 200 and every 409 naming a
// settled state agrees with the provider's final state. So does each
// charge once settled, never left capturing or canceling. In the
// simulator's mode, which sends no webhooks, a hold that expired untouched
// may still read requires_capture.
//
// TestChargePathModelStripe runs the same model with PROVIDER=stripe. It
// uses the Stripe adapter on the stateful Stripe simulator (stripesim).
// Its search lags by an hour, Stripe's test PaymentMethods are the
// sources, and an outage answers 503. There the reconciler replays
// requests and rolls forward those that never arrived. It parks a command
// older than Stripe's key window that Stripe has nothing for. That is the
// one end state the model accepts besides SUCCEEDED, FAILED_PERMANENT and
// RELEASED.
//
// Stripe mode turns webhooks on. stripesim signs its events and posts
// them to the charge function's route, behind the local API Gateway. They
// run on while the history takes its next steps. The clock waits for them
// before it moves, and moves on for one that waits on a crashed attempt.
// Stripe gives up on an event after five refusals; the settled history
// delivers it again. A card's issuer fails refunds of pm_card_refundFail.
// It does so at once, later, or after the refund's record has expired.
// Holds expire after Stripe's seven days on the clock, past every
// record's retention. Each event must settle the row it names. Once every
// event is acknowledged and everything reconciled, Stripe is the judge.
// Each charge reads its status and amount, never requires_capture once
// canceled. Each refund reads failed exactly when it failed at Stripe. A
// charge's amount_refunded sums its refunds that did not fail.
//
// The files follow the model's concerns. env_test.go builds the stack:
// tables, queue, provider simulators and the clock. faults_test.go holds
// what a history injects. actions_test.go holds what its clients, clock,
// sweeper and reconciler do. invariants_test.go holds the checks along
// the way and at the end. refunds_test.go holds refunds' actions and
// checks, captures_test.go those of captures and cancels, and
// webhooks_test.go those of Stripe's webhooks.
// model_test.go holds the entry points and the history loop. A new
// operation declares its weighted actions and its invariant in a file of
// its own. It adds them to the lists in model_test.go.
//
// The package holds tests only. `make test` runs 1,000 random histories
// and 200 in Stripe mode. `make soak` runs both modes on fresh seeds for
// ten minutes. A failure prints the rapid seed and the shrunk sequence of
// steps that reproduces it.
package model
