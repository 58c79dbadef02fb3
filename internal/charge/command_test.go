package charge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
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
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// The tests here hold the charge path to one rule: it tells a client
// "nothing was charged" only with proof, and never sends the provider a
// request it can no longer deduplicate.

// switchedThrottle throttles every PutItem once on is set.
type switchedThrottle struct{ on *atomic.Bool }

func (s switchedThrottle) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.on.Load() {
		return throttle{}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestThrottledRetryNeverSaysNothingWasCharged: a retry whose claim is
// throttled must not answer "Nothing was charged" for an intent that was,
// or may have been. The first request charges the card (201), or its
// provider call answers too late (503 outcome-pending, the record
// IN_FLIGHT, the charge made).
func TestThrottledRetryNeverSaysNothingWasCharged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		source string
		first  func(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest)
	}{
		{"charged", "tok_visa", func(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest) {
			wantStatus(t, h.do(req), http.StatusCreated)
		}},
		{"pending", providersim.SourceSlow, func(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest) {
			ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
			defer cancel()
			first, err := h.handler.Handle(ctx, req)
			if err != nil || problemType(t, first) != "outcome-pending" {
				t.Fatalf("first: %d %s, %v; want outcome-pending", first.StatusCode, first.Body, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			on := &atomic.Bool{}
			h := newHarnessWith(t, harnessConfig{
				tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.CommitReserve = 500 * time.Millisecond }},
				sim:  []func(*providersim.Options){providersim.WithSlowDelay(3 * time.Second)},
				deps: func(d *app.Deps) {
					d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
						o.HTTPClient = &http.Client{Transport: switchedThrottle{on}}
						o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
					})
				},
			})
			req := post("acme", newKey(), strings.Replace(visa, "tok_visa", tc.source, 1))
			tc.first(t, h, req)
			if charges, _ := h.ledger(t); charges != 1 {
				t.Fatalf("provider charges %d, want 1", charges)
			}
			on.Store(true)
			again := h.do(req)
			on.Store(false)
			if strings.Contains(strings.ToLower(again.Body), "nothing was charged") {
				t.Fatalf("retry answered %d %s: says nothing was charged", again.StatusCode, again.Body)
			}
		})
	}
}

