// Command reconcile is the Lambda function, fed by the reconcile queue, that
// asks the provider for the outcome of charges left pending and settles
// their idempotency records.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/app"
)

func main() {
	h, err := app.ReconcileFromEnv(context.Background(), os.Getenv)
	if err != nil {
		app.Fatal("reconcile", err)
	}
	lambda.Start(h.Handle)
}
