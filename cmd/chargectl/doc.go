// Command chargectl creates, reads, captures, cancels and refunds charges
// through the chargeonce API with package client, and answers an
// operator's questions about a deployment (chargectl admin).
//
// Usage:
//
//	chargectl create --amount 1500 --currency EUR --source tok_visa [--description TEXT] [--capture=false] [--id ID] [--json]
//	chargectl get [--json] CHARGE_ID
//	chargectl refunds [--json] CHARGE_ID
//	chargectl capture CHARGE_ID [--amount N] [--json]
//	chargectl cancel CHARGE_ID [--json]
//	chargectl refund CHARGE_ID [--amount N] [--reason REASON] [--id ID] [--json]
//	chargectl admin record [--json] TENANT KEY
//	chargectl admin stuck [--json] [--max N]
//	chargectl admin reconcile [--json] TENANT KEY
//	chargectl admin dlq list [--json] [--max N]
//	chargectl admin dlq redrive [--json] [--key TENANT KEY]
//	chargectl admin submit [--json] --tenant TENANT --amount N [--currency CUR] --source TOKEN [--description TEXT] [--id ID]
//	chargectl admin settle [--json] [--yes] (--charged REF | --declined [--decline-code CODE] | --released) TENANT KEY
//	chargectl admin limits list [--json]
//	chargectl admin limits set [--json] [--rate N] [--concurrency N] TENANT
//	chargectl admin limits clear [--json] TENANT
//	chargectl admin audit [--json] [--operation OP] TENANT KEY
//	chargectl admin audit [--json] --charge TENANT CHARGE_ID
//
// create, get, refunds, capture, cancel and refund take --url (default $CHARGEONCE_URL, else http://127.0.0.1:3000)
// and --token (default $CHARGEONCE_TOKEN, else dev:acme, the local stack's
// development token), and --timeout, the budget for all retries.
//
// create and refund mint a command id and print it on stderr before the
// first request, so that an interrupted or failed run can be resumed with
// --id: the resumed run sends the same id and cannot charge, or refund,
// twice. refund refunds all that remains of the charge unless --amount
// says how much; --reason is duplicate, fraudulent or
// requested_by_customer. create --capture=false authorizes only; capture
// then takes all the charge holds, or --amount of it, and cancel releases
// it. capture and cancel take no id: each sets the charge's state, so the
// same command run again is safe and prints the same charge. get shows a
// charge's 10 oldest refunds; refunds lists them all, oldest first, read
// 100 at a time. The result goes to stdout, human-readable, or as one
// JSON value with --json.
//
// The admin commands read the deployment's tables and queues directly, with
// the configuration the functions read: IDEMPOTENCY_TABLE, CHARGES_TABLE,
// LIMITS_TABLE, IDEMPOTENCY_TTL (default 24h), RECONCILE_QUEUE_URL, RECONCILE_DLQ_URL
// (the dead-letter queue, which no function reads), DYNAMODB_ENDPOINT and
// SQS_ENDPOINT (unset: AWS) and the SDK's AWS_* variables; each command
// requires only what it uses. KEY is
// the Idempotency-Key (the command id) of a charge request. record shows a
// key's idempotency record: status, lease owner (a prefix of its lease
// token), lease and record expiry, reconcile attempts, fingerprint prefix
// and the stored answer. stuck lists the stuck-lease index over all shards,
// oldest first. reconcile queues a key for the reconciler now. dlq list
// shows the dead-letter queue's messages and the keys they name, and puts
// them back at once; dlq redrive moves them (or only those of one key) to
// the reconcile queue and says what moved. submit sends a charge request
// to the charge-requests queue (CHARGE_REQUESTS_QUEUE_URL) as the command
// id --id of --tenant (minting an id, printed on stderr, if none is
// given), after checking it as the intake function will: the intake
// charges it once, under the key a POST /charges with that
// Idempotency-Key and body replays. settle settles an IN_FLIGHT key (a
// parked one, which nothing automatic settles) as the operator found it
// in the provider's records: charged as the provider's charge REF (the
// charge row and the 201), declined (the 402) or released (no charge: a
// retry charges it). It shows the record's evidence, its provider
// reference and amount first, and writes only once the operator has typed
// KEY (or with --yes), preempting the lease so that any holder's late
// write fails. Before it writes, it notes in the audit trail what it
// settles and who the operator is (STS's ARN of their credentials).
// audit shows a key's audit trail, oldest first: it hashes the key, and
// neither sends nor shows it. With --charge it shows a charge's: its
// key's and its refunds'. Both read AUDIT_BUCKET and AUDIT_INDEX_TABLE.
// settle files its note in the index for AUDIT_INDEX_DAYS (default 92),
// as the audit function files the streams' entries.
// limits set gives a tenant its own rate (requests a second) or
// concurrency (requests at once), or both; a limit not given keeps the
// default. limits clear gives it the defaults again, and limits list shows
// the tenants with limits of their own. The charge functions read them
// again within LIMITS_MAX_AGE, with no deploy.
//
// Exit status: 0 success; 1 a final failure; 2 a usage error; 3 the
// outcome is not known yet. A final failure is a card declined, a request
// invalid, a key reused, a charge not found, a token refused, a refund
// beyond the charge or its limit of refunds, or a request the charge's
// state forbids. The outcome is not known yet while a request is in
// progress, pending, unavailable or rate limited (the tenant over its
// limit: chargectl says when to resume), or when it was interrupted. So it is
// for a refund beyond the charge or its limit while other refunds are in
// flight, and for a state conflict while a capture or cancel runs. Then
// run create or refund again with the --id it printed, or capture or
// cancel again as it was.
package main
