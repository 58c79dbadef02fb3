// Package sweeper provides the scheduled sweep that finds idempotency
// records stuck in flight and queues them for reconciliation.
//
// A record is stuck when its lease has run out before its attempt completed
// it. The attempt crashed, timed out, or lost its enqueue of a reconcile
// message. The sweeper never resolves a record itself. It never decides
// anything because a timer ran out. It only reads the sparse stuck-lease
// index: pkg/idem's StuckLeases, shard by shard, no Scan. It sends each key
// it finds to the reconcile queue. There the reconciler asks the provider
// what happened. pkg/idem's Sweep would resolve each key in place. Queueing
// them gives the reconciler the queue's concurrency, redeliveries and
// dead-letter queue.
//
// A key is queued once while its message is in flight. The sender marks
// its record (queue.Marker) before it sends, and passes over a key
// already marked. So a run that finds it again adds nothing to the queue
// while the reconciler lags. The handler of the message removes the
// mark. A lost message's mark ends on its own (queue.MarkHold).
//
// A run does bounded work: at most Options.MaxKeys keys. It stops a safety
// margin before its context's deadline. Nothing is lost by stopping early,
// or by a message that could not be sent. An unresolved record stays in the
// index, so the next run finds it again. Each run starts at a shard that
// rotates with the clock's minute. So a run that stops early does not
// always leave the same shards for last.
//
// Every run logs a summary and writes one CloudWatch embedded-metric-format
// line. That is package metrics: namespace chargeonce, dimension
// Function=sweeper. It carries the metrics StuckLeases,
// OldestLeaseAgeSeconds, MaxReconcileAttempts and Queued. Its log's summary
// counts the keys already queued too.
package sweeper
