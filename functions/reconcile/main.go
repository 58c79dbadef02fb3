// Command reconcile is the Lambda function, fed by the reconcile queue, that
// asks the provider for the outcome of charges left pending and settles
// their idempotency records.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/setup"
)

func main() {
	c, err := setup.LoadReconcile(os.Getenv)
	if err != nil {
		fatal(err)
	}
	clients, err := awsenv.Load(context.Background())
	if err != nil {
		fatal(err)
	}
	h, err := setup.ReconcileHandler(c, setup.Deps{Clients: clients, Logger: setup.Logger(c.LogLevel)})
	if err != nil {
		fatal(err)
	}
	lambda.Start(h.Handle)
}

func fatal(err error) {
	setup.Logger(slog.LevelInfo).Error("reconcile: cannot start", "error", err.Error())
	os.Exit(1)
}
