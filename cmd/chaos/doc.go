// Command chaos runs the local stack behind Toxiproxy. It checks that the
// stack's answers stay true while DynamoDB, SQS and the provider fail.
//
// It needs the emulator's endpoints in the environment (make chaos runs it
// under scripts/with-emulator.sh), all on loopback. It puts a Toxiproxy
// proxy, run in this process, in front of DynamoDB, SQS and the provider
// simulator. It starts the local stack (-stack, cmd/localstack) with its
// DynamoDB, SQS and provider behind those proxies; Secrets Manager is
// reached directly.
//
// For -duration it sends charges, authorizations, refunds, captures and
// cancels: -rate new intents a second. pkg/client retries each with its
// command id. Meanwhile every proxy in turn cuts, delays, resets or
// truncates its connections for a few seconds at a time. The last
// -outage, DynamoDB fails instead. Then the proxies heal. The clients go
// on until each intent has a final answer. The sweeper and the
// reconciler settle what was left in flight. A client told only that
// nothing was done may give up there.
//
// It then checks the provider's ledger and the tables:
//
//   - at most one effect per intent;
//   - every answer true: an intent answered done was done, and one told
//     that nothing was done has no effect;
//   - every stored answer replayed byte for byte, during the run and
//     once more after it;
//   - nothing left in flight, and every intent answered;
//   - every charge as the ledger has it: status, amounts, refunds;
//   - no 500 answer, the service's or the gateway's.
//
// It prints its figures and writes them to -out.json, the stack's log to
// -out-stack.log. It exits 1 if a check failed.
//
// Files: run.go has the flags and the run's steps; proxies.go Toxiproxy
// and the faults; stack.go the local stack and what its log tells;
// load.go the intents and their clients; check.go the checks; report.go
// the figures.
package main
