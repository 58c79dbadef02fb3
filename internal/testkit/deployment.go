// A Deployment provides, for tests, one deployment's worth of the service
// on the test endpoints. It has the idempotency, charges and limits tables.
// It has the reconcile and charge-requests queues with their dead-letter
// queues. It serves a provider simulator over HTTP. Each function's
// configuration points at them.

package testkit

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TenantClaim is the JWT claim the deployment's charge function reads.
const TenantClaim = httpapi.DefaultTenantClaim

// Deployment is the resources of one deployment. Names are unique, so
// deployments of parallel tests never meet.
type Deployment struct {
	IdempotencyTable, ChargesTable string
	LimitsTable                    string
	Queues                         queue.Queues // the reconcile queue
	ChargeRequests                 queue.Queues // the intake's queue
	Sim                            *providersim.Simulator
	ProviderURL                    string
}

// New creates a deployment; the function it returns removes it.
func New(ctx context.Context, simOpts ...func(*providersim.Options)) (*Deployment, func(), error) {
	var undo []func()
	remove := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(err error) (*Deployment, func(), error) {
		remove()
		return nil, nil, err
	}
	d := &Deployment{Sim: providersim.New(simOpts...)}
	srv := httptest.NewServer(d.Sim)
	undo = append(undo, srv.Close)
	d.ProviderURL = srv.URL
	clients, err := NewClients()
	if err != nil {
		return fail(err)
	}
	for _, t := range []struct {
		name   *string
		prefix string
		def    func(string) *dynamodb.CreateTableInput
	}{{&d.IdempotencyTable, "idem", dynamostore.TableInput}, {&d.ChargesTable, "charges", charge.TableInput}, {&d.LimitsTable, "limits", limit.TableInput}} {
		name, drop, err := NewTable(ctx, t.def(t.prefix))
		if err != nil {
			return fail(err)
		}
		*t.name = name
		undo = append(undo, drop)
	}
	for _, q := range []struct {
		to     *queue.Queues
		prefix string
	}{{&d.Queues, "reconcile"}, {&d.ChargeRequests, "charge-requests"}} {
		if *q.to, err = queue.Create(ctx, clients.SQS, UniqueName(q.prefix)); err != nil {
			return fail(err)
		}
		created := *q.to
		undo = append(undo, func() {
			for _, url := range []string{created.URL, created.DLQURL} {
				_, _ = clients.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
			}
		})
	}
	return d, remove, nil
}

// Deploy is New for a test: the deployment is removed when the test ends.
func Deploy(t testing.TB, simOpts ...func(*providersim.Options)) *Deployment {
	t.Helper()
	d, remove, err := New(context.Background(), simOpts...)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(remove)
	return d
}

// Charge is the charge function's configuration for the deployment. It
// holds no tenant to limits and sheds nothing. A test's requests come
// faster than a tenant's, and it retries at once. A test of the limits sets
// LimitsTable.
func (d *Deployment) Charge() app.ChargeConfig {
	return app.ChargeConfig{
		IdempotencyTable: d.IdempotencyTable, ChargesTable: d.ChargesTable, ReconcileQueueURL: d.Queues.URL,
		ProviderURL: d.ProviderURL, TenantClaim: TenantClaim, Retention: 24 * time.Hour, InflightWait: 2 * time.Second,
	}
}

// Sweeper is the sweeper function's configuration for the deployment.
func (d *Deployment) Sweeper() app.SweeperConfig {
	return app.SweeperConfig{IdempotencyTable: d.IdempotencyTable, ChargesTable: d.ChargesTable, ReconcileQueueURL: d.Queues.URL}
}

// Intake is the intake function's configuration for the deployment.
func (d *Deployment) Intake() app.IntakeConfig {
	return app.IntakeConfig{
		IdempotencyTable: d.IdempotencyTable, ChargesTable: d.ChargesTable, ReconcileQueueURL: d.Queues.URL,
		DeadLetterQueueURL: d.ChargeRequests.DLQURL, ProviderURL: d.ProviderURL,
		Retention: 24 * time.Hour, InflightWait: 2 * time.Second,
	}
}

// Reconcile is the reconcile function's configuration for the deployment.
func (d *Deployment) Reconcile() app.ReconcileConfig {
	return app.ReconcileConfig{
		IdempotencyTable: d.IdempotencyTable, ChargesTable: d.ChargesTable,
		ProviderURL: d.ProviderURL, Retention: 24 * time.Hour,
	}
}

// Wiring is what a test may change of a function built on a Deployment:
// its configuration and its dependencies.
type Wiring struct {
	Charge    app.ChargeConfig
	Reconcile app.ReconcileConfig
	Intake    app.IntakeConfig
	Deps      app.Deps
}

func (d *Deployment) wiring(clients awsenv.Clients, optFns []func(*Wiring)) Wiring {
	w := Wiring{
		Charge: d.Charge(), Reconcile: d.Reconcile(), Intake: d.Intake(),
		Deps: app.Deps{Clients: clients, Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard},
	}
	for _, fn := range optFns {
		fn(&w)
	}
	return w
}

// ChargeHandler builds the deployment's charge function the way the
// function itself does (app.ChargeHandler): the one way tests build it.
func (d *Deployment) ChargeHandler(t testing.TB, optFns ...func(*Wiring)) *httpapi.Handler {
	t.Helper()
	w := d.wiring(Clients(t), optFns)
	h, err := app.ChargeHandler(t.Context(), w.Charge, w.Deps)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// IntakeHandler builds the deployment's intake function the way the
// function itself does (app.IntakeHandler).
func (d *Deployment) IntakeHandler(t testing.TB, optFns ...func(*Wiring)) *intake.Handler {
	t.Helper()
	w := d.wiring(Clients(t), optFns)
	h, err := app.IntakeHandler(w.Intake, w.Deps)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// ReconcileService builds the service the deployment's reconcile function
// drives, the way the function does (app.ReconcileService).
func (d *Deployment) ReconcileService(t testing.TB, optFns ...func(*Wiring)) *charge.Service {
	t.Helper()
	w := d.wiring(Clients(t), optFns)
	svc, err := app.ReconcileService(w.Reconcile, w.Deps)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// Serve serves the deployment's charge function, configured by cfg, over
// HTTP. It sits behind the local API Gateway (tokens "Bearer
// dev:<tenant>"). wrap wraps it if it is not nil. Serve returns the base
// URL and a function that stops the server.
func (d *Deployment) Serve(cfg app.ChargeConfig, wrap func(http.Handler) http.Handler) (string, func(), error) {
	clients, err := NewClients()
	if err != nil {
		return "", nil, err
	}
	w := d.wiring(clients, []func(*Wiring){func(w *Wiring) { w.Charge = cfg }})
	h, err := app.ChargeHandler(context.Background(), w.Charge, w.Deps)
	if err != nil {
		return "", nil, err
	}
	gw, err := gateway.New(h.Handle, httpapi.Routes,
		gateway.WithPublicRoutes(httpapi.RouteWebhook), gateway.WithTenantClaim(cfg.TenantClaim), gateway.WithTimeout(10*time.Second))
	if err != nil {
		return "", nil, err
	}
	var api http.Handler = gw
	if wrap != nil {
		api = wrap(gw)
	}
	srv := httptest.NewServer(api)
	return srv.URL, srv.Close, nil
}
