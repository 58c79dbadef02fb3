// Package bench measures the charge path on the DynamoDB emulator. It holds
// tests and benchmarks only:
//
//   - TestRoundTrips drives the real handler and service, with
//     testkit.CallCounter on the DynamoDB client, through every outcome
//     (first charge, replay, in flight, mismatch, decline, provider
//     unavailable, outcome unknown, reconcile, and a naive handler without
//     idempotency), and asserts and prints the DynamoDB calls, items
//     written and approximate capacity units of each. It runs in make test.
//   - BenchmarkBegin, BenchmarkCommit, BenchmarkHandlerFirstCall,
//     BenchmarkHandlerReplay, BenchmarkNaiveFirstCall and
//     BenchmarkEmulatorPutItem time the store, the handler, a naive handler
//     and the emulator itself in one run, so their ratios are comparable.
//
// make bench runs both and writes the figures into docs/benchmarks.md;
// TestRoundTrips' JSON figures (-roundtrips-json) also feed the capacity
// model, docs/capacity.md (cmd/capacity).
package bench
