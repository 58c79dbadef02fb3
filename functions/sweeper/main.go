// Command sweeper is the Lambda function, run every minute, that queues the
// keys of idempotency leases stuck in flight for reconciliation.
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
	c, err := setup.LoadSweeper(os.Getenv)
	if err != nil {
		fatal(err)
	}
	clients, err := awsenv.Load(context.Background())
	if err != nil {
		fatal(err)
	}
	h, err := setup.SweeperHandler(c, setup.Deps{Clients: clients, Logger: setup.Logger(c.LogLevel)})
	if err != nil {
		fatal(err)
	}
	lambda.Start(h.Handle)
}

func fatal(err error) {
	setup.Logger(slog.LevelInfo).Error("sweeper: cannot start", "error", err.Error())
	os.Exit(1)
}
