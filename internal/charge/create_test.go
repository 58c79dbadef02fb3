package charge_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
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

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

func TestSameKeyTwiceChargesOnceAndReplays(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, http.StatusCreated)
	if first.Headers["Idempotent-Replayed"] != "" || first.Headers["Location"] == "" || first.Headers["Idempotency-Expires"] == "" {
		t.Fatalf("first response headers %v", first.Headers)
	}
	// Same intent, body re-serialized by a retrying proxy: same fingerprint.
	again := h.do(post("acme", key, `{ "source": "tok_visa", "description": "order 42", "currency": "EUR", "amount": 1500 }`))
	wantStatus(t, again, http.StatusCreated)
	if again.Body != first.Body {
		t.Fatalf("replay body differs:\n%s\n%s", again.Body, first.Body)
	}
	if again.Headers["Idempotent-Replayed"] != "true" || again.Headers["Location"] != first.Headers["Location"] || again.Headers["Idempotency-Expires"] != first.Headers["Idempotency-Expires"] {
		t.Fatalf("replay headers %v, first %v", again.Headers, first.Headers)
	}
	h.wantLedger(t, 1, 1)
	var c struct{ ID string }
	_ = json.Unmarshal([]byte(first.Body), &c)
	got := h.do(get("acme", c.ID))
	wantStatus(t, got, http.StatusOK)
	if got.Body != first.Body {
		t.Fatalf("GET body %s, created %s", got.Body, first.Body)
	}
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.InflightWait = 0 })
	const n = 64
	key := newKey()
	start := make(chan struct{})
	var wg sync.WaitGroup
	resps := make([]events.APIGatewayV2HTTPResponse, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[i], _ = h.handler.Handle(t.Context(), post("acme", key, visa))
		}()
	}
	close(start)
	wg.Wait()
	created, replayed, conflicts := 0, 0, 0
	var body string
	for _, r := range resps {
		switch {
		case r.StatusCode == 201 && r.Headers["Idempotent-Replayed"] == "":
			created++
			body = r.Body
		case r.StatusCode == 201:
			replayed++
		case r.StatusCode == 409 && r.Headers["Retry-After"] != "":
			conflicts++
		default:
			t.Errorf("unexpected response %d %v %s", r.StatusCode, r.Headers, r.Body)
		}
	}
	if created != 1 || created+replayed+conflicts != n {
		t.Fatalf("created %d, replayed %d, conflicts %d", created, replayed, conflicts)
	}
	for _, r := range resps {
		if r.StatusCode == 201 && r.Body != body {
			t.Fatalf("a replay differs from the original: %s vs %s", r.Body, body)
		}
	}
	h.wantLedger(t, 1, 1)
}

func TestInFlightWaitsThenReplays(t *testing.T) {
	t.Parallel()
	h := newHarness(t) // default wait of 2s; the simulator's slow charge takes 2s too
	key := newKey()
	slow := strings.Replace(visa, "tok_visa", "tok_slow", 1)
	var wg sync.WaitGroup
	var first events.APIGatewayV2HTTPResponse
	wg.Add(1)
	go func() { defer wg.Done(); first = h.do(post("acme", key, slow)) }()
	// Wait until the first attempt holds the key, then retry.
	for {
		if _, err := h.store.Get(t.Context(), mustKey(t, "acme", key)); err == nil {
			break
		}
	}
	second := h.do(post("acme", key, slow))
	wg.Wait()
	wantStatus(t, first, 201)
	switch second.StatusCode {
	case 201:
		if second.Body != first.Body || second.Headers["Idempotent-Replayed"] != "true" {
			t.Fatalf("waiting retry got %v %s", second.Headers, second.Body)
		}
	case 409:
		if problemType(t, second) != "request-in-progress" || second.Headers["Retry-After"] == "" {
			t.Fatalf("409 without its problem type or Retry-After: %v %s", second.Headers, second.Body)
		}
	default:
		t.Fatalf("retry while in flight: %d %s", second.StatusCode, second.Body)
	}
	h.wantLedger(t, 1, 1)
}

func TestTwoKeysSameBodyChargeTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.do(post("acme", newKey(), visa))
	b := h.do(post("acme", newKey(), visa))
	wantStatus(t, a, 201)
	wantStatus(t, b, 201)
	if a.Body == b.Body {
		t.Fatal("two intents got the same charge")
	}
	if charges, _ := h.ledger(t); charges != 2 {
		t.Fatalf("provider charges %d, want 2: identical content is not identity", charges)
	}
}

func TestSameKeyOtherBodyIsRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, 201)
	other := h.do(post("acme", key, strings.Replace(visa, "1500", "9900", 1)))
	wantStatus(t, other, http.StatusUnprocessableEntity)
	if other.Headers["Idempotency-Expires"] != first.Headers["Idempotency-Expires"] {
		t.Fatalf("mismatch says the key expires %q, the original %q", other.Headers["Idempotency-Expires"], first.Headers["Idempotency-Expires"])
	}
	if problemType(t, other) != "idempotency-key-reused" || strings.Contains(other.Body, `"id"`) {
		t.Fatalf("mismatch answered %s", other.Body)
	}
	h.wantLedger(t, 1, 1)
	again := h.do(post("acme", key, visa)) // the original is untouched
	if again.Body != first.Body {
		t.Fatalf("original changed after a mismatch: %s", again.Body)
	}
}

// TestWholeAmountWrittenAnyWayIsOneRequest: 32084.0 is an integer in JSON
// Schema's sense, so the handler takes it as 32084, and a retry that writes
// the amount another way is the same request under the key.
func TestWholeAmountWrittenAnyWayIsOneRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	body := func(amount string) string {
		return `{"amount":` + amount + `,"currency":"EUR","source":"tok_visa"}`
	}
	key := newKey()
	first := h.do(post("acme", key, body("32084.0")))
	wantStatus(t, first, http.StatusCreated)
	if _, amount := chargeOf(t, first.Body); amount != 32084 {
		t.Fatalf("charged %d, want 32084: %s", amount, first.Body)
	}
	for _, amount := range []string{"32084", "3.2084e4", "320840E-1", "32084.000"} {
		again := h.do(post("acme", key, body(amount)))
		wantStatus(t, again, http.StatusCreated)
		if again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
			t.Fatalf("amount %s: %v %s, want the replay of %s", amount, again.Headers, again.Body, first.Body)
		}
	}
	if other := h.do(post("acme", key, body("32085.0"))); other.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another amount under the key: %d %s", other.StatusCode, other.Body)
	}
	if fraction := h.do(post("acme", newKey(), body("32084.5"))); fraction.StatusCode != http.StatusBadRequest ||
		!strings.Contains(fraction.Body, "amount: must be a whole number") {
		t.Fatalf("a fraction: %d %s", fraction.StatusCode, fraction.Body)
	}
	h.wantLedger(t, 1, 1)
}

// TestEmptyDescriptionIsTheSameRequest: "description":"" and no
// description are one request under a key, whichever comes first: a retry
// that adds or drops the empty member is replayed, not refused with 422.
func TestEmptyDescriptionIsTheSameRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const without = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	const empty = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":""}`
	for _, order := range [][2]string{{without, empty}, {empty, without}} {
		key := newKey()
		first := h.do(post("acme", key, order[0]))
		wantStatus(t, first, http.StatusCreated)
		if strings.Contains(first.Body, "description") {
			t.Fatalf("%s: the charge has a description: %s", order[0], first.Body)
		}
		again := h.do(post("acme", key, order[1]))
		wantStatus(t, again, http.StatusCreated)
		if again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
			t.Fatalf("%s after %s: %v %s, want the replay of %s", order[1], order[0], again.Headers, again.Body, first.Body)
		}
	}
	h.wantLedger(t, 2, 2)
}

