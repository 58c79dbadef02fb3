// Package charge is the charge service. It creates a card charge at most
// once per intent, refunds it, and captures or cancels an authorization.
// It runs on pkg/idem and knows nothing of HTTP: internal/charge/httpapi
// renders its typed results.
//
// What each file holds:
//   - service.go: the Service, its Config and the dependencies it takes.
//   - operation.go: the seam every keyed operation implements, its registry,
//     and the keys that bypass it.
//   - command.go: the path every keyed command takes (run).
//   - create.go, refund.go: the two keyed operations.
//   - moves.go: captures and cancels, which set a state and need no key.
//   - read.go: reads of a charge, a refund and a page of refunds.
//   - reconcile.go, notify.go, operator.go: settling an unknown outcome.
//   - table.go, table_refunds.go, table_moves.go: the charges table.
//   - timed.go: the store's calls, timed into the metrics and traced.
//   - domain.go, currency.go, parse.go, outcome.go: types, currencies,
//     request parsers, outcomes.
//
// docs/contract.md says what each path answers. docs/architecture.md
// says how to add an operation.
package charge
