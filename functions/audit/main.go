// Command audit is the Lambda function, fed by the streams of both
// tables, that keeps every change of the idempotency records and the
// charges table as the audit trail.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/app"
)

func main() {
	h, err := app.AuditFromEnv(context.Background(), os.Getenv)
	if err != nil {
		app.Fatal(app.FunctionAudit, err)
	}
	lambda.Start(h.Handle)
}