// TestFailedChargeRecordsWhatTheProviderProved: a decline is final and
// replayed. An unavailable provider proved nothing was charged, so the key
// is released and a retry charges. A lost answer proved nothing, so the
// key stays in flight and is queued for the reconciler. Each key keeps its
// request: another body under it is refused.
func TestFailedChargeRecordsWhatTheProviderProved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, source, problem string
		status                int
		headers               []string // what the first answer must carry
		record                idem.Status
		retry                 int  // a retry's status
		replayed              bool // the retry is the first answer again
		results, calls        int  // the provider's, after the retry
		queued                bool // a reconcile message is sent
	}{
		{name: "a decline is stored and replayed", source: "tok_decline", problem: "card-declined",
			status: http.StatusPaymentRequired, record: idem.StatusFailedPermanent,
			retry: http.StatusPaymentRequired, replayed: true, results: 1, calls: 1},
		{name: "unavailable releases, then a retry charges once", source: "tok_unavailable_once", problem: "provider-unavailable",
			status: http.StatusServiceUnavailable, headers: []string{"Retry-After"}, record: idem.StatusReleased,
			retry: http.StatusCreated, results: 1, calls: 2},
		{name: "ambiguous stays in flight and queues reconcile", source: "tok_timeout_once", problem: "outcome-pending",
			status: http.StatusServiceUnavailable, headers: []string{"Retry-After", "Idempotency-Expires"}, record: idem.StatusInFlight,
			retry: http.StatusConflict, results: 1, calls: 1, queued: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *app.ChargeConfig) { c.InflightWait = 0 }) // a retry in flight answers at once
			key := newKey()
			body := strings.Replace(visa, "tok_visa", tc.source, 1)
			first := h.do(post("acme", key, body))
			wantStatus(t, first, tc.status)
			if problemType(t, first) != tc.problem {
				t.Fatalf("answered %s, want %s", first.Body, tc.problem)
			}
			for _, name := range tc.headers {
				if first.Headers[name] == "" {
					t.Fatalf("answered without %s: %v", name, first.Headers)
				}
			}
			if rec, err := h.store.Get(t.Context(), mustKey(t, "acme", key)); err != nil || rec.Status != tc.record {
				t.Fatalf("record %+v, %v; want %s", rec, err, tc.record)
			}
			wantStatus(t, h.do(post("acme", key, strings.Replace(body, "1500", "9900", 1))), http.StatusUnprocessableEntity)
			retry := h.do(post("acme", key, body))
			wantStatus(t, retry, tc.retry)
			if tc.replayed && (retry.Body != first.Body || retry.Headers[httpapi.HeaderReplayed] != "true") {
				t.Fatalf("retry %v %s, want the replay of %s", retry.Headers, retry.Body, first.Body)
			}
			h.wantLedger(t, tc.results, tc.calls)
			// A reconcile message is delayed until the lease runs out; SQS
			// counts it as delayed until then.
			if tc.queued {
				h.wantQueued(t)
			} else if n := h.queued(t); n != 0 {
				t.Fatalf("%d reconcile messages, want none\n%s", n, h.logs)
			}
		})
	}
}

// TestLambdaAuthorizerTenant hands the handler the context a Lambda
// (REQUEST) authorizer returns instead of JWT claims: the tenant is read
// from the member TENANT_CLAIM names, so the same tenant's key replays
// under either kind, and a context without a usable tenant is a 401.
func TestLambdaAuthorizerTenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	lambda := func(ctx map[string]any) events.APIGatewayV2HTTPRequest {
		req := post("acme", key, visa)
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: ctx}
		return req
	}
	created := h.do(lambda(map[string]any{testkit.TenantClaim: "acme"}))
	wantStatus(t, created, 201)
	replayed := h.do(post("acme", key, visa))
	wantStatus(t, replayed, 201)
	if replayed.Headers["Idempotent-Replayed"] != "true" || replayed.Body != created.Body {
		t.Fatalf("the JWT caller of the same tenant got %v %s, want the Lambda caller's answer replayed", replayed.Headers, replayed.Body)
	}
	for name, ctx := range map[string]map[string]any{
		"no context":     nil,
		"other member":   {"tenant": "acme"},
		"not a string":   {testkit.TenantClaim: 42},
		"invalid tenant": {testkit.TenantClaim: "ac#me"},
		"empty tenant":   {testkit.TenantClaim: ""},
	} {
		resp := h.do(lambda(ctx))
		wantStatus(t, resp, 401)
		if got := problemType(t, resp); got != "unauthorized" {
			t.Errorf("%s: problem %q, want unauthorized", name, got)
		}
	}
}

