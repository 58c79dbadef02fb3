package charge_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// harness is the charge function as deployed, on the emulator's DynamoDB
// and SQS, with an in-process provider simulator.
type harness struct {
	t       *testing.T
	handler *httpapi.Handler
	sim     *providersim.Simulator
	store   *dynamostore.Store // the same table, for asserting what is stored
	queue   queue.Queues
	logs    *testkit.LogBuffer
	d       *testkit.Deployment
}

func newHarness(t *testing.T, tune ...func(*app.ChargeConfig)) *harness {
	t.Helper()
	return newHarnessWith(t, harnessConfig{tune: tune})
}

// harnessConfig adjusts a harness: the function's configuration, its
// dependencies (clock, DynamoDB client options) and the simulator.
type harnessConfig struct {
	tune []func(*app.ChargeConfig)
	deps func(*app.Deps)
	sim  []func(*providersim.Options)
}

func newHarnessWith(t *testing.T, hc harnessConfig) *harness {
	t.Helper()
	d := testkit.Deploy(t, hc.sim...)
	logs := &testkit.LogBuffer{}
	var clock func() time.Time
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		for _, fn := range hc.tune {
			fn(&w.Charge)
		}
		w.Deps.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		if hc.deps != nil {
			hc.deps(&w.Deps)
		}
		clock = w.Deps.Clock
	})
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock })
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, handler: h, sim: d.Sim, store: store, queue: d.Queues, logs: logs, d: d}
}

// post and get are the charge API's events, as API Gateway sends them.
var (
	post = testkit.PostCharge
	get  = testkit.GetCharge
)

// do sends one event through the handler and checks the response against
// the OpenAPI document.
func (h *harness) do(req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	h.t.Helper()
	resp, err := h.handler.Handle(context.Background(), req)
	if err != nil {
		h.t.Fatalf("handler returned an error (client errors must be responses): %v", err)
	}
	validateContract(h.t, req, resp)
	return resp
}

func validateContract(t *testing.T, req events.APIGatewayV2HTTPRequest, resp events.APIGatewayV2HTTPResponse) {
	t.Helper()
	specRouter := testkit.SpecRouter(t)
	target := "http://localhost" + req.RawPath
	if req.RawQueryString != "" {
		target += "?" + req.RawQueryString
	}
	httpReq, _ := http.NewRequest(req.RequestContext.HTTP.Method, target, strings.NewReader(req.Body))
	for k, v := range req.Headers {
		httpReq.Header.Set(k, v)
	}
	route, params, err := specRouter.FindRoute(httpReq)
	if err != nil {
		t.Fatalf("openapi: no route for %s %s: %v", httpReq.Method, req.RawPath, err)
	}
	header := http.Header{}
	for k, v := range resp.Headers {
		header.Set(k, v)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: httpReq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  resp.StatusCode,
		Header:  header,
		Body:    io.NopCloser(strings.NewReader(resp.Body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("response %d %s violates api/openapi.yaml: %v", resp.StatusCode, resp.Body, err)
	}
}
