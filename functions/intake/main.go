// Command intake is the Lambda function, fed by the charge-requests queue,
// that creates the charges submitted as messages (package intake), under
// the same keys as POST /charges.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/app"
)

func main() {
	h, err := app.IntakeFromEnv(context.Background(), os.Getenv)
	if err != nil {
		app.Fatal("intake", err)
	}
	lambda.Start(h.Handle)
}