// The contract's rules on the in-memory store (memstore, which the
// conformance suite holds to the DynamoDB store) and the provider
// simulator: no DynamoDB, no Python, so `make check` runs them.

type rules struct {
	t     *testing.T
	h     *httpapi.Handler
	sim   *providersim.Simulator
	store *memstore.Store
}

func newRules(t *testing.T) *rules {
	t.Helper()
	r := &rules{t: t, sim: providersim.New(), store: memstore.New()}
	// The charges table's key, as template.yaml declares it: memstore
	// checks the rows' condition (attribute_not_exists(id)) only on a
	// table whose key it knows.
	r.store.DeclareKey("charges", charge.AttrTenant, charge.AttrID)
	srv := httptest.NewServer(r.sim)
	t.Cleanup(srv.Close)
	// The charges table is written through the record's commit (memstore
	// keeps the writes) and read only by GET /charges/{id}, which these
	// tests do not send: a client that reaches no endpoint will do.
	rows, err := charge.NewRows(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), "charges")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Config{Store: r.store, Rows: rows, Provider: provider.NewClient(srv.URL, ""), Answers: httpapi.Answers{}})
	if err != nil {
		t.Fatal(err)
	}
	if r.h, err = httpapi.NewHandler(svc); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rules) do(key, body string) events.APIGatewayV2HTTPResponse {
	r.t.Helper()
	resp, err := r.h.Handle(r.t.Context(), post("acme", key, body))
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

// charges counts the references the provider charged, and the charge rows
// committed with records.
func (r *rules) charges() (charged, rows int) {
	for _, e := range r.sim.Ledger().References {
		if e.Status == provider.StatusCharged {
			charged++
		}
	}
	return charged, len(r.store.Writes())
}

func (r *rules) wantCharges(n int) {
	r.t.Helper()
	if charged, rows := r.charges(); charged != n || rows != n {
		r.t.Fatalf("%d references charged and %d charge rows, want %d", charged, rows, n)
	}
}

func TestRulesTwiceWithOneKeyIsOneChargeAndTheSameAnswer(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	first := r.do("order-1", visa)
	again := r.do("order-1", visa)
	if first.StatusCode != http.StatusCreated || again.StatusCode != http.StatusCreated || again.Body != first.Body ||
		again.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("first %d %s, again %d %s (replayed=%s)", first.StatusCode, first.Body, again.StatusCode, again.Body, again.Headers[httpapi.HeaderReplayed])
	}
	r.wantCharges(1)
}

func TestRulesConcurrentRequestsAreOneCharge(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			<-start
			r.do("order-1", visa)
		})
	}
	close(start)
	wg.Wait()
	r.wantCharges(1)
}

func TestRulesTwoKeysWithOneBodyAreTwoCharges(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	a, b := r.do("order-1", visa), r.do("order-2", visa)
	if a.StatusCode != http.StatusCreated || b.StatusCode != http.StatusCreated || a.Body == b.Body {
		t.Fatalf("two keys: %d %s and %d %s, want two different 201s", a.StatusCode, a.Body, b.StatusCode, b.Body)
	}
	r.wantCharges(2)
}

