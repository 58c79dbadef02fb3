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
//	IN_FLIGHT  Release by the lease owner ABSENT            fenced; only when the effect verifiably did not happen
//	IN_FLIGHT  TakeOver                   IN_FLIGHT         lease expired; new token, the old one stops working
//	IN_FLIGHT  Begin (same request)       IN_FLIGHT         *InFlightError: wait or answer "in progress"
//	terminal   Begin (same request)       terminal          the stored response is replayed
//	any        Begin (other request)      unchanged         ErrFingerprintMismatch, nothing replayed
//
// Forbidden, and refused: completing without the current lease token (a
// second attempt's effect), reopening SUCCEEDED or FAILED_PERMANENT, and
// leaving IN_FLIGHT because a timer ran out. An expired lease is resolved
// by whoever takes it over checking whether the effect happened (for a
// payment, asking the provider), then committing, failing or releasing.
//
// Begin is a single PutItem conditioned on the key being absent or past
// retention; on failure DynamoDB returns the existing item, so the caller
// learns whether to replay, wait or refuse without a second call. Commit is
// a single TransactWriteItems holding the caller's business writes and the
// record's move to SUCCEEDED, so a crash can never leave one without the
// other. While IN_FLIGHT, a record carries a shard and its lease expiry,
// the keys of the sparse stuck-lease index that StuckLeases queries.
//
// Records expire after Options.Retention (DynamoDB TTL on AttrExpiresAt).
// TTL deletion is lazy, so the store treats a record past its expiry as
// absent whether or not DynamoDB has deleted it yet.
//
// The store never loads AWS configuration: it takes any DynamoDBAPI (a
// *dynamodb.Client) and options, among them the clock and the random
// source of lease tokens.
package idem
