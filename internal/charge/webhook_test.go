package charge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

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
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/webhooks/stripe", Body: string(payload), Headers: map[string]string{"content-type": "application/json"}}
	ev.RequestContext.HTTP.Method = http.MethodPost
	out := events.APIGatewayV2HTTPResponse{StatusCode: resp.status, Body: resp.body, Headers: map[string]string{}}
	for k := range resp.header {
		out.Headers[k] = resp.header.Get(k)
	}
	validateContract(s.t, ev, out)
	return resp
}

// sign signs payload as Stripe does, at ts.
func sign(payload []byte, secret string, ts time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: ts}).Header
}

// record reads tenant's command key; nil if there is none.
func (s *stripeStack) record(tenant, key string) *idem.Record {
	s.t.Helper()
	rec, err := s.store.Get(context.Background(), commandKey(s.t, tenant, key))
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
	out, err := s.db.Query(context.Background(), &dynamodb.QueryInput{
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
	b, err := s.store.Begin(context.Background(), k, fp, []byte(`{"amount":1500,"currency":"EUR"}`))
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

// eventKey is the deduplication key of a Stripe event.
func (s *stripeStack) eventKey(id string) idem.Key {
	s.t.Helper()
	k, err := idem.NewKey(app.ProviderStripe, charge.NotificationOperation, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return k
}

// eventRecord reads the deduplication record of a Stripe event.
func (s *stripeStack) eventRecord(id string) *idem.Record {
	s.t.Helper()
	rec, err := s.store.Get(context.Background(), s.eventKey(id))
	if errors.Is(err, idem.ErrNotFound) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return rec
}

// TestWebhookSettlesAnAmbiguousCharge is the ambiguous charge end to end:
// Stripe's edge times out while its backend goes on charging, so the
// request answers 503 outcome-pending and leaves the command IN_FLIGHT;
// when the charge lands, stripesim sends payment_intent.succeeded to the
// gateway's POST /webhooks/stripe, which settles the command without
// waiting for its lease to let a reconciler in (none runs here; the log
// gives the time it took). The retry replays the 201; Stripe charged once;
// there is one charge row, however many deliveries the event took.
func TestWebhookSettlesAnAmbiguousCharge(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant, key := testkit.UniqueName("acme"), "order-late"
	first := s.charge(tenant, key, stripesim.PMLate)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome-pending") {
		t.Fatalf("first answer = %d %s, want 503 outcome-pending", first.status, first.body)
	}
	rec := s.record(tenant, key)
	if rec == nil || rec.Status != idem.StatusInFlight || !rec.LeaseExpiresAt.After(time.Now()) {
		t.Fatalf("after the timeout the record is %+v, want IN_FLIGHT with a live lease", rec)
	}
	leaseEnds := rec.LeaseExpiresAt

	landed := time.Now()
	if n := s.sim.Land(); n != 1 {
		t.Fatalf("landed %d charges, want 1", n)
	}
	rec = s.waitSettled(tenant, key, 10*time.Second)
	settle := time.Since(landed)
	t.Logf("webhook settle time: %v from the charge landing at Stripe to the record SUCCEEDED (the lease had %v left)",
		settle.Round(time.Millisecond), leaseEnds.Sub(landed).Round(time.Millisecond))
	if rec.Status != idem.StatusSucceeded || rec.Response.Status != http.StatusCreated {
		t.Fatalf("settled record = %s %+v, want SUCCEEDED with the 201", rec.Status, rec.Response)
	}

	retry := s.charge(tenant, key, stripesim.PMLate)
	if retry.status != http.StatusCreated || retry.header.Get(httpapi.HeaderReplayed) != "true" || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %v %s, want the stored 201 replayed", retry.status, retry.header, retry.body)
	}
	s.chargedOnce(tenant, retry.body)

	// Stripe delivers at least once, and redelivers an event whose answer
	// was slow (under load, the settlement can outlast the sender's
	// timeout): every delivery is of the one event, and the same event
	// again is acknowledged as a replay and changes nothing.
	s.sim.WaitWebhooks()
	s.mu.Lock()
	delivered := s.webhooks
	s.mu.Unlock()
	if len(delivered) == 0 {
		t.Fatal("no webhook delivery")
	}
	for _, d := range delivered[1:] {
		if eventID(t, d) != eventID(t, delivered[0]) {
			t.Fatalf("deliveries of two events %s and %s, want one event", eventID(t, delivered[0]), eventID(t, d))
		}
	}
	again := s.deliver(delivered[0], sign(delivered[0], testWhsec, time.Now()))
	if again.status != http.StatusOK || again.header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("redelivery = %d %v %s, want 200 replayed", again.status, again.header, again.body)
	}
	if after := s.record(tenant, key); after.LeaseToken != rec.LeaseToken || after.Attempts != rec.Attempts {
		t.Errorf("the redelivery changed the record: %+v, was %+v", after, rec)
	}
	if ev := s.eventRecord(eventID(t, delivered[0])); ev == nil || ev.Status != idem.StatusSucceeded {
		t.Errorf("the event's deduplication record = %+v, want SUCCEEDED", ev)
	}
}

// TestWebhookRefusesABadSignature: a delivery that does not verify is
// refused with 400 problem+json and stores nothing, neither for the event
// nor for the command it names.
func TestWebhookRefusesABadSignature(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant, key := testkit.UniqueName("acme"), "order-forged"
	ref, _ := s.begin(tenant, key, stripesim.PMVisa)
	payload := piEvent("payment_intent.succeeded", tenant, key, ref)
	for name, sig := range map[string]string{
		"no signature":    "",
		"another secret":  sign(payload, "whsec_someone_else", time.Now()),
		"stale timestamp": sign(payload, testWhsec, time.Now().Add(-10*time.Minute)),
		"garbled header":  "t=abc,v1=zz",
	} {
		resp := s.deliver(payload, sig)
		if resp.status != http.StatusBadRequest || !strings.HasPrefix(resp.header.Get("Content-Type"), httpapi.ContentTypeProblem) {
			t.Errorf("%s: answer = %d %s, want 400 problem+json", name, resp.status, resp.body)
		}
	}
	tampered := bytes.Replace(payload, []byte(`"amount":1500`), []byte(`"amount":1`), 1)
	if resp := s.deliver(tampered, sign(payload, testWhsec, time.Now())); resp.status != http.StatusBadRequest {
		t.Errorf("tampered payload: answer = %d, want 400", resp.status)
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusInFlight || rec.Attempts != 0 {
		t.Errorf("a refused delivery changed the command: %+v", rec)
	}
	if ev := s.eventRecord(eventID(t, payload)); ev != nil {
		t.Errorf("a refused delivery stored the event: %+v", ev)
	}

	// Without a signing secret configured, nothing verifies.
	off := newStripeStack(t, 4*time.Second, func(c *app.ChargeConfig) { c.WebhookSecretName = "" }, nil)
	ref, _ = off.begin(tenant, key, stripesim.PMVisa)
	payload = piEvent("payment_intent.succeeded", tenant, key, ref)
	if resp := off.deliver(payload, sign(payload, testWhsec, time.Now())); resp.status != http.StatusBadRequest {
		t.Errorf("with no secret configured: answer = %d %s, want 400", resp.status, resp.body)
	}
	if rec := off.record(tenant, key); rec.Status != idem.StatusInFlight {
		t.Errorf("with no secret configured, a delivery changed the command: %+v", rec)
	}
}

// TestWebhookSettlesADeclineAndIgnoresTheRest: payment_failed settles an
// IN_FLIGHT command as the 402 a retry replays; events for an unknown
// command, a settled one, another intent's reference, or of another type
// are acknowledged and change nothing.
func TestWebhookSettlesADeclineAndIgnoresTheRest(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	deliver := func(payload []byte) response {
		t.Helper()
		resp := s.deliver(payload, sign(payload, testWhsec, time.Now()))
		if resp.status != http.StatusOK || resp.body != `{"received":true}` {
			t.Fatalf("answer = %d %s, want 200 received", resp.status, resp.body)
		}
		return resp
	}

	ref, _ := s.begin(tenant, "order-declined", stripesim.PMInsufficientFunds)
	deliver(piEvent("payment_intent.payment_failed", tenant, "order-declined", ref))
	rec := s.record(tenant, "order-declined")
	if rec.Status != idem.StatusFailedPermanent || rec.Response.Status != http.StatusPaymentRequired || !bytes.Contains(rec.Response.Body, []byte("insufficient_funds")) {
		t.Fatalf("declined command = %s %+v, want FAILED_PERMANENT with the 402", rec.Status, rec.Response)
	}
	retry := s.charge(tenant, "order-declined", stripesim.PMInsufficientFunds)
	if retry.status != http.StatusPaymentRequired || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %s, want the stored 402", retry.status, retry.body)
	}

	// Settled already: a later event of the other kind changes nothing.
	deliver(piEvent("payment_intent.succeeded", tenant, "order-declined", ref))
	if after := s.record(tenant, "order-declined"); after.Status != idem.StatusFailedPermanent || after.LeaseToken != rec.LeaseToken {
		t.Errorf("an event for a settled command changed it: %+v", after)
	}
	// Unknown command: nothing is created.
	deliver(piEvent("payment_intent.succeeded", tenant, "order-unknown", "co_unknown"))
	if rec := s.record(tenant, "order-unknown"); rec != nil {
		t.Errorf("an event for an unknown command stored %+v", rec)
	}
	// Another intent's reference (an earlier use of the key): nothing.
	_, _ = s.begin(tenant, "order-reused", stripesim.PMVisa)
	deliver(piEvent("payment_intent.succeeded", tenant, "order-reused", "co_an_earlier_intent"))
	if rec := s.record(tenant, "order-reused"); rec.Status != idem.StatusInFlight || rec.Attempts != 0 {
		t.Errorf("an event for another intent's reference changed the command: %+v", rec)
	}
	// Another event type, and a PaymentIntent without our metadata.
	other := bytes.Replace(piEvent("payment_intent.succeeded", tenant, "order-reused", "x"), []byte(`"payment_intent.succeeded"`), []byte(`"charge.refunded"`), 1)
	deliver(other)
	deliver([]byte(`{"id":"evt_foreign","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_foreign","object":"payment_intent","status":"succeeded","metadata":{}}}}`))
	if n := s.chargeRows(tenant); n != 0 {
		t.Errorf("%d charge rows, want none", n)
	}
}

// TestWebhookFencesOffTheLateOriginal: Stripe charges and sends its
// webhook, but its answer to the request reaches the charge function only
// later. The webhook gives the running attempt InflightWait, then preempts
// its lease and settles the command; the original's late commit is refused
// by the fence, so it answers outcome-pending, and nothing is recorded
// twice: one charge at Stripe, one charge row, and the retry replays the
// webhook's 201.
func TestWebhookFencesOffTheLateOriginal(t *testing.T) {
	t.Parallel()
	const late = 2 * time.Second
	slowAnswers := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if r.Method == http.MethodPost {
				time.Sleep(late) // charged (and the webhook sent); the answer is late
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	}
	s := newStripeStack(t, 8*time.Second, func(c *app.ChargeConfig) { c.InflightWait = 300 * time.Millisecond }, slowAnswers)
	tenant, key := testkit.UniqueName("acme"), "order-raced"
	first := s.charge(tenant, key, stripesim.PMVisa)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome-pending") {
		t.Fatalf("the original's answer = %d %s, want 503 outcome-pending (its lease was preempted)", first.status, first.body)
	}
	rec := s.record(tenant, key)
	if rec.Status != idem.StatusSucceeded || rec.Attempts != 1 {
		t.Fatalf("record = %s (attempts %d), want SUCCEEDED by the webhook's take-over", rec.Status, rec.Attempts)
	}
	retry := s.charge(tenant, key, stripesim.PMVisa)
	if retry.status != http.StatusCreated || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %s, want the webhook's 201", retry.status, retry.body)
	}
	s.chargedOnce(tenant, retry.body)
}