func TestRulesOneKeyWithAnotherBodyIsRefused(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	first := r.do("order-1", visa)
	other := r.do("order-1", strings.Replace(visa, "1500", "1501", 1))
	if other.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(other.Body, httpapi.ProblemKeyReused.Slug) {
		t.Fatalf("another body under the key: %d %s, want 422", other.StatusCode, other.Body)
	}
	if again := r.do("order-1", visa); again.Body != first.Body {
		t.Fatalf("the first answer changed: %s, was %s", again.Body, first.Body)
	}
	r.wantCharges(1)
}

func TestRulesAnUnavailableProviderReleasesTheKey(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	body := strings.Replace(visa, "tok_visa", providersim.SourceUnavailableOnce, 1)
	if got := r.do("order-1", body); got.StatusCode != http.StatusServiceUnavailable || got.Headers[httpapi.HeaderIdempotencyExpires] == "" {
		t.Fatalf("provider unavailable: %d %v %s, want 503 with Idempotency-Expires", got.StatusCode, got.Headers, got.Body)
	}
	r.wantCharges(0)
	if got := r.do("order-1", strings.Replace(body, "1500", "1501", 1)); got.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body under a released key: %d, want 422", got.StatusCode)
	}
	if got := r.do("order-1", body); got.StatusCode != http.StatusCreated {
		t.Fatalf("the retry: %d %s, want 201", got.StatusCode, got.Body)
	}
	r.wantCharges(1)
}

func TestRulesADeclineIsStored(t *testing.T) {
	t.Parallel()
	r := newRules(t)
	body := strings.Replace(visa, "tok_visa", providersim.SourceDecline, 1)
	first, again := r.do("order-1", body), r.do("order-1", body)
	if first.StatusCode != http.StatusPaymentRequired || again.Body != first.Body || again.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("decline: %d %s, then %d %s", first.StatusCode, first.Body, again.StatusCode, again.Body)
	}
	if calls := r.sim.Ledger().TotalCalls; calls != 1 {
		t.Fatalf("the provider was asked %d times, want once", calls)
	}
}

