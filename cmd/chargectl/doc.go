// Command chargectl creates, reads, captures, cancels and refunds charges
// through the chargeonce API with package client. It also answers an
// operator's questions about a deployment (chargectl admin).
//
// Usage:
//
//	chargectl create --amount N --currency CUR --source TOKEN [--description TEXT] [--capture=false] [--id ID] [--json]
//	chargectl get [--json] CHARGE_ID
//	chargectl refunds [--json] CHARGE_ID
//	chargectl capture CHARGE_ID [--amount N] [--json]
//	chargectl cancel CHARGE_ID [--json]
//	chargectl refund CHARGE_ID [--amount N] [--reason REASON] [--id ID] [--json]
//	chargectl admin record [--json] [--operation OP] TENANT KEY
//	chargectl admin stuck [--json] [--max N]
//	chargectl admin reconcile [--json] [--operation OP] TENANT KEY
//	chargectl admin dlq list [--json] [--max N]
//	chargectl admin dlq redrive [--json] [--key [--operation OP] TENANT KEY]
//	chargectl admin submit [--json] --tenant TENANT --amount N [--currency CUR] --source TOKEN [--description TEXT] [--id ID]
//	chargectl admin settle [--json] [--yes] [--operation OP] (--charged REF | --refunded REF | --declined [--decline-code CODE] | --released) TENANT KEY
//	chargectl admin limits list [--json]
//	chargectl admin limits set [--json] [--rate N] [--concurrency N] TENANT
//	chargectl admin limits clear [--json] TENANT
//	chargectl admin audit [--json] [--operation OP] TENANT KEY
//	chargectl admin audit [--json] --charge TENANT CHARGE_ID
//	chargectl admin route [--json] HOME
//	chargectl admin failover [--json] [--yes] HOME REGION
//	chargectl admin drained [--json] [--yes] HOME REGION
//
// create, get, refunds, capture, cancel and refund take --url and --token.
// --url defaults to $CHARGEONCE_URL, else http://127.0.0.1:3000. --token
// defaults to $CHARGEONCE_TOKEN, else dev:acme, the local stack's
// development token. --timeout is the budget for all retries.
//
// create and refund mint a command id and print it on stderr before the
// first request. So an interrupted or failed run can be resumed with --id.
// The resumed run sends the same id and cannot charge, or refund, twice.
// refund refunds all that remains of the charge unless --amount says how
// much. --reason is duplicate, fraudulent or requested_by_customer.
// create --capture=false authorizes only. capture then takes all the charge
// holds, or --amount of it, and cancel releases it. capture and cancel take
// no id: each sets the charge's state. So the same command run again is
// safe and prints the same charge. get shows a charge's 10 oldest refunds.
// refunds lists them all, oldest first, read 100 at a time. The result goes
// to stdout, human-readable, or as one JSON value with --json.
//
// The admin commands read the deployment's tables and queues directly.
// They take the configuration the functions read: IDEMPOTENCY_TABLE,
// CHARGES_TABLE, LIMITS_TABLE, IDEMPOTENCY_TTL (default 24h),
// RECONCILE_QUEUE_URL and RECONCILE_DLQ_URL. RECONCILE_DLQ_URL is the
// dead-letter queue, which no function reads. DYNAMODB_ENDPOINT and
// SQS_ENDPOINT, when unset, mean AWS. The SDK's AWS_* variables apply too.
// Each command requires only what it uses. KEY is the Idempotency-Key (the
// command id) of a charge request. With --operation create-refund it is a
// refund request's.
//
// record shows a key's idempotency record. It shows the status and the
// lease owner (a prefix of its lease token). It shows the lease and record
// expiry and the reconcile attempts. It shows a fingerprint prefix and the
// stored answer. stuck lists the stuck-lease index over all shards, oldest
// first. reconcile queues a key for the reconciler now. dlq list shows the
// dead-letter queue's messages and the keys they name. It puts them back at
// once. dlq redrive moves them to the reconcile queue, or only those of one
// key. It says what moved.
//
// submit sends a charge request to the charge-requests queue
// (CHARGE_REQUESTS_QUEUE_URL). It sends it as the command id --id of
// --tenant. If no id is given, it mints one and prints it on stderr. It
// first checks the request as the intake function will. The intake charges
// it once. Its key is the one a POST /charges with that Idempotency-Key and
// body replays.
//
// settle settles an IN_FLIGHT key as the operator found it in the
// provider's records. Such a key is parked, and nothing automatic settles
// it. --charged settles it as the provider's charge REF: the charge row and
// the 201. --refunded settles a refund's key as the provider's refund REF.
// --declined settles it as the 402. --released means no charge: a
// retry charges it. settle first shows the record's evidence, its provider
// reference and amount. It writes only once the operator has typed KEY, or
// with --yes. It preempts the lease so that any holder's late write fails.
// Before it writes, it notes in the audit trail what it settles. The note
// says who the operator is: STS's ARN of their credentials.
//
// audit shows a key's audit trail, oldest first. It hashes the key, and
// neither sends nor shows it. With --charge it shows a charge's trail: its
// key's and its refunds'. Both read AUDIT_BUCKET and AUDIT_INDEX_TABLE.
// settle files its note in the index for AUDIT_INDEX_DAYS (default 92). The
// audit function files the streams' entries the same way.
//
// limits set gives a tenant its own rate (requests a second), concurrency
// (requests at once), or both. A limit not given keeps the default. limits
// clear gives the tenant the defaults again. limits list shows the tenants
// with limits of their own. The charge functions read them again within
// LIMITS_MAX_AGE, with no deploy.
//
// route shows who serves the tenants homed in the Region HOME. It lists
// the Regions not yet drained. failover serves them from REGION, after the
// fence. drained says REGION's writes for HOME have all replicated. It is
// refused before the failover takes effect. All three read ROUTES_TABLE
// (docs/operations.md).
//
// Exit status: 0 success; 1 a final failure; 2 a usage error; 3 the
// outcome is not known yet.
//
// A final failure is a card declined, a request invalid or a key reused. A
// charge not found or a token refused is one too. So is a refund beyond the
// charge or its limit of refunds. So is a request the charge's state
// forbids.
//
// The outcome is not known yet while a request is in progress or pending.
// It is not known when the API answers unavailable or rate limited. Rate
// limited means the tenant is over its limit; chargectl says when to
// resume. It is not known when the request was interrupted. It is not known
// for a refund beyond the charge or its limit while other refunds are in
// flight. Nor is it for a state conflict while a capture or cancel runs.
// On status 3, run create or refund again with the --id it printed. Or run
// capture or cancel again as it was.
package main
