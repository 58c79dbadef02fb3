// Command devauth is DevAuthorizerFunction, the HTTP API's development
// Lambda authorizer for `sam local start-api` (package devauth): it
// accepts "Bearer dev:<tenant>" under SAM CLI and refuses every request
// anywhere else.
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/chargeonce/chargeonce/internal/devauth"
)

func main() {
	a := devauth.New(devauth.Load(os.Getenv), slog.New(slog.NewJSONHandler(os.Stdout, nil)))
	lambda.Start(a.Handle)
}