// FuzzCreate sends arbitrary POST /charges events through the real handler,
// on the in-memory store (memstore, held to the DynamoDB store by the
// conformance suite), with a provider that is always unavailable. Every
// event gets a response (never a Go error or a panic); an event that fails
// any validation step gets a 4xx problem and touches neither the store nor
// the provider; a valid one claims its key with the fingerprint of its
// body, reaches the provider with the parsed values, and gets the 503 of
// an unavailable provider.
func FuzzCreate(f *testing.F) {
	raw, err := os.ReadFile("testdata/bad_requests.json")
	if err != nil {
		f.Fatal(err)
	}
	var corpus struct{ Cases []badCase }
	if err := json.Unmarshal(raw, &corpus); err != nil {
		f.Fatal(err)
	}
	for _, tc := range corpus.Cases {
		tenant, key, ct, body := "acme", "order-1", "application/json", ""
		if tc.Tenant != nil {
			tenant = *tc.Tenant
		}
		if tc.OmitAuth {
			tenant = ""
		}
		if tc.Key != nil {
			key = *tc.Key
		}
		if tc.ContentType != nil {
			ct = *tc.ContentType
		}
		if tc.Body != nil {
			body = *tc.Body
		}
		if tc.Repeat > 0 {
			body = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"` + strings.Repeat("x", min(tc.Repeat, httpapi.MaxBodyBytes)) + `"}`
		}
		f.Add(tenant, key, !tc.OmitKey, ct, tc.Base64, []byte(body))
	}
	f.Add("acme", "order-1", true, "application/json; charset=utf-8", false,
		[]byte(" {\"source\" : \"tok_visa\", \"description\":\"caf\\u00e9\", \"currency\":\"EUR\",\"amount\":1500}\n"))
	f.Add("acme", "order-2", true, "application/json", false, []byte(`{"amount":3.2084e4,"currency":"EUR","source":"tok_visa"}`))
	f.Add("acme", "order-3", true, "application/json", false, []byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":""}`))
	f.Add("acme", "order-4", true, "application/json", false, []byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":"\ud83d\ude00 \udc00"}`))
	f.Add("acme", "k", true, "application/json", true, []byte(base64.StdEncoding.EncodeToString([]byte(`{"amount":1,"currency":"JPY","source":"x"}`))))

	f.Fuzz(func(t *testing.T, tenant, key string, withKey bool, contentType string, isBase64 bool, body []byte) {
		h, prov := fuzzHandler(t)
		fuzzEnv.epoch.Add(1)
		if k, err := idem.NewKey(tenant, charge.ChargeOperation, key); err == nil {
			prov.expect(k)
		} else {
			prov.expect(idem.Key{})
		}
		fuzzEnv.calls.n.Store(0)

		req := post(tenant, "", string(body))
		req.Headers["content-type"] = contentType
		if withKey {
			req.Headers["idempotency-key"] = key
		}
		req.IsBase64Encoded = isBase64
		resp, err := h.Handle(t.Context(), req)
		if err != nil {
			t.Fatalf("Handle returned an error: %v", err)
		}

		want, reason := expectCreate(tenant, key, withKey, contentType, isBase64, body)
		if reason != "" {
			if resp.StatusCode < 400 || resp.StatusCode >= 500 || resp.Headers["Content-Type"] != httpapi.ContentTypeProblem {
				t.Fatalf("invalid request (%s) got %d %s", reason, resp.StatusCode, resp.Body)
			}
			if calls := fuzzEnv.calls.n.Load(); calls != 0 || prov.calls() != 0 {
				t.Fatalf("invalid request (%s) made %d store calls and %d provider calls", reason, calls, prov.calls())
			}
			return
		}
		if resp.StatusCode != 503 || !strings.Contains(resp.Body, "provider-unavailable") {
			t.Fatalf("valid request got %d %s, want the 503 of an unavailable provider", resp.StatusCode, resp.Body)
		}
		if got := prov.last(); got.Amount != want.Money.Amount || got.Currency != want.Money.Currency || got.Source != want.Source {
			t.Fatalf("provider got %v, want %+v", got, want)
		}
		fp, _ := idem.FingerprintJSON(want.raw)
		if prov.storedFingerprint() != fp.String() {
			t.Fatalf("the claim does not carry the body's fingerprint %s", fp)
		}
	})
}

// parsed is what a valid create event should reach the provider with.
type parsed struct {
	charge.Request
	raw []byte // the decoded body, its amount written as an integer
}

// expectCreate validates an event step by step with the exported building
// blocks, independently of the handler, and says why it is invalid ("" if
// it is valid).
func expectCreate(tenant, key string, withKey bool, contentType string, isBase64 bool, body []byte) (parsed, string) {
	if _, err := idem.NewKey(tenant, charge.ChargeOperation, "probe"); err != nil {
		return parsed{}, "tenant"
	}
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != httpapi.ContentTypeJSON {
		return parsed{}, "content type"
	}
	if isBase64 {
		var err error
		if body, err = base64.StdEncoding.DecodeString(string(body)); err != nil {
			return parsed{}, "base64"
		}
	}
	if len(body) > httpapi.MaxBodyBytes {
		return parsed{}, "size"
	}
	if !withKey {
		return parsed{}, "no key"
	}
	if _, err := charge.ParseCommandID(key); err != nil {
		return parsed{}, "key"
	}
	c, err := idem.CanonicalJSON(body)
	if err != nil {
		return parsed{}, "json"
	}
	var in struct {
		Currency, Source, Description string
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(c, &members); err != nil {
		return parsed{}, "shape"
	}
	for name, value := range members { // exact names only, whatever encoding/json allows
		switch name {
		case "amount", "currency", "source", "description":
		default:
			return parsed{}, "shape"
		}
		if string(value) == "null" { // a null member is not an absent one
			return parsed{}, "shape"
		}
	}
	if err := json.NewDecoder(bytes.NewReader(c)).Decode(&in); err != nil {
		return parsed{}, "shape"
	}
	var number json.Number // stays empty unless the amount is a JSON number
	if raw := members["amount"]; len(raw) > 0 && raw[0] != '"' {
		_ = json.Unmarshal(raw, &number)
	}
	amount, err := charge.ParseAmount(number)
	if err != nil {
		return parsed{}, "values"
	}
	r, err := charge.NewRequest(amount, in.Currency, in.Source, in.Description)
	if err != nil {
		return parsed{}, "values"
	}
	// The request is fingerprinted with its amount as an integer literal,
	// and without an empty description: that is no description.
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(c))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return parsed{}, "shape"
	}
	doc["amount"] = json.Number(strconv.FormatInt(amount, 10))
	if in.Description == "" {
		delete(doc, "description")
	}
	normal, err := json.Marshal(doc)
	if err != nil {
		return parsed{}, "shape"
	}
	return parsed{Request: r, raw: normal}, ""
}

