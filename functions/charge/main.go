// Command charge is the ChargeFunction Lambda: the HTTP API's POST /charges
// and GET /charges/{id}. It reads its configuration from the environment
// (see package app) and serves API Gateway HTTP API (payload 2.0) events.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/app"
)

func main() {
	h, err := app.ChargeFromEnv(context.Background(), os.Getenv)
	if err != nil {
		app.Fatal("charge", err)
	}
	lambda.Start(h.Handle)
}
