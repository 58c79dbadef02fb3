package charge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
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
	resp, err := h.handler.Handle(h.t.Context(), req)
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
	if err := openapi3filter.ValidateResponse(t.Context(), in); err != nil {
		t.Errorf("response %d %s violates api/openapi.yaml: %v", resp.StatusCode, resp.Body, err)
	}
}

const visa = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"order 42"}`

func newKey() string { return testkit.UniqueName("order") }

func wantStatus(t *testing.T, resp events.APIGatewayV2HTTPResponse, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, want, resp.Body)
	}
}

func problemType(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	var p struct{ Type string }
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", resp.Body, err)
	}
	return strings.TrimPrefix(p.Type, httpapi.ProblemBase)
}

func (h *harness) ledger(t *testing.T) (charges, calls int) {
	t.Helper()
	l := h.sim.Ledger()
	return l.TotalCharges, l.TotalCalls
}

// wantLedger checks the provider's stored results (a decline is one) and
// the charge requests it received.
func (h *harness) wantLedger(t *testing.T, results, calls int) {
	t.Helper()
	if r, c := h.ledger(t); r != results || c != calls {
		t.Fatalf("provider results %d, calls %d; want %d and %d", r, c, results, calls)
	}
}

func mustKey(t *testing.T, tenant, client string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, charge.ChargeOperation, client)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// countedStore counts the calls that reach the store.
type countedStore struct {
	charge.Store
	n atomic.Int64
}

func (c *countedStore) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	c.n.Add(1)
	return c.Store.Begin(ctx, key, fp, intent)
}

func (c *countedStore) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

// unavailableProvider refuses every charge as not processed, after noting
// the request and the fingerprint of the record that claims it (the record
// exists while the provider is called; the refusal then releases it).
type unavailableProvider struct {
	store  charge.Store
	mu     sync.Mutex
	key    idem.Key // the key the next charge is expected for
	reqs   []provider.ChargeRequest
	stored string // the claimed record's fingerprint
}

func (p *unavailableProvider) expect(k idem.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.key, p.reqs, p.stored = k, nil, ""
}

func (p *unavailableProvider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	if rec, err := p.store.Get(ctx, p.key); err == nil {
		p.stored = rec.Fingerprint
	}
	return provider.Result{}, fmt.Errorf("fuzz: %w", provider.ErrUnavailable)
}

func (p *unavailableProvider) Lookup(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: lookups are not expected")
}

func (p *unavailableProvider) Refund(context.Context, provider.RefundRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: refunds are not expected")
}

func (p *unavailableProvider) LookupRefund(context.Context, provider.RefundRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: refunds are not expected")
}

func (p *unavailableProvider) Capture(context.Context, provider.PaymentRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: captures are not expected")
}

func (p *unavailableProvider) Cancel(context.Context, provider.PaymentRequest) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: cancels are not expected")
}

func (p *unavailableProvider) State(context.Context, string) (provider.Result, error) {
	return provider.Result{}, errors.New("fuzz: states are not expected")
}

func (p *unavailableProvider) Guarantees() provider.Guarantees { return provider.Guarantees{} }

func (p *unavailableProvider) storedFingerprint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stored
}

func (p *unavailableProvider) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

func (p *unavailableProvider) last() provider.ChargeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) == 0 {
		return provider.ChargeRequest{}
	}
	return p.reqs[len(p.reqs)-1]
}

// clocked is a harness whose store and service read a settable clock, and
// a reconcile service on the same deployment and clock.
type clocked struct {
	*harness
	clock *testkit.Clock
	recon *charge.Service
}

func newClocked(t *testing.T, tune ...func(*app.ChargeConfig)) *clocked {
	t.Helper()
	clock := testkit.NewClock(time.Now())
	h := newHarnessWith(t, harnessConfig{tune: tune, deps: func(d *app.Deps) { d.Clock = clock.Now }})
	recon := h.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.SettleWindow, w.Reconcile.RetryBase, w.Reconcile.RetryCap = 2*time.Minute, time.Minute, 4*time.Minute
		w.Deps.Clock = clock.Now
	})
	return &clocked{harness: h, clock: clock, recon: recon}
}

func chargeOf(t *testing.T, resp string) (id string, amount int64) {
	t.Helper()
	var c struct {
		ID     string
		Amount int64
	}
	if err := json.Unmarshal([]byte(resp), &c); err != nil {
		t.Fatalf("charge body %s: %v", resp, err)
	}
	return c.ID, c.Amount
}

// pastRetention moves the clock past the retention of a command just
// settled: its lease (30s without a deadline) and the retention after it.
func (c *clocked) pastRetention() {
	c.clock.Advance(c.d.Charge().Retention + time.Minute)
}

// crashAfterClaim is a charge function that claims key and dies before it
// calls the provider; the lease runs out.
func (c *clocked) crashAfterClaim(t *testing.T, key, body string) *idem.Lease {
	t.Helper()
	canonical, err := idem.CanonicalJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.store.Begin(t.Context(), mustKey(t, "acme", key), idem.FingerprintOf(canonical), []byte(`{"amount":1500,"currency":"EUR","description":"order 42"}`))
	if err != nil || b.Lease == nil {
		t.Fatalf("claim: %+v, %v", b, err)
	}
	c.clock.Advance(time.Minute)
	return b.Lease
}

func (c *clocked) reconcile(t *testing.T, key string) charge.Outcome {
	t.Helper()
	out, err := c.recon.Reconcile(t.Context(), mustKey(t, "acme", key))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return out
}

func (c *clocked) lateCharge(t *testing.T, l *idem.Lease) {
	t.Helper()
	_, err := provider.NewClient(c.d.ProviderURL, "").Charge(t.Context(), provider.ChargeRequest{
		Reference: charge.ProviderReference(l.Key, l.CreatedAt), Amount: 1500, Currency: "EUR", Source: providersim.SourceVisa,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// wantQueued checks the reconcile queue holds a message, delayed or
// visible. It may hold two: when SQS's answer to a send is lost, the SDK
// sends it again. A copy reconciles nothing more
// (reconcile.TestDuplicateDeliveriesResolveOnce).
func (h *harness) wantQueued(t *testing.T) {
	t.Helper()
	if h.queued(t) == 0 {
		t.Fatal("no reconcile message, want the key queued")
	}
}

// queued counts the reconcile queue's messages, delayed or visible.
func (h *harness) queued(t *testing.T) int {
	t.Helper()
	out, err := testkit.Clients(t).SQS.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(h.queue.URL),
		AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessages"},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		c, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

const (
	testSecretKey = "sk_test_chargeonce"
	testWhsec     = "whsec_test_chargeonce"
)

// stripeStack is the charge function in Stripe mode behind the local API
// Gateway, on the emulator, with stripesim as Stripe, which sends its
// signed webhooks to the gateway's POST /webhooks/stripe.
type stripeStack struct {
	t     *testing.T
	d     *testkit.Deployment
	sim   *stripesim.Simulator
	api   string // the gateway's base URL
	store *dynamostore.Store
	db    *dynamodb.Client

	mu       sync.Mutex
	webhooks [][]byte // the payloads stripesim delivered, in order
}

// newStripeStack starts the stack; timeout is the charge function's
// (the gateway's invocation deadline).
func newStripeStack(t *testing.T, timeout time.Duration, tune func(*app.ChargeConfig), wrapSim func(http.Handler) http.Handler) *stripeStack {
	t.Helper()
	return newStripeStackAt(t, nil, timeout, tune, wrapSim)
}

// newStripeStackAt starts the stack with the charge function, its store
// and stripesim reading clock; nil is the wall clock.
func newStripeStackAt(t *testing.T, clock *testkit.Clock, timeout time.Duration, tune func(*app.ChargeConfig), wrapSim func(http.Handler) http.Handler) *stripeStack {
	t.Helper()
	now := time.Now
	if clock != nil {
		now = clock.Now
	}
	s := &stripeStack{t: t, d: testkit.Deploy(t), db: testkit.Clients(t).DynamoDB}
	var api http.Handler
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/webhooks/stripe" {
			body, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.webhooks = append(s.webhooks, body)
			s.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(apiSrv.Close)
	s.api = apiSrv.URL
	s.sim = stripesim.New(func(o *stripesim.Options) {
		o.SecretKey, o.WebhookURL, o.WebhookSecret = testSecretKey, apiSrv.URL+"/webhooks/stripe", testWhsec
		o.WebhookRetry, o.Clock = 100*time.Millisecond, now
	})
	t.Cleanup(s.sim.WaitWebhooks)
	var sim http.Handler = s.sim
	if wrapSim != nil {
		sim = wrapSim(sim)
	}
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)
	key, whsec := testkit.Secret(t, testSecretKey), testkit.Secret(t, testWhsec)
	h := s.d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.Provider, w.Charge.ProviderURL, w.Charge.ProviderSecretName = app.ProviderStripe, simSrv.URL, key
		w.Charge.WebhookSecretName = whsec
		w.Deps.Clock = now
		if tune != nil {
			tune(&w.Charge)
		}
	})
	gw, err := gateway.New(h.Handle, httpapi.Routes,
		gateway.WithPublicRoutes(httpapi.RouteWebhook), gateway.WithTenantClaim(testkit.TenantClaim), gateway.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	api = gw
	if s.store, err = dynamostore.New(s.db, s.d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = now }); err != nil {
		t.Fatal(err)
	}
	return s
}

// response is an answer of the API.
type response struct {
	status int
	header http.Header
	body   string
}

func (s *stripeStack) send(req *http.Request) response {
	s.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// charge posts a charge of 1500 EUR to source.
func (s *stripeStack) charge(tenant, key, source string) response {
	s.t.Helper()
	return s.call(http.MethodPost, tenant, "/charges", key, chargeBody(source))
}

// call sends tenant's request to the API, with key as its
// Idempotency-Key unless it is empty.
func (s *stripeStack) call(method, tenant, path, key, body string) response {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.api+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+gateway.TokenPrefix+tenant)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return s.send(req)
}

func chargeBody(source string) string {
	return `{"amount":1500,"currency":"EUR","source":"` + source + `"}`
}

// deliver posts payload to the webhook route with signature.
func (s *stripeStack) deliver(payload []byte, signature string) response {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.api+"/webhooks/stripe", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	if signature != "" {
		req.Header.Set(httpapi.HeaderStripeSignature, signature)
	}
	resp := s.send(req)
	out := events.APIGatewayV2HTTPResponse{StatusCode: resp.status, Body: resp.body, Headers: map[string]string{}}
	for k := range resp.header {
		out.Headers[k] = resp.header.Get(k)
	}
	validateContract(s.t, webhookEvent(payload, signature), out)
	return resp
}

// webhookEvent is a delivery of payload with signature, as API Gateway
// hands it to the function.
func webhookEvent(payload []byte, signature string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/webhooks/stripe", Body: string(payload), Headers: map[string]string{"content-type": "application/json"}}
	if signature != "" {
		ev.Headers[strings.ToLower(httpapi.HeaderStripeSignature)] = signature
	}
	ev.RequestContext.HTTP.Method = http.MethodPost
	return ev
}

// sign signs payload as Stripe does, at ts.
func sign(payload []byte, secret string, ts time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: ts}).Header
}

// record reads tenant's command key; nil if there is none.
func (s *stripeStack) record(tenant, key string) *idem.Record {
	s.t.Helper()
	rec, err := s.store.Get(s.t.Context(), commandKey(s.t, tenant, key))
	if errors.Is(err, idem.ErrNotFound) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

func commandKey(t *testing.T, tenant, key string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, charge.ChargeOperation, key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// chargeRows counts tenant's rows in the charges table.
func (s *stripeStack) chargeRows(tenant string) int {
	s.t.Helper()
	out, err := s.db.Query(s.t.Context(), &dynamodb.QueryInput{
		TableName: aws.String(s.d.ChargesTable), KeyConditionExpression: aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": charge.AttrTenant},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: tenant}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return len(out.Items)
}

// chargedOnce checks that the charge a 201 body names was charged once at
// Stripe and has one row, the tenant's only one.
func (s *stripeStack) chargedOnce(tenant, created string) {
	s.t.Helper()
	var body struct {
		ProviderReference string `json:"provider_reference"`
	}
	if err := json.Unmarshal([]byte(created), &body); err != nil {
		s.t.Fatal(err)
	}
	if n := s.sim.Charged(body.ProviderReference); n != 1 {
		s.t.Errorf("Stripe charged %d times, want 1", n)
	}
	if n := s.chargeRows(tenant); n != 1 {
		s.t.Errorf("%d charge rows, want 1", n)
	}
}

// waitSettled polls the command's record until it is no longer IN_FLIGHT,
// for at most within, and returns it.
func (s *stripeStack) waitSettled(tenant, key string, within time.Duration) *idem.Record {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec := s.record(tenant, key)
		if rec != nil && rec.Status != idem.StatusInFlight {
			return rec
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s/%s still unsettled after %v: %+v", tenant, key, within, rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// begin claims a command as POST /charges would, leaving it IN_FLIGHT as
// a request that charged and died does, and returns its provider
// reference and lease.
func (s *stripeStack) begin(tenant, key, source string) (string, *idem.Lease) {
	s.t.Helper()
	_, fp, err := charge.ParseBody([]byte(chargeBody(source)))
	if err != nil {
		s.t.Fatal(err)
	}
	k := commandKey(s.t, tenant, key)
	b, err := s.store.Begin(s.t.Context(), k, fp, []byte(`{"amount":1500,"currency":"EUR"}`))
	if err != nil {
		s.t.Fatal(err)
	}
	return charge.ProviderReference(k, b.Lease.CreatedAt), b.Lease
}

// piEvent is a webhook event about a PaymentIntent for tenant's key.
func piEvent(typ, tenant, key, reference string) []byte {
	pi := map[string]any{
		"id": "pi_" + testkit.UniqueName("t"), "object": "payment_intent", "amount": 1500, "currency": "eur",
		"status": "succeeded", "metadata": map[string]string{
			"chargeonce_reference": reference, "chargeonce_command": tenant + "#" + charge.ChargeOperation + "#" + key,
		},
	}
	if typ == "payment_intent.payment_failed" {
		pi["status"] = "requires_payment_method"
		pi["last_payment_error"] = map[string]string{"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds"}
	}
	b, _ := json.Marshal(map[string]any{
		"id": "evt_" + testkit.UniqueName("t"), "object": "event", "api_version": "2025-01-27.acacia", "type": typ,
		"created": time.Now().Unix(), "data": map[string]any{"object": pi},
	})
	return b
}

func eventID(t *testing.T, payload []byte) string {
	t.Helper()
	var ev struct{ ID string }
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.ID
}

// eventKey is the deduplication key of a Stripe event's payload.
func eventKey(t *testing.T, payload []byte) idem.Key {
	t.Helper()
	var ev struct {
		ID   string
		Data struct {
			Object struct{ Metadata map[string]string }
		}
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	command, err := idem.ParseKey(ev.Data.Object.Metadata["chargeonce_command"])
	if err != nil {
		t.Fatal(err)
	}
	k, err := charge.Notification{Provider: app.ProviderStripe, EventID: ev.ID, Command: command}.Key()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// eventRecord reads the deduplication record of a Stripe event's payload.
func (s *stripeStack) eventRecord(payload []byte) *idem.Record {
	s.t.Helper()
	rec, err := s.store.Get(s.t.Context(), eventKey(s.t, payload))
	if errors.Is(err, idem.ErrNotFound) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

// onStripe is the charge and reconcile functions with PROVIDER=stripe, on
// a stripesim whose search lags by an hour, all on one clock.
type onStripe struct {
	t       *testing.T
	handler *httpapi.Handler
	recon   *charge.Service
	sim     *stripesim.Simulator
	store   *dynamostore.Store
	table   string // the idempotency table
	clock   *testkit.Clock
	lost    *lossyTransport
}

// lossyTransport loses the charge function's create requests while lose
// is set: the request fails after it could have been sent, and never
// reaches Stripe.
type lossyTransport struct{ lose bool }

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.lose && req.Method == http.MethodPost {
		return nil, errors.New("connection reset by peer")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// newOnStripe builds the stack; tune adjusts the charge function's wiring
// only.
func newOnStripe(t *testing.T, tune ...func(*testkit.Wiring)) *onStripe {
	t.Helper()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	sim, wire := testkit.Stripe(t, clock.Now)
	s := &onStripe{t: t, sim: sim, clock: clock, lost: &lossyTransport{}}
	s.handler = d.ChargeHandler(t, append([]func(*testkit.Wiring){wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) {
			o.HTTPClient, o.Timeout = &http.Client{Transport: s.lost}, time.Second
		})
	}}, tune...)...)
	s.recon = d.ReconcileService(t, wire, func(w *testkit.Wiring) {
		w.Reconcile.RetryBase, w.Reconcile.RetryCap = time.Minute, 4*time.Minute
	})
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	s.store, s.table = store, d.IdempotencyTable
	return s
}

func (s *onStripe) do(key, body string) *http.Response {
	s.t.Helper()
	resp, err := s.handler.Handle(s.t.Context(), post("acme", key, body))
	if err != nil {
		s.t.Fatal(err)
	}
	validateContract(s.t, post("acme", key, body), resp)
	return &http.Response{StatusCode: resp.StatusCode, Header: http.Header{httpapi.HeaderReplayed: {resp.Headers[httpapi.HeaderReplayed]}}}
}

// pending charges source under key, and requires the outcome-pending 503
// of a charge whose outcome is unknown.
func (s *onStripe) pending(key, source string) {
	s.t.Helper()
	if got := s.do(key, strings.Replace(stripeVisa, stripesim.PMVisa, source, 1)).StatusCode; got != http.StatusServiceUnavailable {
		s.t.Fatalf("%s: %d, want 503 outcome-pending", source, got)
	}
}

// pastLease moves the clock past the lease of a request just made (30s
// without a deadline).
func (s *onStripe) pastLease() { s.clock.Advance(31 * time.Second) }

func (s *onStripe) reconcile(key string) charge.Outcome {
	s.t.Helper()
	out, err := s.recon.Reconcile(s.t.Context(), mustKey(s.t, "acme", key))
	if err != nil {
		s.t.Fatalf("reconcile: %v", err)
	}
	return out
}

func (s *onStripe) record(key string) *idem.Record {
	s.t.Helper()
	rec, err := s.store.Get(s.t.Context(), mustKey(s.t, "acme", key))
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

func (s *onStripe) reference(key string) string {
	return charge.ProviderReference(mustKey(s.t, "acme", key), s.record(key).CreatedAt)
}

const stripeVisa = `{"amount":1500,"currency":"EUR","source":"pm_card_visa"}`

// handlerTransport serves requests with a handler in process: a second
// client of the same Stripe simulator, for what a test has Stripe do
// behind the service's back.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// stripeBehind is an adapter on the same simulator, on the test's clock.
func (s *onStripe) stripeBehind() *stripe.Adapter {
	s.t.Helper()
	a, err := stripe.New(testkit.StripeSecret, func(o *stripe.Options) {
		o.BaseURL, o.Clock, o.HTTPClient = "http://stripe.invalid", s.clock.Now, &http.Client{Transport: handlerTransport{s.sim}}
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return a
}

var (
	postRefund = testkit.PostRefund
	getRefund  = testkit.GetRefund
)

// refundRig is a clocked charge function and reconciler whose provider
// calls can be made to fail (faultOn) and whose settling transactions can
// be lost (loseCommits).
type refundRig struct {
	*harness
	clock       *testkit.Clock
	recon       *charge.Service
	fault       atomic.Pointer[pathFault]
	loseCommits atomic.Bool
}

// pathFault is a fault for the provider's POSTs to paths ending in suffix:
// a providersim Sim-Fault, or edge502 (an edge answering 502 for a request
// it never forwarded).
type pathFault struct{ suffix, fault string }

const (
	edge502            = "edge-502"
	providersimTimeout = providersim.FaultTimeout
)

// faultOn sets fault on the provider's POSTs to paths ending in suffix;
// an empty fault clears it.
func (r *refundRig) faultOn(suffix, fault string) { r.fault.Store(&pathFault{suffix, fault}) }

// lostMove sends verb (capture or cancel) with body on acme's charge id
// while fault hits the provider's call. The move is left unsettled, so it
// must answer 503 outcome-pending. The fault is cleared after.
func (r *refundRig) lostMove(t *testing.T, id, verb, body, fault string) {
	t.Helper()
	r.faultOn("/"+verb, fault)
	defer r.faultOn("", "")
	resp := r.do(postMove("acme", id, verb, body))
	if resp.StatusCode != http.StatusServiceUnavailable || problemType(t, resp) != httpapi.ProblemOutcomePending.Slug {
		t.Fatalf("%s behind %s: %d %s, want 503 outcome-pending", verb, fault, resp.StatusCode, resp.Body)
	}
}

func newRefundRig(t *testing.T, tune ...func(*app.ChargeConfig)) *refundRig {
	t.Helper()
	r := &refundRig{clock: testkit.NewClock(time.Now())}
	r.faultOn("", "")
	deps := func(d *app.Deps) {
		d.Clock = r.clock.Now
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: faulty{r}}))
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: losing{r}} })
	}
	r.harness = newHarnessWith(t, harnessConfig{deps: deps, tune: tune})
	r.recon = r.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.SettleWindow = 2 * time.Minute
		w.Deps.Clock = r.clock.Now
	})
	return r
}

// faulty applies the rig's fault to the provider's requests.
type faulty struct{ r *refundRig }

func (f faulty) RoundTrip(req *http.Request) (*http.Response, error) {
	pf := f.r.fault.Load()
	switch {
	case pf.fault == "" || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, pf.suffix):
	case pf.fault == edge502:
		return &http.Response{
			Status: "502 Bad Gateway", StatusCode: http.StatusBadGateway, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: http.NoBody, Request: req,
		}, nil
	default:
		req = req.Clone(req.Context())
		req.Header.Set(providersim.HeaderFault, pf.fault)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// losing fails every TransactWriteItems while loseCommits is set, as
// DynamoDB failing: the function dies between the effect and its record.
type losing struct{ r *refundRig }

func (l losing) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.r.loseCommits.Load() && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		return idemtest.DynamoDBFault(req, "InternalServerError"), nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// charged creates a charge of amount and returns its id.
func (h *harness) charged(t *testing.T, tenant string, amount int64) string {
	t.Helper()
	resp := h.do(post(tenant, newKey(), fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":"tok_visa"}`, amount)))
	wantStatus(t, resp, http.StatusCreated)
	id, _ := chargeOf(t, resp.Body)
	return id
}

