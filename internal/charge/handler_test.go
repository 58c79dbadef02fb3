package charge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

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
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d; want 1 and 1", charges, calls)
	}
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
			resps[i], _ = h.handler.Handle(context.Background(), post("acme", key, visa))
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
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d; want 1 and 1", charges, calls)
	}
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
		if _, err := h.store.Get(context.Background(), mustKey(t, "acme", key)); err == nil {
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
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d", charges, calls)
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
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d after a mismatch", charges, calls)
	}
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
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d; want 1 and 1", charges, calls)
	}
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
	if charges, calls := h.ledger(t); charges != 2 || calls != 2 {
		t.Fatalf("provider charges %d, calls %d; want 2 and 2", charges, calls)
	}
}

func TestDeclineIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	body := strings.Replace(visa, "tok_visa", "tok_decline", 1)
	first := h.do(post("acme", key, body))
	wantStatus(t, first, http.StatusPaymentRequired)
	if problemType(t, first) != "card-declined" {
		t.Fatalf("decline answered %s", first.Body)
	}
	again := h.do(post("acme", key, body))
	wantStatus(t, again, http.StatusPaymentRequired)
	if again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("decline replay %v %s", again.Headers, again.Body)
	}
	if _, calls := h.ledger(t); calls != 1 {
		t.Fatalf("provider called %d times for a declined card, want 1", calls)
	}
	rec, err := h.store.Get(context.Background(), mustKey(t, "acme", key))
	if err != nil || rec.Status != idem.StatusFailedPermanent {
		t.Fatalf("record %+v %v", rec, err)
	}
}

func TestUnavailableReleasesThenRetryChargesOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	body := strings.Replace(visa, "tok_visa", "tok_unavailable_once", 1)
	first := h.do(post("acme", key, body))
	wantStatus(t, first, http.StatusServiceUnavailable)
	if problemType(t, first) != "provider-unavailable" || first.Headers["Retry-After"] == "" {
		t.Fatalf("unavailable answered %v %s", first.Headers, first.Body)
	}
	if rec, err := h.store.Get(context.Background(), mustKey(t, "acme", key)); err != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("record after unavailable: want released, got %+v, %v", rec, err)
	}
	other := h.do(post("acme", key, strings.Replace(body, "1500", "9900", 1)))
	wantStatus(t, other, http.StatusUnprocessableEntity) // the released key keeps its request
	retry := h.do(post("acme", key, body))
	wantStatus(t, retry, http.StatusCreated)
	if charges, _ := h.ledger(t); charges != 1 {
		t.Fatalf("provider charges %d, want 1", charges)
	}
}

func TestAmbiguousStaysInFlightAndQueuesReconcile(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.InflightWait = 0 })
	key := newKey()
	body := strings.Replace(visa, "tok_visa", "tok_timeout_once", 1)
	first := h.do(post("acme", key, body))
	wantStatus(t, first, http.StatusServiceUnavailable)
	if problemType(t, first) != "outcome-pending" || first.Headers["Retry-After"] == "" || first.Headers["Idempotency-Expires"] == "" {
		t.Fatalf("ambiguous answered %v %s", first.Headers, first.Body)
	}
	k := mustKey(t, "acme", key)
	rec, err := h.store.Get(context.Background(), k)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("record after ambiguous outcome: %+v %v", rec, err)
	}
	retry := h.do(post("acme", key, body))
	wantStatus(t, retry, http.StatusConflict)
	if charges, calls := h.ledger(t); charges != 1 || calls != 1 {
		t.Fatalf("provider charges %d, calls %d", charges, calls)
	}
	// The reconcile message is delayed until the lease runs out; SQS shows
	// it as delayed until then.
	h.wantOneQueued(t)
}

// wantOneQueued checks the reconcile queue holds one message, delayed or
// visible.
func (h *harness) wantOneQueued(t *testing.T) {
	t.Helper()
	out, err := testkit.Clients(t).SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(h.queue.URL),
		AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessages"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Attributes["ApproximateNumberOfMessagesDelayed"] != "1" && out.Attributes["ApproximateNumberOfMessages"] != "1" {
		t.Fatalf("reconcile queue attributes %v, want one message", out.Attributes)
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

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	a := h.do(post("tenant-a", key, visa))
	b := h.do(post("tenant-b", key, visa))
	wantStatus(t, a, 201)
	wantStatus(t, b, 201) // not a replay of tenant-a's answer
	if b.Headers["Idempotent-Replayed"] != "" || a.Body == b.Body {
		t.Fatalf("tenant-b got tenant-a's answer: %v %s", b.Headers, b.Body)
	}
	if charges, _ := h.ledger(t); charges != 2 {
		t.Fatalf("provider charges %d, want 2", charges)
	}
	// A mismatch in one tenant is not seen from the other.
	if r := h.do(post("tenant-b", key, strings.Replace(visa, "1500", "1", 1))); r.StatusCode != 422 {
		t.Fatalf("tenant-b mismatch: %d", r.StatusCode)
	}
	var ca struct{ ID string }
	_ = json.Unmarshal([]byte(a.Body), &ca)
	wantStatus(t, h.do(get("tenant-a", ca.ID)), 200)
	nf := h.do(get("tenant-b", ca.ID))
	wantStatus(t, nf, 404)
	wantStatus(t, h.do(get("tenant-a", "ch_000000000000000000000000")), 404)
}