// TestReclaimPastTheDedupWindowIsLookedUpNotSent: Stripe charged a
// command that was nevertheless released, and its key outlived Stripe's
// 24-hour key window (a retention counted from a later release). A retry
// then must not send the old reference, which Stripe would take as a new
// charge: the charge path searches for it, finds the charge and records
// it, and the card is charged once.
func TestReclaimPastTheDedupWindowIsLookedUpNotSent(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	k := mustKey(t, "acme", key)
	_, fp, err := charge.ParseBody([]byte(stripeVisa))
	if err != nil {
		t.Fatal(err)
	}
	long, err := dynamostore.New(testkit.Clients(t).DynamoDB, s.table, func(o *dynamostore.Options) {
		o.Clock, o.Retention = s.clock.Now, 48*time.Hour
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	b, err := long.Begin(ctx, k, fp, []byte(`{"amount":1500,"currency":"EUR","source":"pm_card_visa"}`))
	if err != nil {
		t.Fatal(err)
	}
	ref := charge.ProviderReference(k, b.Lease.CreatedAt)
	first, err := s.stripeBehind().Charge(ctx, provider.ChargeRequest{Reference: ref, Amount: 1500, Currency: "EUR", Source: stripesim.PMVisa, Command: k.String()})
	if err != nil || first.Status != provider.StatusCharged {
		t.Fatalf("the first charge: %+v, %v", first, err)
	}
	if err := long.Release(ctx, b.Lease); err != nil { // the wrong release
		t.Fatal(err)
	}
	s.clock.Advance(stripe.DedupWindow + time.Hour)

	resp, err := s.handler.Handle(ctx, post("acme", key, stripeVisa))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.sim.Charged(ref); n != 1 {
		t.Fatalf("Stripe charged the reference %d times, want 1", n)
	}
	var c struct {
		ProviderReference string `json:"provider_reference"`
	}
	_ = json.Unmarshal([]byte(resp.Body), &c)
	if resp.StatusCode != http.StatusCreated || c.ProviderReference != ref || s.record(key).Status != idem.StatusSucceeded {
		t.Fatalf("retry past the key window: %d %s, want the 201 of the charge under %s", resp.StatusCode, resp.Body, ref)
	}
}

// TestClaimWhoseAnswerIsLostIsPending: the claim lands, but its answer is
// lost and the SDK's retries are throttled. The record is IN_FLIGHT with
// the request, and the reconciler will replay it, so the answer is
// outcome-pending, never "nothing was charged"; a retry gets 409 while the
// lease runs, then the charge the reconciler made, once.
func TestClaimWhoseAnswerIsLostIsPending(t *testing.T) {
	t.Parallel()
	loser := &idemtest.LostClaim{}
	s := newOnStripe(t, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: loser}
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxBackoff, so.RateLimiter = 20*time.Millisecond, ratelimit.None
			})
		})
	})
	key := newKey()
	loser.Arm()
	req := post("acme", key, stripeVisa)
	resp, err := s.handler.Handle(t.Context(), req)
	loser.Disarm()
	if err != nil {
		t.Fatal(err)
	}
	validateContract(t, req, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Body, httpapi.ProblemOutcomePending.Slug) {
		t.Fatalf("a claim whose answer was lost: %d %s, want 503 outcome-pending", resp.StatusCode, resp.Body)
	}
	if rec := s.record(key); rec.Status != idem.StatusInFlight {
		t.Fatalf("record %s, want IN_FLIGHT", rec.Status)
	}
	if got := s.do(key, stripeVisa).StatusCode; got != http.StatusConflict {
		t.Fatalf("retry under the lease: %d, want 409", got)
	}
	s.pastLease()
	if got := s.reconcile(key); got != charge.OutcomeResolvedCharged {
		t.Fatalf("reconcile: %s, want %s", got, charge.OutcomeResolvedCharged)
	}
	if r := s.do(key, stripeVisa); r.StatusCode != http.StatusCreated || r.Header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("retry after the reconciler: %d, want the stored 201", r.StatusCode)
	}
	if n := s.sim.Charged(s.reference(key)); n != 1 {
		t.Fatalf("charged %d times, want 1", n)
	}
}

// refusingDynamo answers every PutItem with DynamoDB's 400 of kind while
// refuse is set: a request DynamoDB refused before processing it.
type refusingDynamo struct {
	refuse bool
	kind   string
}

func (r *refusingDynamo) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.refuse && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		resp := idemtest.DynamoDBFault(req, r.kind)
		resp.StatusCode, resp.Status = http.StatusBadRequest, "400 Bad Request"
		return resp, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestClaimRefusedUnprocessedIsNotPending: DynamoDB refuses the claim
