package charge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// The tests here hold the charge path to one rule: it tells a client
// "nothing was charged" only with proof, and never sends the provider a
// request it can no longer deduplicate.

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
	ctx := context.Background()
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
	resp, err := s.handler.Handle(context.Background(), req)
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

// TestWebhookRecordsAChargeOfAReleasedCommand: a command was released on
// evidence Stripe's own notification now contradicts. The charge is
// recorded (SUCCEEDED, one row) and a retry replays its 201; it is never
// just logged, since no one would learn of it otherwise.
func TestWebhookRecordsAChargeOfAReleasedCommand(t *testing.T) {
	t.Parallel()
	s := newStripeStack(t, 4*time.Second, nil, nil)
	tenant := testkit.UniqueName("acme")
	ref, lease := s.begin(tenant, "order-released", stripesim.PMVisa)
	if err := s.store.Release(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	payload := piEvent("payment_intent.succeeded", tenant, "order-released", ref)
	if resp := s.deliver(payload, sign(payload, testWhsec, time.Now())); resp.status != http.StatusOK {
		t.Fatalf("delivery: %d %s", resp.status, resp.body)
	}
	rec := s.record(tenant, "order-released")
	if rec.Status != idem.StatusSucceeded || rec.Response == nil || rec.Response.Status != http.StatusCreated {
		t.Fatalf("after the event: %+v, want SUCCEEDED with the 201", rec)
	}
	if n := s.chargeRows(tenant); n != 1 {
		t.Fatalf("%d charge rows, want 1", n)
	}
	if resp := s.charge(tenant, "order-released", stripesim.PMVisa); resp.status != http.StatusCreated || resp.header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %s, want the stored 201 replayed", resp.status, resp.body)
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
	resp, err := s.handler.Handle(context.Background(), req)
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

// TestReplayRefusedOutrightReleasesTheKey: the create never reached
// Stripe, and its PaymentMethod id is well formed but unknown to Stripe.
// The reconciler's replay is refused with 400 resource_missing, which
// proves nothing was or will be charged: the key is released, and the
// next retry is answered provider-rejected rather than 409 for ever.
func TestReplayRefusedOutrightReleasesTheKey(t *testing.T) {
	t.Parallel()
	s := newOnStripe(t)
	key := newKey()
	const unknownPM = "pm_unknown_to_stripe"
	body := strings.Replace(stripeVisa, stripesim.PMVisa, unknownPM, 1)
	s.lost.lose = true
	s.pending(key, unknownPM)
	s.lost.lose = false
	s.pastLease()
	if got := s.reconcile(key); got != charge.OutcomeReleased {
		t.Fatalf("reconcile of a replay Stripe refuses: %s, want %s", got, charge.OutcomeReleased)
	}
	if got := s.do(key, body).StatusCode; got != http.StatusBadGateway {
		t.Fatalf("retry: %d, want 502 provider-rejected", got)
	}
	if n := s.sim.Charged(s.reference(key)); n != 0 {
		t.Fatalf("charged %d times", n)
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
	resp, err := h.Handle(context.Background(), post("acme", key, body))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim refused with a 400 AccessDeniedException: %d %s", resp.StatusCode, resp.Body)
	if strings.Contains(resp.Body, "outcome-pending") {
		t.Errorf("a claim DynamoDB refused unprocessed is answered outcome-pending: %d %s", resp.StatusCode, resp.Body)
	}
	tr.refuse = false
	resp, err = h.Handle(context.Background(), post("acme", key, body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("retry: %d %s, want 201", resp.StatusCode, resp.Body)
	}
}

// misrouted answers POSTs while set as Stripe answers a request to a URL it
// does not serve (a wrong base URL or path prefix, a proxy's rewrite): 404
// invalid_request_error "Unrecognized request URL", which says nothing of
// the request that was meant.
type misrouted struct{ on bool }

func (m *misrouted) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.on && req.Method == http.MethodPost {
		body := `{"error":{"message":"Unrecognized request URL (POST: /v1/payment_intents). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.","type":"invalid_request_error"}}`
		return &http.Response{
			Status: "404 Not Found", StatusCode: http.StatusNotFound, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/json"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req,
		}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestMisroutedReplayProvesNothing: Stripe charged the command and its
// answer was lost (outcome-pending). The reconciler's replay meets a 404
// "Unrecognized request URL" (a misrouted request), which names no
// parameter of the request and so proves nothing: the command is not
// released, and its client, coming back a day later, is not charged a
// second time under a new reference.
func TestMisroutedReplayProvesNothing(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	sim, wire := testkit.Stripe(t, clock.Now)
	h := d.ChargeHandler(t, wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) { o.Timeout = time.Second })
	})
	route := &misrouted{}
	recon := d.ReconcileService(t, wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) {
			o.HTTPClient = &http.Client{Transport: route}
		})
	})
	ctx := context.Background()
	key := newKey()
	body := `{"amount":1500,"currency":"EUR","source":"` + stripesim.PMTimeout + `"}`
	resp, err := h.Handle(ctx, post("acme", key, body))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("charge whose answer is lost: %d %v, want 503 outcome-pending", resp.StatusCode, err)
	}
	k := mustKey(t, "acme", key)
	clock.Advance(31 * time.Second)
	route.on = true
	out, err := recon.Reconcile(ctx, k)
	t.Logf("reconcile with a misrouted replay: %s %v", out, err)
	if out == charge.OutcomeReleased {
		t.Errorf("a charged command was released on a 404 for an unrecognised URL")
	}
	route.on = false
	// The client, told outcome-pending, comes back the next day.
	clock.Advance(23*time.Hour + time.Minute)
	resp, err = h.Handle(ctx, post("acme", key, body))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("client retry a day later: %d", resp.StatusCode)
	n := 0
	for _, e := range sim.Ledger() {
		n += e.Succeeded
	}
	if n > 1 {
		t.Errorf("Stripe charged %d PaymentIntents for one intent (%+v)", n, sim.Ledger())
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
