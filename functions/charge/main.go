// Command charge is the ChargeFunction Lambda: the HTTP API's POST /charges
// and GET /charges/{id}. It reads its configuration from the environment
// (see package setup) and serves API Gateway HTTP API (payload 2.0) events.
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
	cfg, err := setup.LoadCharge(os.Getenv)
	if err != nil {
		fatal(err)
	}
	clients, err := awsenv.Load(context.Background())
	if err != nil {
		fatal(err)
	}
	h, err := setup.ChargeHandler(cfg, setup.Deps{Clients: clients, Logger: setup.Logger(cfg.LogLevel)})
	if err != nil {
		fatal(err)
	}
	lambda.Start(h.Handle)
}

// fatal logs a start-up error and exits: Lambda reports it as an init error.
func fatal(err error) {
	slog.New(slog.NewJSONHandler(os.Stdout, nil)).Error("charge: cannot start", "error", err.Error())
	os.Exit(1)
}
