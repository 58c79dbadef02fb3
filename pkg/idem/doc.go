// Package idem provides idempotency for AWS Lambda on DynamoDB: one
// customer intent, at most one effect, and every retry gets the original
// answer back.
//
// A command is named by a [Key] (tenant, operation and the caller's
// idempotency key), and its request by a [Fingerprint]. [Do] and [DoJSON]
// run a function at most once per command, on any [Backend]: package
// dynamostore keeps records in DynamoDB, package memstore in memory.
//
//	store := memstore.New() // on DynamoDB: dynamostore.New(dynamodb.NewFromConfig(cfg), "idempotency")
//	key, err := idem.NewKey("acme", "send-invoice", "order-42")
//	...
//	invoice, err := idem.DoJSON(ctx, store, key, req, func(ctx context.Context, l *idem.Lease) (string, error) {
//		return sendInvoice(ctx, req) // runs once; a retry gets its result
//	})
//
// # Outcomes
//
// Do's function returns an [Outcome]: [Succeeded] commits the business
// writes in one transaction with the record, [Failed] stores a refusal,
// [NotApplied] releases the key for a retry, and [Unknown] leaves the
// record IN_FLIGHT. The zero Outcome is Unknown, so an error alone never
// frees a key. Do returns a [Result].
//
// # Lifecycle
//
// A command's [Record] moves through these states, and every Backend
// refuses any other transition:
//
//	From       On                         To                Guard
//	ABSENT     Begin                      IN_FLIGHT         conditional put wins (no read first)
//	IN_FLIGHT  Commit by the lease owner  SUCCEEDED         fenced by the lease token, one transaction with the effect
//	IN_FLIGHT  Fail by the lease owner    FAILED_PERMANENT  fenced by the lease token
//	IN_FLIGHT  Release by the lease owner RELEASED          fenced; only when the effect verifiably did not happen
//	IN_FLIGHT  Heartbeat, Postpone        IN_FLIGHT         fenced; the lease moves, the owner keeps it
//	IN_FLIGHT  TakeOver                   IN_FLIGHT         lease expired; new token, the old one stops working
//	IN_FLIGHT  Preempt                    IN_FLIGHT         any lease, for a caller that knows the effect's outcome; new token
//	RELEASED   Preempt                    IN_FLIGHT         within retention, for a caller with proof the effect happened after all
//	IN_FLIGHT  Begin (same request)       IN_FLIGHT         *InFlightError: wait or answer "in progress"
//	RELEASED   Begin (same request)       IN_FLIGHT         same CreatedAt, so the same derived references
//	terminal   Begin (same request)       terminal          the stored response is replayed
//	any        Begin (other request)      unchanged         ErrMismatch, nothing replayed
//	settled    retention ends             ABSENT            the next Begin is a new command, with a new CreatedAt
//
// Forbidden, and refused: completing without the current lease token (a
// second attempt's effect), reopening SUCCEEDED or FAILED_PERMANENT, and
// leaving IN_FLIGHT because a timer ran out.
//
// # Regions
//
// A table that replicates between Regions only eventually needs a
// [Ledger]. Each Region's store claims a command there, strongly
// consistently, before it writes the record. A Region may fail before
// its records replicate. Its claims stay in the Ledger. Another Region
// may not claim them afresh: a new CreatedAt means a new reference, and
// a second effect. Nor may it write over them. It gets
// [ErrClaimedElsewhere] until the Ledger yields the failed Region.
//
// # Retention
//
//	Status            Expires
//	IN_FLIGHT         never: TakeOver resolves it at any age
//	SUCCEEDED         end of the settling lease + Retention
//	FAILED_PERMANENT  end of the settling lease + Retention
//	RELEASED          CreatedAt + ReleaseRetention, however often released (the fingerprint is kept until then)
//
// A record counts as absent from the second its expiry names, whether or
// not DynamoDB's TTL has deleted it yet. A release does not restart
// retention: a reference derived from (Key, CreatedAt) must not stay
// re-sendable longer than the effect's own deduplication lasts. After
// retention a key names a new command, with a new CreatedAt.
//
// # Recovery
//
// A function that returns an error, panics or outlives its lease leaves
// the record IN_FLIGHT. Every retry gets *InFlightError until the command
// is recovered. [Sweep] (every stuck lease) and [Recover] (one key) take
// the lease over and settle the command as a [Resolver] says. A resolver
// of a DoJSON command reads the request from [Lease].Intent and settles
// with [SucceededJSON]. [ReleaseLocalEffect] is the resolver for an
// effect that is only the business writes of Succeeded. [ByOperation]
// gives each operation of a table its own resolver, and [Reference] the
// provider's reference every attempt sends.
//
// # Time
//
// Every function of this package reads time from [Backend].Now, the
// store's clock. A test gives its clock to the store alone.
//
// Package lambdaidem wraps Lambda handlers (API Gateway and SQS), and
// package idemtest checks a Backend against the contract. The README and
// its docs directory have the rest: tables and IAM, recovery, the
// middleware's options, and a comparison with Powertools.
package idem