// with a client error (AccessDeniedException, a 400: never processed) at
// every attempt. Nothing is stored, so the answer is not outcome-pending,
// and the retry after it is a fresh 201, not a 409.
func TestClaimRefusedUnprocessedIsNotPending(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	tr := &refusingDynamo{refuse: true, kind: "AccessDeniedException"}
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: tr} })
	})
	key := newKey()
	body := `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	resp, err := h.Handle(t.Context(), post("acme", key, body))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim refused with a 400 AccessDeniedException: %d %s", resp.StatusCode, resp.Body)
	if strings.Contains(resp.Body, "outcome-pending") {
		t.Errorf("a claim DynamoDB refused unprocessed is answered outcome-pending: %d %s", resp.StatusCode, resp.Body)
	}
	tr.refuse = false
	resp, err = h.Handle(t.Context(), post("acme", key, body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("retry: %d %s, want 201", resp.StatusCode, resp.Body)
	}
}

// TestResentCreateRateLimitedIsNotNothingCharged: the charge function's
// create reaches Stripe on a kept-alive connection, Stripe charges, the
// connection drops before the answer; Go's transport re-sends the create
// (it carries an Idempotency-Key) on a new connection, and Stripe's edge
// rate-limits that re-send (429). The card was charged, so the client is
// not told nothing was.
func TestResentCreateRateLimitedIsNotNothingCharged(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		posts int
		ref   string
	)
	s := newStripeStack(t, 10*time.Second, nil, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" {
				next.ServeHTTP(w, r)
				return
			}
			mu.Lock()
			posts++
			n := posts
			if n == 2 {
				ref = r.Header.Get("Idempotency-Key")
			}
			mu.Unlock()
			switch n {
			case 2: // executed by Stripe, answer lost
				next.ServeHTTP(httptest.NewRecorder(), r)
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					panic(http.ErrAbortHandler)
				}
				_ = conn.Close()
			case 3: // the transport's re-send, rate-limited at the edge
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`))
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	if r := s.charge("acme", "warm-up", stripesim.PMVisa); r.status != http.StatusCreated {
		t.Fatalf("warm-up: %d %s", r.status, r.body)
	}
	r := s.charge("acme", "order-2", stripesim.PMVisa)
	mu.Lock()
	charged := s.sim.Charged(ref)
	mu.Unlock()
	t.Logf("posts=%d charged(%s)=%d answer=%d %s", posts, ref, charged, r.status, r.body)
	if charged != 1 {
		t.Fatalf("setup: Stripe charged %d times", charged)
	}
	if r.status == http.StatusServiceUnavailable && strings.Contains(r.body, "provider-unavailable") ||
		r.status == http.StatusBadGateway {
		t.Fatalf("card charged once, yet the client is told nothing was charged: %d %s", r.status, r.body)
	}
}

// TestProviderRejectionIsFinal: a provider 4xx means our request was
// refused before anything was charged: the key is released and the
// client told, with a problem it does not retry, instead of a 500.
func TestProviderRejectionIsFinal(t *testing.T) {
	t.Parallel()
	h := newClocked(t, func(c *app.ChargeConfig) { c.ProviderURL += "/no-such-prefix" })
	key := newKey()
	resp := h.do(post("acme", key, visa))
	wantStatus(t, resp, http.StatusBadGateway)
	if problemType(t, resp) != "provider-rejected" || resp.Headers["Retry-After"] != "" {
		t.Fatalf("rejection answered %v %s", resp.Headers, resp.Body)
	}
	rec, err := h.store.Get(t.Context(), mustKey(t, "acme", key))
	if err != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("record after a rejection: %+v, %v; want released", rec, err)
	}
}

// throttle answers every PutItem with DynamoDB's throttling error,
// without forwarding it.
type throttle struct{}

