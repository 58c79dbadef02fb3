package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/localgw"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/setup"
	"github.com/chargeonce/chargeonce/internal/testenv"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// stack is the charge function as deployed, on the emulator's DynamoDB and
// SQS with an in-process provider simulator, served over HTTP by the local
// API Gateway.
type stack struct {
	URL     string
	Sim     *providersim.Simulator
	cleanup []func()
}

// startStack starts a stack whose API handler is wrapped by wrap, if not
// nil; Close stops it.
func startStack(ctx context.Context, wrap func(http.Handler) http.Handler) (st *stack, err error) {
	st = &stack{Sim: providersim.New()}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	provider := httptest.NewServer(st.Sim)
	st.cleanup = append(st.cleanup, provider.Close)
	clients, err := testenv.NewClients()
	if err != nil {
		return st, err
	}
	q, err := queue.Create(ctx, clients.SQS, testenv.UniqueName("reconcile"))
	if err != nil {
		return st, err
	}
	idemTable, drop, err := testenv.NewTable(ctx, idem.TableInput("idem"))
	if err != nil {
		return st, err
	}
	st.cleanup = append(st.cleanup, drop)
	chargesTable, drop, err := testenv.NewTable(ctx, charge.TableInput("charges"))
	if err != nil {
		return st, err
	}
	st.cleanup = append(st.cleanup, drop)
	cfg := setup.Charge{
		IdempotencyTable:  idemTable,
		ChargesTable:      chargesTable,
		ReconcileQueueURL: q.URL,
		ProviderURL:       provider.URL,
		TenantClaim:       "tenant_id",
		Retention:         24 * time.Hour,
		InflightWait:      2 * time.Second,
	}
	h, err := setup.ChargeHandler(cfg, setup.Deps{Clients: clients, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return st, err
	}
	gw, err := localgw.New(h.Handle, []string{charge.RouteCreate, charge.RouteGet},
		localgw.WithTenantClaim(cfg.TenantClaim), localgw.WithTimeout(10*time.Second))
	if err != nil {
		return st, err
	}
	var api *httptest.Server
	if wrap != nil {
		api = httptest.NewServer(wrap(gw))
	} else {
		api = httptest.NewServer(gw)
	}
	st.cleanup = append(st.cleanup, api.Close)
	st.URL = api.URL
	return st, nil
}

// Close stops the servers and drops the tables.
func (st *stack) Close() {
	for i := len(st.cleanup) - 1; i >= 0; i-- {
		st.cleanup[i]()
	}
}

// newStack is startStack for a test.
func newStack(t *testing.T, wrap func(http.Handler) http.Handler) *stack {
	t.Helper()
	st, err := startStack(context.Background(), wrap)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}