// TestWebhookSettlesWhileTheRequestWaits: Stripe charges but its answer
// never comes (pm_sim_timeout); its webhook arrives while the request is
// still waiting, is given INFLIGHT_WAIT, then settles the command, so the
// request's eventual 503 outcome-pending is already out of date: the
// retry replays the webhook's 201, and Stripe charged once.
func TestWebhookSettlesWhileTheRequestWaits(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 8*time.Second, nil, nil)
	tenant, key := testkit.UniqueName("acme"), "order-timeout"
	start := time.Now()
	first := s.charge(tenant, key, stripesim.PMTimeout)
	if first.status != http.StatusServiceUnavailable || !strings.Contains(first.body, "outcome-pending") {
		t.Fatalf("the request whose answer never came = %d %s, want 503 outcome-pending", first.status, first.body)
	}
	rec := s.record(tenant, key)
	if rec.Status != idem.StatusSucceeded {
		t.Fatalf("when the request gave up after %v the record was %s, want SUCCEEDED by the webhook", time.Since(start).Round(time.Millisecond), rec.Status)
	}
	retry := s.charge(tenant, key, stripesim.PMTimeout)
	if retry.status != http.StatusCreated || retry.body != string(rec.Response.Body) {
		t.Fatalf("retry = %d %s, want the webhook's 201", retry.status, retry.body)
	}
	s.chargedOnce(tenant, retry.body)
}

