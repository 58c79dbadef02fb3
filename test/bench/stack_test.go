package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// tenant is the tenant every request of the package charges for.
const tenant = "bench"

// visa is the request body every first call sends.
const visa = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"order 42"}`

// stack is the charge function as deployed, on a test deployment
// (testkit.Deployment: the emulator's tables and queue, a provider simulator),
// beside a naive handler on the same tables and provider.
type stack struct {
	dep     *testkit.Deployment
	cfg     app.ChargeConfig
	deps    app.Deps
	handler *httpapi.Handler
	naive   *naiveHandler
	// store and db reach the same tables without the options under
	// measurement, to set up states (an in-flight record) outside them.
	store *dynamostore.Store
	db    *dynamodb.Client
}

// newStack builds the stack; dynamoOpts (a call counter, a meter) apply to
// the DynamoDB client of the handlers and nothing else. A nil clock is
// time.Now.
func newStack(tb testing.TB, clock func() time.Time, inflightWait time.Duration, dynamoOpts ...func(*dynamodb.Options)) *stack {
	tb.Helper()
	dep := testkit.Deploy(tb)
	cfg := dep.Charge()
	cfg.InflightWait = inflightWait
	// Metrics lines to io.Discard, not the default os.Stdout: on stdout they
	// would cut into go test -bench's result lines.
	deps := app.Deps{Clients: testkit.Clients(tb, dynamoOpts...), Clock: clock, Metrics: io.Discard, Tracer: benchTracer(tb)}
	h := dep.ChargeHandler(tb, func(w *testkit.Wiring) { w.Charge, w.Deps = cfg, deps })
	plain := testkit.Clients(tb).DynamoDB
	store, err := dynamostore.New(plain, cfg.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock })
	if err != nil {
		tb.Fatal(err)
	}
	return &stack{
		dep: dep, cfg: cfg, deps: deps, handler: h, store: store, db: plain,
		naive: &naiveHandler{
			db: deps.Clients.DynamoDB, table: cfg.ChargesTable, tenantClaim: cfg.TenantClaim,
			provider: provider.NewClient(dep.ProviderURL, ""),
		},
	}
}

// traced turns tracing on for the handlers, to measure what it costs:
// go test -bench Handler ./test/bench -args -traced. Off, the default, is
// the functions' default: no ADOT layer, no tracer.
var traced = flag.Bool("traced", false, "trace the handlers (spans batched to an exporter that drops them, flushed after each invocation as in Lambda)")

// benchTracer is the handlers' tracer: nil unless -traced.
func benchTracer(tb testing.TB) *tracing.Tracer {
	if !*traced {
		return nil
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.New(tp)
}

// post builds a POST /charges event as API Gateway sends it, from a
// typical caller: a JWT's sub and client id, an address and a user agent,
// which the record keeps for the audit trail.
func post(key, body string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RouteKey: httpapi.RouteCreate,
		RawPath:  "/charges",
		Headers:  map[string]string{"content-type": "application/json", "idempotency-key": key},
		Body:     body,
	}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.HTTP.Path = "/charges"
	req.RequestContext.HTTP.SourceIP, req.RequestContext.HTTP.UserAgent = "203.0.113.7", "acme-billing/2.4 (go1.26; linux/arm64)"
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{
			testkit.TenantClaim: tenant, "sub": "5f1c2a9e-0b7d-4d4e-9a51-7c6f0e2b8d13", "client_id": "3hq1u0o9d2kfb7m1c5kq8e4s6v",
		}},
	}
	return req
}

// newKey returns a fresh idempotency key.
func newKey() string { return testkit.UniqueName("order") }

// naiveHandler is the handler without idempotency that the benchmarks
// compare against: it validates the same body, charges the card under a
// fresh reference and writes the charge row with one unconditional
// PutItem. A retry charges again.
type naiveHandler struct {
	db          *dynamodb.Client
	table       string
	tenantClaim string
	provider    *provider.Client
}

func (n *naiveHandler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	tenant := req.RequestContext.Authorizer.JWT.Claims[n.tenantClaim]
	var in struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Source      string `json:"source"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal([]byte(req.Body), &in); err != nil {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest}, nil
	}
	r, err := charge.NewRequest(in.Amount, in.Currency, in.Source, in.Description)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest}, nil
	}
	ref, id := "naive_"+randomHex(), "ch_"+randomHex()
	res, err := n.provider.Charge(ctx, provider.ChargeRequest{
		Reference: ref, Amount: r.Money.Amount, Currency: r.Money.Currency, Source: r.Source,
	})
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	if res.Status != provider.StatusCharged {
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("naive: provider answered %s", res.Status)
	}
	created := time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	_, err = n.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(n.table),
		Item: map[string]types.AttributeValue{
			charge.AttrTenant:    &types.AttributeValueMemberS{Value: tenant},
			charge.AttrID:        &types.AttributeValueMemberS{Value: id},
			"amount":             &types.AttributeValueMemberN{Value: strconv.FormatInt(r.Money.Amount, 10)},
			"currency":           &types.AttributeValueMemberS{Value: r.Money.Currency},
			"description":        &types.AttributeValueMemberS{Value: r.Description},
			"status":             &types.AttributeValueMemberS{Value: "succeeded"},
			"provider_reference": &types.AttributeValueMemberS{Value: ref},
			"provider_charge_id": &types.AttributeValueMemberS{Value: res.ChargeID},
			"created_at":         &types.AttributeValueMemberS{Value: created},
		},
	})
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	body, _ := json.Marshal(map[string]any{ // strings and an integer: cannot fail
		"id": id, "amount": r.Money.Amount, "currency": r.Money.Currency, "description": r.Description,
		"status": "succeeded", "provider_reference": ref, "created_at": created,
	})
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusCreated,
		Headers:    map[string]string{"Content-Type": httpapi.ContentTypeJSON, "Location": "/charges/" + id},
		Body:       string(body),
	}, nil
}

func randomHex() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