// fuzzEnv is one in-memory store per fuzzing process, with its calls
// counted.
var fuzzEnv struct {
	once  sync.Once
	calls countedStore
	h     *httpapi.Handler
	prov  *unavailableProvider
	err   error
	// epoch moves the store's clock two retentions on per input, so every
	// input meets a table where earlier inputs' keys have expired (a
	// released key keeps its fingerprint until then).
	epoch atomic.Int64
}

func fuzzHandler(t *testing.T) (*httpapi.Handler, *unavailableProvider) {
	t.Helper()
	e := &fuzzEnv
	e.once.Do(func() {
		clock := func() time.Time { return time.Now().Add(time.Duration(e.epoch.Load()) * 48 * time.Hour) }
		e.calls.Store = memstore.New(func(o *memstore.Options) { o.Clock = clock })
		e.prov = &unavailableProvider{store: e.calls.Store}
		// The charges table is never read on this path (the provider
		// charges nothing): a client that reaches no endpoint will do.
		rows, err := charge.NewRows(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), "unused")
		if err != nil {
			e.err = err
			return
		}
		svc, err := charge.NewService(charge.Config{Store: &e.calls, Rows: rows, Provider: e.prov, Answers: httpapi.Answers{}})
		if err != nil {
			e.err = err
			return
		}
		e.h, e.err = httpapi.NewHandler(svc)
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.h, e.prov
}

// TestKeyReusedAfterRetentionIsANewIntent: once the key's retention has
// passed, the README lets it name a new intent. That intent gets its own
// charge, row and answer; the first charge and its row stay as they were.
// (Before, the provider deduplicated the reused reference into the old
// charge, Commit failed on the old row, and the key wedged: 503 then 409
// until the new record expired.)
func TestKeyReusedAfterRetentionIsANewIntent(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, http.StatusCreated)
	firstID, _ := chargeOf(t, first.Body)

	h.pastRetention()
	reused := strings.Replace(visa, "1500", "9900", 1)
	second := h.do(post("acme", key, reused))
	wantStatus(t, second, http.StatusCreated)
	secondID, amount := chargeOf(t, second.Body)
	if secondID == firstID || amount != 9900 || second.Headers[httpapi.HeaderReplayed] != "" {
		t.Fatalf("the new intent answered %v %s (the first was %s)", second.Headers, second.Body, firstID)
	}
	h.wantLedger(t, 2, 2)
	replay := h.do(post("acme", key, reused))
	if replay.Body != second.Body || replay.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("retry of the new intent: %v %s", replay.Headers, replay.Body)
	}
	wantStatus(t, h.do(post("acme", key, visa)), http.StatusUnprocessableEntity)
	for id, want := range map[string]int64{firstID: 1500, secondID: 9900} {
		row := h.do(get("acme", id))
		wantStatus(t, row, http.StatusOK)
		if _, got := chargeOf(t, row.Body); got != want {
			t.Fatalf("charge %s amount %d, want %d", id, got, want)
		}
	}
}

