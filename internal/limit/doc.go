// Package limit holds each tenant to its limits and sheds what can wait.
// It runs before a request's key is claimed, so a refused request stores
// nothing and charges nothing.
//
// limiter.go holds Limiter: a tenant's rate and concurrency. Each
// instance counts them per second, and shares them through the table once
// the tenant is busy there: SyncEvery requests or SyncBusy of handler time.
// Past half a limit the tenant is hot, until HotSpan seconds after. Then its
// first request of a second here is shared as it starts, and each counted
// as it ends. Handler time counts when a request ends. What a hot second
// leaves unshared goes with the next second's share. A share reads the
// span back. Each table call on a request's path waits callTimeout at
// most: past it, the limits fail open. After one times out, only the
// request's last share calls the table, in one write.
// wait.go caps the requests waiting on one key or move: MaxWaiters
// start a window, fleet-wide, counted in the table. The rest answer at
// once. overrides.go reads the operators' per-tenant limits, off the
// request path. table.go is the DynamoDB table of shared counts, waits and
// overrides. shed.go holds Shedder, which sheds reads and refunds while
// the store is throttled.
//
// A tenant spread over many instances, under both thresholds on each, is
// never shared: each instance holds it to the limits alone. Each admits up
// to SyncEvery of its requests a second. One that ends in the next second
// counts in neither. Every tenant is held so while the table fails, with
// the defaults if no override was read.
//
// docs/capacity.md weighs the shared counts against a per-instance limit,
// says what each costs a charge, and bounds what gets past.
package limit