// stuck reports whether key is in the stuck-lease index with a lease that
// ends before before, in any shard: what the sweeper queues.
func (s *stripeStack) stuck(key idem.Key, before time.Time) bool {
	s.t.Helper()
	for shard := range s.store.Shards() {
		for sl, err := range s.store.StuckLeases(context.Background(), shard, before) {
			if err != nil {
				s.t.Fatal(err)
			}
			if sl.Key == key {
				return true
			}
		}
	}
	return false
}

// TestReconcileReleasesADeadDelivery: a delivery that claimed its event
// and died leaves the event's record IN_FLIGHT. While its lease runs, the
// reconciler leaves it alone; once the lease has run out, it takes the
// record over and releases it, without asking Stripe, so it leaves the
// stuck-lease index (the sweeper queues it no more). Stripe's redelivery
// then claims the released record again and settles the command as the
// first delivery would have: one charge row, the command and the event
// SUCCEEDED.
func TestReconcileReleasesADeadDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStripeStack(t, 4*time.Second, func(c *app.ChargeConfig) { c.InflightWait = 100 * time.Millisecond }, nil)
	clock := testkit.NewClock(time.Now())
	recon := s.d.ReconcileService(t, func(w *testkit.Wiring) { w.Deps.Clock = clock.Now })
	reconcile := func(key idem.Key, want charge.Outcome) {
		t.Helper()
		if got, err := recon.Reconcile(ctx, key); err != nil || got != want {
			t.Fatalf("Reconcile = %q, %v; want %q", got, err, want)
		}
	}
	tenant, key := testkit.UniqueName("acme"), "order-dead-delivery"
	ref, _ := s.begin(tenant, key, stripesim.PMVisa)
	payload := piEvent("payment_intent.succeeded", tenant, key, ref)
	id := eventID(t, payload)
	ev := s.eventKey(id)
	reconcile(ev, charge.OutcomeNothingToDo) // no delivery yet

	// The delivery that died: it claimed the event as Notify does.
	if _, err := s.store.Begin(ctx, ev, idem.FingerprintOf([]byte(id)), nil); err != nil {
		t.Fatal(err)
	}
	claimed := s.eventRecord(id)
	reconcile(ev, charge.OutcomeStillLeased)
	if rec := s.eventRecord(id); rec.Status != idem.StatusInFlight || rec.LeaseToken != claimed.LeaseToken || rec.Attempts != 0 {
		t.Fatalf("a live lease was touched: %+v", rec)
	}

	clock.Advance(time.Minute) // past the dead delivery's lease
	if !s.stuck(ev, clock.Now()) {
		t.Fatal("the dead delivery's record is not in the stuck-lease index")
	}
	reconcile(ev, charge.OutcomeReleased)
	if rec := s.eventRecord(id); rec.Status != idem.StatusReleased || rec.Attempts != 1 {
		t.Fatalf("event record = %s (attempts %d), want RELEASED by one take-over", rec.Status, rec.Attempts)
	}
	if s.stuck(ev, clock.Now().Add(time.Hour)) {
		t.Fatal("the released record is still in the stuck-lease index")
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusInFlight {
		t.Fatalf("releasing the event settled the command: %+v", rec)
	}

	resp := s.deliver(payload, sign(payload, testWhsec, time.Now()))
	if resp.status != http.StatusOK || resp.header.Get(httpapi.HeaderReplayed) != "" {
		t.Fatalf("redelivery = %d %v %s, want 200, not a replay", resp.status, resp.header, resp.body)
	}
	if rec := s.record(tenant, key); rec.Status != idem.StatusSucceeded || rec.Response.Status != http.StatusCreated {
		t.Fatalf("command = %s %+v, want SUCCEEDED with the 201", rec.Status, rec.Response)
	}
	if n := s.chargeRows(tenant); n != 1 {
		t.Errorf("%d charge rows, want 1", n)
	}
	if rec := s.eventRecord(id); rec.Status != idem.StatusSucceeded {
		t.Errorf("event record = %s, want SUCCEEDED", rec.Status)
	}
	reconcile(ev, charge.OutcomeNothingToDo) // a settled event's stale message
}
