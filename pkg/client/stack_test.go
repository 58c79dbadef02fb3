package client_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// stack is the charge function as deployed, on the emulator's DynamoDB and
// SQS with an in-process provider simulator, served over HTTP by the local
// API Gateway.
type stack struct {
	URL   string
	Sim   *providersim.Simulator
	Close func()
}

// startStack starts a stack; Close stops it. It takes no *testing.T so that
// examples can use it too.
func startStack(ctx context.Context, wrap func(http.Handler) http.Handler, simOpts []func(*providersim.Options), tune ...func(*app.ChargeConfig)) (*stack, error) {
	d, remove, err := testkit.New(ctx, simOpts...)
	if err != nil {
		return nil, err
	}
	cfg := d.Charge()
	for _, fn := range tune {
		fn(&cfg)
	}
	url, stop, err := d.Serve(cfg, wrap)
	if err != nil {
		remove()
		return nil, err
	}
	return &stack{URL: url, Sim: d.Sim, Close: func() { stop(); remove() }}, nil
}

// newStack is startStack for a test.
func newStack(t *testing.T, simOpts []func(*providersim.Options), tune ...func(*app.ChargeConfig)) *stack {
	t.Helper()
	return newStackWrapped(t, nil, simOpts, tune...)
}

// newStackWrapped is newStack with the gateway wrapped by wrap, which may
// rewrite its answers.
func newStackWrapped(t *testing.T, wrap func(http.Handler) http.Handler, simOpts []func(*providersim.Options), tune ...func(*app.ChargeConfig)) *stack {
	t.Helper()
	st, err := startStack(context.Background(), wrap, simOpts, tune...)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}
