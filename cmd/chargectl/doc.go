// Command chargectl creates and reads charges through the chargeonce API
// with package client.
//
// Usage:
//
//	chargectl create --amount 1500 --currency EUR --source tok_visa [--description TEXT] [--id ID] [--json]
//	chargectl get [--json] CHARGE_ID
//
// Both take --url (default $CHARGEONCE_URL, else http://127.0.0.1:3000)
// and --token (default $CHARGEONCE_TOKEN, else dev:acme, the local stack's
// development token), and --timeout, the budget for all retries.
//
// create mints a command id and prints it on stderr before the first
// request, so that an interrupted or failed run can be resumed with
// --id: the resumed run sends the same id and cannot charge twice. The
// result goes to stdout, human-readable, or as one JSON object with --json.
//
// Exit status: 0 success; 1 a final failure (declined, invalid, key
// reused, not found, unauthorized); 2 a usage error; 3 the outcome is not
// known yet (in progress, pending, unavailable, interrupted): run create
// again with the --id it printed.
package main