func (throttle) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		return http.DefaultTransport.RoundTrip(req)
	}
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}`
	return &http.Response{
		StatusCode: http.StatusBadRequest, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Errortype": {"ThrottlingException"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: req,
	}, nil
}

// TestThrottledClaimAnswers503: throttling (or a conflict, or a 5xx) on
// the claim is not a server bug: the client gets a 503 it may retry at
// once, and the provider is never called.
func TestThrottledClaimAnswers503(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: throttle{}}
			o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
		})
	}})
	resp := h.do(post("acme", newKey(), visa))
	wantStatus(t, resp, http.StatusServiceUnavailable)
	if problemType(t, resp) != "service-unavailable" || resp.Headers["Retry-After"] == "" {
		t.Fatalf("throttled claim answered %v %s", resp.Headers, resp.Body)
	}
	if _, calls := h.ledger(t); calls != 0 {
		t.Fatalf("provider calls %d, want 0", calls)
	}
}

// TestAmbiguousPathQueuesAfterTheDeadline: the provider call leaves the
// commit reserve of the request's time, and the reconcile message is sent
// on its own time, so an answer that never comes is still queued. (Before,
// the provider call could use the whole budget and the enqueue ran on an
// expired context.)
func TestAmbiguousPathQueuesAfterTheDeadline(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.CommitReserve, c.InflightWait = 500*time.Millisecond, 0 }},
		sim:  []func(*providersim.Options){providersim.WithSlowDelay(3 * time.Second)},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	started := time.Now()
	resp, err := h.handler.Handle(ctx, post("acme", newKey(), strings.Replace(visa, "tok_visa", providersim.SourceSlow, 1)))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, resp, http.StatusServiceUnavailable)
	if problemType(t, resp) != "outcome-pending" {
		t.Fatalf("slow provider answered %s", resp.Body)
	}
	if took := time.Since(started); took > 1500*time.Millisecond {
		t.Fatalf("the handler answered after %s, past the request's deadline", took)
	}
	h.wantQueued(t)
}

// TestMissingKeyFailsWithNothingClaimed: a charge whose provider key
// cannot be read (its secret missing) answers 500 with nothing claimed
// and nothing sent, so the key is not left IN_FLIGHT: once the secret
// exists, a retry under the same key charges, once.
func TestMissingKeyFailsWithNothingClaimed(t *testing.T) {
	t.Parallel()
	name := testkit.UniqueName("chargeonce/provider-api-key")
	clock := testkit.NewClock(time.Now())
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.ProviderSecretName = name }},
		deps: func(d *app.Deps) { d.Clock = clock.Now },
		sim:  []func(*providersim.Options){providersim.WithSecret(simKey)},
	})
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, http.StatusInternalServerError)
	if _, err := h.store.Get(t.Context(), mustKey(t, "acme", key)); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after the key could not be read: %v, want none", err)
	}
	h.wantLedger(t, 0, 0)
	if !strings.Contains(h.logs.String(), `"error_class":"provider_not_ready"`) {
		t.Errorf("the 500 is not logged as provider_not_ready:\n%s", h.logs.String())
	}
	if strings.Contains(h.logs.String(), simKey) {
		t.Error("the logs show the key")
	}

	testkit.CreateSecret(t, name, simKey)
	clock.Advance(30 * time.Second) // the failed read is remembered until then
	wantStatus(t, h.do(post("acme", key, visa)), http.StatusCreated)
	h.wantLedger(t, 1, 1)
}

// elsewhereAfterCommit is a store whose Commit lands, then hears its
// claim's clear refused by another Region, as mid-failover.
type elsewhereAfterCommit struct{ *memstore.Store }

func (s elsewhereAfterCommit) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	if err := s.Store.Commit(ctx, l, resp, writes...); err != nil {
		return err
	}
	return fmt.Errorf("idem: commit: %w", &idem.ClaimedElsewhereError{Region: "b"})
}

// queuedKeys is a reconcile queue that keeps the keys it is given.
type queuedKeys struct {
	mu   sync.Mutex
	keys []idem.Key
}

func (q *queuedKeys) EnqueueReconcile(_ context.Context, key idem.Key, _ time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.keys = append(q.keys, key)
	return nil
}

// queued counts how often key was queued.
func (q *queuedKeys) queued(key idem.Key) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, k := range q.keys {
		if k == key {
			n++
		}
	}
	return n
}

// TestACommittedChargeWhoseClaimIsClaimedElsewhereIsNotAFailoverAnswer:
// the commit landed; only the claim's clear was refused. The charge is
// not "awaiting another Region": the answer is outcome-pending, and the
// key is queued for the reconciler. A retry replays the charge.
func TestACommittedChargeWhoseClaimIsClaimedElsewhereIsNotAFailoverAnswer(t *testing.T) {
	t.Parallel()
	sim := providersim.New()
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	store := memstore.New()
	store.DeclareKey("charges", charge.AttrTenant, charge.AttrID)
	rows, err := charge.NewRows(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), "charges")
	if err != nil {
		t.Fatal(err)
	}
	q := &queuedKeys{}
	svc, err := charge.NewService(charge.Config{Store: elsewhereAfterCommit{store}, Rows: rows, Provider: provider.NewClient(srv.URL, ""), Answers: httpapi.Answers{}, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.NewHandler(svc)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Handle(t.Context(), post("acme", "order-1", visa))
	if err != nil {
		t.Fatal(err)
	}
	if got := problemType(t, resp); got != "outcome-pending" || len(q.keys) != 1 {
		t.Fatalf("a committed charge whose claim's clear was refused: %d %q, %d keys queued; want outcome-pending, queued", resp.StatusCode, got, len(q.keys))
	}
}