// chargeRead is GET /charges/{id} as the client reads it.
type chargeRead struct {
	Amount         int64
	AmountRefunded int64 `json:"amount_refunded"`
	Refunds        []struct {
		ID     string
		Amount int64
	}
}

func (h *harness) readCharge(t *testing.T, tenant, id string) chargeRead {
	t.Helper()
	resp := h.do(get(tenant, id))
	wantStatus(t, resp, http.StatusOK)
	var c chargeRead
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// rows is the deployment's charges table.
func (h *harness) rows(t *testing.T) *charge.Rows {
	t.Helper()
	rows, err := charge.NewRows(testkit.Clients(t).DynamoDB, h.d.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// row is tenant's charge id as its row holds it.
func (h *harness) row(t *testing.T, tenant, id string) charge.Charge {
	t.Helper()
	c, found, err := h.rows(t).Get(t.Context(), tenant, id)
	if err != nil || !found {
		t.Fatalf("charge row %s: %v, %v", id, found, err)
	}
	return c
}

// providerRefunded is what the provider refunded of the charge id, and
// how many refunds it made.
func (h *harness) providerRefunded(t *testing.T, tenant, id string) (amount int64, n int) {
	t.Helper()
	for _, rf := range h.sim.Ledger().RefundsOf(h.row(t, tenant, id).ProviderReference) {
		amount += rf.Amount
		n += rf.Refunds
	}
	return amount, n
}

func refundKey(t *testing.T, tenant, client string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, charge.RefundOperation, client)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func tenantOf(req events.APIGatewayV2HTTPRequest) string {
	return req.RequestContext.Authorizer.JWT.Claims[testkit.TenantClaim]
}

var postMove = testkit.PostMove

// authorized creates a charge of amount to capture later and returns its
// id.
func (h *harness) authorized(t *testing.T, tenant string, amount int64) string {
	t.Helper()
	resp := h.do(post(tenant, newKey(), fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":"tok_visa","capture":false}`, amount)))
	wantStatus(t, resp, http.StatusCreated)
	var c struct {
		ID, Status       string
		AmountAuthorized int64 `json:"amount_authorized"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil || c.Status != charge.StatusRequiresCapture || c.AmountAuthorized != amount {
		t.Fatalf("authorization: %s, %v; want requires_capture of %d", resp.Body, err, amount)
	}
	return c.ID
}

func chargeStatus(t *testing.T, resp events.APIGatewayV2HTTPResponse) (status string, amount int64) {
	t.Helper()
	var c struct {
		Status       any
		ChargeStatus string `json:"charge_status"`
		Amount       int64
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	if c.ChargeStatus != "" {
		return c.ChargeStatus, 0
	}
	st, _ := c.Status.(string)
	return st, c.Amount
}

// captures is how many times the provider captured tenant's charge id.
func (h *harness) captures(t *testing.T, tenant, id string) int {
	t.Helper()
	return h.sim.Ledger().References[h.row(t, tenant, id).ProviderReference].Captures
}

// hookRig is a clocked charge function and reconciler whose DynamoDB and
// provider requests pass through hooks the test sets.
type hookRig struct {
	*harness
	clock *testkit.Clock
	recon *charge.Service
	db    atomic.Pointer[func(req *http.Request, body []byte) *http.Response]
	prov  atomic.Pointer[func(req *http.Request, body []byte) *http.Request]
}

func newHookRig(t *testing.T) *hookRig {
	t.Helper()
	r := &hookRig{clock: testkit.NewClock(time.Now())}
	deps := func(d *app.Deps) {
		d.Clock = r.clock.Now
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: provHook{r}}))
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: dbHook{r}} })
	}
	r.harness = newHarnessWith(t, harnessConfig{deps: deps})
	r.recon = r.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.SettleWindow = 2 * time.Minute
		w.Deps.Clock = r.clock.Now
	})
	return r
}

func readBody(req *http.Request) []byte {
	if req.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b
}

type dbHook struct{ r *hookRig }

func (h dbHook) RoundTrip(req *http.Request) (*http.Response, error) {
	if f := h.r.db.Load(); f != nil {
		if resp := (*f)(req, readBody(req)); resp != nil {
			return resp, nil // the hook answered instead
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

type provHook struct{ r *hookRig }

func (h provHook) RoundTrip(req *http.Request) (*http.Response, error) {
	if f := h.r.prov.Load(); f != nil {
		req = (*f)(req, readBody(req))
	}
	return http.DefaultTransport.RoundTrip(req)
}

// isHold reports whether a DynamoDB request is a refund's hold on its
// charge's row (Rows.hold).
func isHold(req *http.Request, body []byte) bool {
	return strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") && bytes.Contains(body, []byte("SET #hold = :amount"))
}

// dynamoAnswer is DynamoDB's answer to req with status and body.
func dynamoAnswer(req *http.Request, status int, body string) *http.Response {
	return &http.Response{
		Status: http.StatusText(status), StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":     {"application/x-amz-json-1.0"},
			"X-Amzn-Requestid": {"injected"},
			"Content-Length":   {strconv.Itoa(len(body))},
			"X-Amz-Crc32":      {strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10)},
		},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// simKey is the provider simulator's key in these tests, which the
// functions read from a secret.
const simKey = "sk_test_providersim"
