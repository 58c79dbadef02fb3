package main

import (
	"net/http"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// stack is the charge function as deployed, on the emulator's DynamoDB and
// SQS with an in-process provider simulator, served over HTTP by the local
// API Gateway.
type stack struct {
	URL string
	Sim *providersim.Simulator
}

// newStack starts a stack whose API is wrapped by wrap, if not nil; it
// stops when the test ends.
func newStack(t *testing.T, wrap func(http.Handler) http.Handler) *stack {
	t.Helper()
	d := testkit.Deploy(t)
	url, stop, err := d.Serve(d.Charge(), wrap)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(stop)
	return &stack{URL: url, Sim: d.Sim}
}
