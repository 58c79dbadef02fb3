package localgw_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/localgw"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/setup"
	"github.com/chargeonce/chargeonce/internal/testenv"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestChargeAPIThroughTheGateway serves the real charge handler, on the
// emulator, behind the gateway, and drives it over HTTP as a client would.
func TestChargeAPIThroughTheGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clients := testenv.Clients(t)
	sim := httptest.NewServer(providersim.New())
	t.Cleanup(sim.Close)
	q, err := queue.Create(ctx, clients.SQS, testenv.UniqueName("reconcile"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, url := range []string{q.URL, q.DLQURL} {
			_, _ = clients.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		}
	})
	env := map[string]string{
		setup.EnvIdempotencyTable:  testenv.CreateTable(t, idem.TableInput("idem")),
		setup.EnvChargesTable:      testenv.CreateTable(t, charge.TableInput("charges")),
		setup.EnvReconcileQueueURL: q.URL,
		setup.EnvProviderURL:       sim.URL,
		setup.EnvTenantClaim:       "org_id",
	}
	cfg, err := setup.LoadCharge(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	h, err := setup.ChargeHandler(cfg, setup.Deps{Clients: clients, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := localgw.New(h.Handle, []string{charge.RouteCreate, charge.RouteGet},
		localgw.WithTenantClaim(cfg.TenantClaim), localgw.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)

	create := http.Header{
		"Authorization":   {"Bearer dev:acme"},
		"Content-Type":    {"application/json"},
		"Idempotency-Key": {testenv.UniqueName("order")},
	}
	const body = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	first, firstBody := do(t, http.MethodPost, srv.URL+"/charges", body, create)
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	replay, replayBody := do(t, http.MethodPost, srv.URL+"/charges", body, create)
	if replay.StatusCode != http.StatusCreated || replay.Header.Get("Idempotent-Replayed") != "true" || replayBody != firstBody {
		t.Fatalf("replay: %d %v %s", replay.StatusCode, replay.Header, replayBody)
	}
	if mismatch, b := do(t, http.MethodPost, srv.URL+"/charges", `{"amount":1600,"currency":"EUR","source":"tok_visa"}`, create); mismatch.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("mismatch: %d %s", mismatch.StatusCode, b)
	}

	location := first.Header.Get("Location")
	if got, b := do(t, http.MethodGet, srv.URL+location, "", http.Header{"Authorization": {"Bearer dev:acme"}}); got.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %d %s", location, got.StatusCode, b)
	}
	if other, b := do(t, http.MethodGet, srv.URL+location, "", http.Header{"Authorization": {"Bearer dev:globex"}}); other.StatusCode != http.StatusNotFound {
		t.Errorf("GET %s as another tenant: %d %s", location, other.StatusCode, b)
	}
	if anon, b := do(t, http.MethodGet, srv.URL+location, "", nil); anon.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d %s", location, anon.StatusCode, b)
	}
}
