// Command sweeper is the Lambda function, run every minute, that queues the
// keys of idempotency leases stuck in flight for reconciliation.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/app"
)

func main() {
	h, err := app.SweeperFromEnv(context.Background(), os.Getenv)
	if err != nil {
		app.Fatal("sweeper", err)
	}
	lambda.Start(h.Handle)
}