// TestDeclinedKeyReusedAfterRetentionTriesTheNewCard: a 402 is final for
// its retention, not for ever.
func TestDeclinedKeyReusedAfterRetentionTriesTheNewCard(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	declined := h.do(post("acme", key, strings.Replace(visa, "tok_visa", providersim.SourceDecline, 1)))
	wantStatus(t, declined, http.StatusPaymentRequired)
	h.pastRetention()
	wantStatus(t, h.do(post("acme", key, visa)), http.StatusCreated)
	h.wantLedger(t, 2, 2)
}

// TestChargeRowCollisionIsSettled: a charge row already under the
// command's id is never an ambiguous outcome that would wedge the key and
// cycle it through the reconciler. The command's own row settles it as
// created; a conflicting one as a permanent, stated error.
func TestChargeRowCollisionIsSettled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		sameCharge bool
		want       charge.Outcome
		status     int
	}{
		{"the command's own row", true, charge.OutcomeResolvedCharged, http.StatusCreated},
		{"a conflicting row", false, charge.OutcomeChargeConflict, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newClocked(t)
			key := newKey()
			l := h.crashAfterClaim(t, key, visa)
			h.lateCharge(t, l)
			ref := charge.ProviderReference(l.Key, l.CreatedAt)
			looked, err := provider.NewClient(h.d.ProviderURL, "").Lookup(t.Context(), ref)
			if err != nil {
				t.Fatal(err)
			}
			providerID := looked.ChargeID
			if !tc.sameCharge {
				providerID = "pc_someone_else"
			}
			s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
			_, err = testkit.Clients(t).DynamoDB.PutItem(t.Context(), &dynamodb.PutItemInput{
				TableName: aws.String(h.d.ChargesTable),
				Item: map[string]types.AttributeValue{
					charge.AttrTenant: s("acme"), charge.AttrID: s(charge.ChargeID(l.Key, l.CreatedAt)),
					"amount": &types.AttributeValueMemberN{Value: "1500"}, "currency": s("EUR"), "description": s("order 42"),
					"status": s("succeeded"), "provider_reference": s(ref), "provider_charge_id": s(providerID),
					"idempotency_key": s(key), "created_at": s(l.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := h.reconcile(t, key); got != tc.want {
				t.Fatalf("reconcile: %s, want %s", got, tc.want)
			}
			rec, err := h.store.Get(t.Context(), l.Key)
			if err != nil || !rec.Status.Terminal() {
				t.Fatalf("record: %+v, %v; want it settled", rec, err)
			}
			replay := h.do(post("acme", key, visa))
			wantStatus(t, replay, tc.status)
			if replay.Headers[httpapi.HeaderReplayed] != "true" {
				t.Fatalf("retry: %v %s, want the stored answer", replay.Headers, replay.Body)
			}
		})
	}
}

// TestReleasedKeyLivesWithinTheDedupWindow: a key released because Stripe
// refused the charge (a rate limit) expires within Stripe's key window,
// counted from its creation, and the answer says when; a retry after that
// is a new command with a new reference.
func TestReleasedKeyLivesWithinTheDedupWindow(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	body := strings.Replace(stripeVisa, stripesim.PMVisa, stripesim.PMRateLimited, 1)
	req := post("acme", key, body)
	resp, err := s.handler.Handle(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	validateContract(t, req, resp)
	rec := s.record(key)
	want := time.Unix(rec.CreatedAt.Add(stripe.DedupWindow-stripe.DedupMargin).Unix(), 0)
	if resp.StatusCode != http.StatusServiceUnavailable || rec.Status != idem.StatusReleased || !rec.ExpiresAt.Equal(want) {
		t.Fatalf("answer %d, record %s until %v; want 503 and RELEASED until %v", resp.StatusCode, rec.Status, rec.ExpiresAt, want)
	}
	if got := resp.Headers[httpapi.HeaderIdempotencyExpires]; got != want.UTC().Format(http.TimeFormat) {
		t.Fatalf("Idempotency-Expires = %q, want %s", got, want.UTC().Format(http.TimeFormat))
	}
}
