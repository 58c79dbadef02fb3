// Package idem provides an idempotency store for AWS Lambda on DynamoDB:
// one customer intent, at most one effect, and every retry gets the
// original answer back.
//
// A command is named by a Key (tenant, operation and the client's
// idempotency key) and its request by a Fingerprint. Its record moves
// through this lifecycle, and the store refuses every other transition:
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
// leaving IN_FLIGHT because a timer ran out. An expired lease is resolved
// by whoever takes it over checking whether the effect happened (for a
// payment, asking the provider), then committing, failing or releasing.
//
// Begin is a single PutItem conditioned on the key being absent or past
// retention; on failure DynamoDB returns the existing item, so the caller
// learns whether to replay, wait or refuse without a second call. A put
// DynamoDB did not answer with a verdict may have landed: Begin returns
// *UnknownClaimError, and the caller must not say nothing happened. Commit is
// a single TransactWriteItems holding the caller's business writes and the
// record's move to SUCCEEDED, so a crash can never leave one without the
// other. While IN_FLIGHT, a record carries a shard and its lease expiry,
// the keys of the sparse stuck-lease index that StuckLeases queries.
//
// Every write a lease holder makes recognises itself: when the SDK retries
// a call whose first answer was lost, the record already shows the
// holder's token with the intended state, and the call reports success
// instead of a lost lease.
//
// # Retention
//
//	Status            expires_at (DynamoDB TTL)
//	IN_FLIGHT         none: TTL never deletes it; TakeOver resolves it at any age
//	SUCCEEDED         end of the settling lease + Options.Retention
//	FAILED_PERMANENT  end of the settling lease + Options.Retention
//	RELEASED          CreatedAt + Options.ReleaseRetention, however often released (the fingerprint is kept until then)
//
// TTL deletion is lazy, so the store treats a record as absent from the
// second its expiry names (expires_at <= now), whether or not DynamoDB has
// deleted it yet; memstore and the replay cache use the same rule. A
// release does not restart retention: a reference derived from (Key,
// CreatedAt) must not stay re-sendable for longer than the effect's own
// deduplication lasts. After retention a
// key names a new command: its CreatedAt differs, and so does anything
// the caller derives from (Key, CreatedAt).
//
// # Record layout
//
// A record is one item. Its attributes other than the key and the index
// have short names, since every write pays for the names' bytes: a first
// charge of this repository's service stores 493 B (it was 604 B with
// spelled-out names, a hex fingerprint and a gzip flag on every answer).
//
//	Attribute         Type  Holds
//	pk                S     Options.KeyPrefix + Key.String(), or Options.PartitionKeyValue (Options.KeyAttribute renames it)
//	(sort key)        S     only with Options.SortKeyAttribute: Options.SortKeyValue, or the key under a PartitionKeyValue
//	st                S     the Status
//	fp                B     the Fingerprint's 32 bytes (Record.Fingerprint is its hex form)
//	ct                N     CreatedAt, epoch milliseconds
//	tok               S     the lease token: 128 random bits, unpadded URL-safe base64
//	in                B     the intent Begin stored
//	lease_shard       N     IN_FLIGHT only: the stuck-lease index's partition key
//	lease_expires_at  N     IN_FLIGHT only: the lease's end in epoch milliseconds, the index's sort key
//	ad                N     IN_FLIGHT only: AttemptDeadline, epoch milliseconds
//	attempts          N     take-overs so far, absent before the first (projected into the index)
//	expires_at        N     settled only: end of retention in epoch seconds, the TTL attribute (Options.TTLAttribute renames it)
//	rs, rh, rb        N,M,B terminal only: the response's status, headers and body
//	rz                BOOL  terminal only, and only when rb is gzipped (bodies over Options.CompressAbove)
//
// The layout changed before 1.0 (to these names from status, fingerprint,
// created_at, lease_token, intent, attempt_deadline and resp_*): a store
// does not read records of the earlier layout. Let them expire, or start
// on a new table.
//
// The store never loads AWS configuration: it takes any DynamoDBAPI (a
// *dynamodb.Client) and options, among them the clock and the random
// source of lease tokens. The layout options (KeyAttribute, KeyPrefix,
// SortKeyAttribute, SortKeyValue, PartitionKeyValue, TTLAttribute,
// StuckLeaseIndex, ScanStuckLeases) put the records in an existing table;
// Store.TableInput and Store.TTLInput follow them. The README's "Existing
// tables" has the layouts, the IAM policy and the CloudFormation.
//
// # Three ways to use it
//
// One call for an operation: Do claims the key, runs the function at most
// once per intent and settles the record as the function's Outcome says.
// The business writes of a Succeeded outcome commit in the record's
// transaction.
//
//	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "idempotency")
//	...
//	key, err := idem.NewKey(tenant, "create-charge", clientKey)
//	fp, err := idem.FingerprintJSON(body)
//	res, err := idem.Do(ctx, store, key, fp, body, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
//		ch, err := provider.Charge(ctx, reference(l.Key, l.CreatedAt), amount)
//		switch {
//		case errors.Is(err, provider.ErrRefused): // it did not act
//			return idem.NotApplied(unavailable), nil
//		case err != nil: // it may have acted: leave it to the reconciler
//			return idem.Unknown(pending), err
//		case ch.Declined:
//			return idem.Failed(declined(ch)), nil
//		}
//		return idem.Succeeded(created(ch), putChargeRow(ch)), nil
//	}, func(o *idem.DoOptions) { o.Wait = 2 * time.Second })
//	var inflight *idem.InFlightError
//	var unknown *idem.UnknownClaimError
//	switch {
//	case errors.As(err, &inflight): // 409, Retry-After from inflight.LeaseExpiresAt
//	case errors.Is(err, idem.ErrMismatch): // 422
//	case err != nil && res.Lease != nil: // ran, not settled: IN_FLIGHT until Sweep or Recover resolves it
//	case errors.As(err, &unknown): // the claim may have landed: "pending", retry with the key
//	case err != nil: // nothing ran: 503, retry
//	default: // answer res.Response; res.Replayed says it is a replay
//	}
//
// A function that returns an error, panics or outlives its lease leaves the
// record IN_FLIGHT, and every retry gets *InFlightError until the command
// is recovered: Recover (one key) and Sweep (every stuck lease) take the
// lease over and settle the command as a Resolver says, and
// ReleaseLocalEffect is the resolver for an effect that is only the
// business writes of Succeeded. README.md's Recovery section says which to
// use when.
//
// HTTP middleware (package lambdaidem): by default the key from the
// Idempotency-Key header, the tenant from the authorizer, the fingerprint
// from the canonical JSON body, each replaceable by an option; replays
// carry Idempotent-Replayed: true, and the contract's refusals are
// problem+json (409, 422, 400).
//
//	create := func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
//		order, err := newOrder(l.Key, l.CreatedAt, req.Body)
//		if err != nil {
//			return idem.Failed(badRequest(err)), nil
//		}
//		return idem.Succeeded(created(order), putOrderRow(order)), nil
//	}
//	lambda.Start(lambdaidem.HTTP(store, "create-order", create, func(o *lambdaidem.Options) {
//		o.Tenant = lambdaidem.TenantFromJWTClaim("tenant_id")
//	}))
//
// SQS middleware (package lambdaidem), the inbox pattern: each message is
// processed at most once per key, its writes commit with its record, and
// the messages to redeliver come back in BatchItemFailures.
//
//	fulfil := func(ctx context.Context, msg events.SQSMessage, l *idem.Lease) (idem.Outcome, error) {
//		shipment, err := ship(ctx, msg.Body)
//		if err != nil {
//			return idem.NotApplied(idem.Response{}), err // redelivered, run again
//		}
//		return idem.Succeeded(idem.Response{}, putShipmentRow(shipment)), nil
//	}
//	lambda.Start(lambdaidem.SQS(store, "fulfil-order", fulfil, func(o *lambdaidem.SQSOptions) {
//		o.Key = lambdaidem.KeyFromAttribute("order-id")
//	}))
//
// Tests use the in-memory store of package memstore, which keeps the same
// contract (package idemtest's RunConformance checks both), and an
// optional ReplayCache answers warm replays from process memory.
package idem
