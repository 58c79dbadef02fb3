// Package e2e provides the end-to-end test of the deployable artifacts:
// the four functions' bootstrap binaries, built as `sam build` builds
// them, each run under the Lambda Runtime Interface Emulator and invoked
// with the events in events/, against the DynamoDB/SQS emulator and the
// provider simulator; and the charge binary once more in Stripe mode,
// against stripesim, behind the local API Gateway, where a signed webhook
// settles a charge whose answer was lost. `make e2e` runs it verbosely;
// `make test` runs it with the rest of the suite.
package e2e
