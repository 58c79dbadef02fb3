// Package dynamostore provides an idem.Backend on one DynamoDB table.
//
// The store never loads AWS configuration: it takes a [DynamoDBAPI] (a
// *dynamodb.Client) and [Options], among them the clock and the random
// source of lease tokens.
//
//	cfg.APIOptions = append(cfg.APIOptions, dynamostore.GuardRequestBodies)
//	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "idempotency")
//
// [GuardRequestBodies] keeps the SDK from resending a call whose answer
// net/http dropped.
//
// [TableInput] is the table's CreateTable request and [TTLInput] its
// UpdateTimeToLive request, with the default names. The layout options
// (KeyAttribute, KeyPrefix, SortKeyAttribute, SortKeyValue,
// PartitionKeyValue, TTLAttribute, StuckLeaseIndex, LeaseShardAttribute,
// LeaseExpiresAtAttribute, ScanStuckLeases) put the records in a table you
// already have; [Store.TableInput] and [Store.TTLInput] follow them.
// [Store.IndexInput] adds the stuck-lease index to such a table. pkg/idem's docs/tables.md has the
// layouts, the IAM policy and the CloudFormation. [Store.Decode] reads a
// record from an item as a Scan or DynamoDB Streams hands it over.
//
// # Calls
//
// Begin is a single PutItem conditioned on the key being absent or past
// retention. On failure DynamoDB returns the existing item, so the caller
// learns whether to replay, wait or refuse without a second call. A put
// DynamoDB did not answer may have landed: Begin returns
// *idem.UnknownClaimError. Commit is a single TransactWriteItems holding
// the caller's business writes and the record's move to SUCCEEDED, so a
// crash can never leave one without the other. Every write a lease holder
// makes recognises itself: when the SDK retries a call whose answer was
// lost, the call reports success instead of a lost lease.
//
// # Regions
//
// In a global table that replicates only eventually (MREC), give each
// Region's store Options.Region. Give them one [Ledger], on a table in
// multi-Region strong consistency. Begin then reads the record
// (GetItem). A fresh claim goes to the Ledger (PutItem) before the
// record's PutItem. That is three calls where one Region makes one. A
// take-over of another Region's record waits until the Ledger yields
// that Region.
//
// Errors are the sentinels and typed errors of package idem. SDK errors
// of a DynamoDB that cannot do the request now, or cannot be heard, wrap
// idem.ErrUnavailable; see [AsUnavailable]. [Attempts] tells a write that
// never reached DynamoDB from one that may have landed.
//
// # Record layout
//
// A record is one item. Its attributes other than the key and the index
// have short names, since every write pays for the names' bytes: a first
// charge of chargeonce's service stores 493 B (604 B with spelled-out
// names).
//
//	Attribute         Type  Holds
//	pk                S     Options.KeyPrefix + Key.String(), or Options.PartitionKeyValue (Options.KeyAttribute renames it)
//	(sort key)        S     only with Options.SortKeyAttribute: Options.SortKeyValue, or the key under a PartitionKeyValue
//	st                S     the Status
//	fp                B     the Fingerprint's 32 bytes (Record.Fingerprint is its hex form)
//	ct                N     CreatedAt, epoch milliseconds
//	tok               S     the lease token: 128 random bits, unpadded URL-safe base64
//	in                B     the intent Begin stored
//	lease_shard       N     IN_FLIGHT only: the stuck-lease index's partition key (Options.LeaseShardAttribute renames it)
//	lease_expires_at  N     IN_FLIGHT only: the lease's end in epoch milliseconds, the index's sort key (Options.LeaseExpiresAtAttribute renames it)
//	ad                N     IN_FLIGHT only: AttemptDeadline, epoch milliseconds
//	attempts          N     take-overs so far, absent before the first (projected into the index)
//	qu                N     IN_FLIGHT only, and only while marked: a queued recovery's mark (MarkQueued), epoch milliseconds
//	qr                N     with qu only, once renewed: how long its message renewed it (RenewQueued), epoch milliseconds
//	expires_at        N     settled only: end of retention in epoch seconds, the TTL attribute (Options.TTLAttribute renames it)
//	rs, rh, rb        N,M,B terminal only: the response's status, headers and body
//	rz                BOOL  terminal only, and only when rb is gzipped (bodies over Options.CompressAbove)
//	rg                S     only with Options.Region: the Region whose store last took a lease (Record.Region)
//
// While IN_FLIGHT, a record carries its shard and its lease's end: the
// keys of the sparse stuck-lease index that [Store.StuckLeases] queries.
//
// The layout changed before v1 (to these names from status, fingerprint,
// created_at, lease_token, intent, attempt_deadline and resp_*): a store
// does not read records of the earlier layout. Let them expire, or start
// on a new table.
package dynamostore
