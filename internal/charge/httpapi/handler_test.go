package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

const visa = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`

// problemOf reads a problem answer's type slug and detail.
func problemOf(t *testing.T, resp events.APIGatewayV2HTTPResponse) (string, string) {
	t.Helper()
	var p struct{ Type, Detail string }
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || resp.Headers["Content-Type"] != httpapi.ContentTypeProblem {
		t.Fatalf("%d %v %s: not a problem", resp.StatusCode, resp.Headers, resp.Body)
	}
	return strings.TrimPrefix(p.Type, httpapi.ProblemBase), p.Detail
}

// limitedStack is a deployment whose tenants may start rate requests a
// second, with a clock that moves only when told.
func limitedStack(t *testing.T, rate int) (*testkit.Deployment, *httpapi.Handler, *testkit.Clock) {
	t.Helper()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
		w.Deps.Clock = clock.Now
	})
	return d, h, clock
}

// handle answers req, and holds the answer to api/openapi.yaml.
func handle(t *testing.T, h *httpapi.Handler, req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := h.Handle(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	path := req.RawPath
	if req.RawQueryString != "" {
		path += "?" + req.RawQueryString
	}
	testkit.CheckAnswer(t, req.RequestContext.HTTP.Method, path, req.Headers, resp.StatusCode, resp.Headers, resp.Body)
	return resp
}

// TestPastItsRateATenantIsRefusedBeforeItsKeyIsClaimed: the requests past
// a tenant's rate are answered 429 rate-limited with Retry-After. Nothing
// of them is stored, and the provider never hears of them; other tenants
// are served meanwhile, and the same keys charge once the second is over.
func TestPastItsRateATenantIsRefusedBeforeItsKeyIsClaimed(t *testing.T) {
	t.Parallel()
	d, h, clock := limitedStack(t, 2)
	var refused []string
	for i := range 5 {
		key := fmt.Sprintf("flood-%d", i)
		resp := handle(t, h, testkit.PostCharge("flood", key, visa))
		if i < 2 {
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("request %d: %d %s, want 201", i, resp.StatusCode, resp.Body)
			}
			continue
		}
		slug, detail := problemOf(t, resp)
		if resp.StatusCode != http.StatusTooManyRequests || slug != "rate-limited" || resp.Headers[httpapi.HeaderRetryAfter] != "1" ||
			!strings.Contains(detail, "2 requests a second") || !strings.Contains(detail, "same key") {
			t.Fatalf("request %d: %d %v %s, want 429 rate-limited, Retry-After 1, naming the rate and the key", i, resp.StatusCode, resp.Headers, resp.Body)
		}
		refused = append(refused, key)
	}
	if resp := handle(t, h, testkit.PostCharge("calm", "calm-1", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("another tenant meanwhile: %d %s, want 201", resp.StatusCode, resp.Body)
	}

	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range refused {
		key, _ := idem.NewKey("flood", charge.ChargeOperation, k)
		if _, err := store.Get(t.Context(), key); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("refused key %s: record %v, want none", k, err)
		}
	}
	if got := d.Sim.Ledger().TotalCharges; got != 3 {
		t.Fatalf("provider charges %d, want 3: the flood's two and the other tenant's", got)
	}

	clock.Advance(time.Second)
	if resp := handle(t, h, testkit.PostCharge("flood", refused[0], visa)); resp.StatusCode != http.StatusCreated || resp.Headers[httpapi.HeaderReplayed] != "" {
		t.Fatalf("a refused key in the next second: %d %v, want a first 201", resp.StatusCode, resp.Headers)
	}
}

// TestARetryStormOnOneKeyLeavesItsTenantsRate: replays are cheap and do
// not count, so a client retrying one key without end still has its
// tenant's whole rate for new charges.
func TestARetryStormOnOneKeyLeavesItsTenantsRate(t *testing.T) {
	t.Parallel()
	d, h, _ := limitedStack(t, 3)
	if resp := handle(t, h, testkit.PostCharge("acme", "storm", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", resp.StatusCode, resp.Body)
	}
	for i := range 50 {
		if resp := handle(t, h, testkit.PostCharge("acme", "storm", visa)); resp.StatusCode != http.StatusCreated || resp.Headers[httpapi.HeaderReplayed] != "true" {
			t.Fatalf("retry %d: %d %v %s, want the replay", i, resp.StatusCode, resp.Headers, resp.Body)
		}
	}
	for i := range 2 {
		if resp := handle(t, h, testkit.PostCharge("acme", fmt.Sprintf("new-%d", i), visa)); resp.StatusCode != http.StatusCreated {
			t.Fatalf("new charge %d after the storm: %d %s, want 201", i, resp.StatusCode, resp.Body)
		}
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new-2", visa)); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a fourth charge in the second: %d, want 429", resp.StatusCode)
	}
	if got := d.Sim.Ledger().TotalCharges; got != 3 {
		t.Fatalf("provider charges %d, want 3", got)
	}
}

// slowCharge is a charge the provider answers late, in a stack deployed
// with providersim.WithSlowDelay.
const slowCharge = `{"amount":1500,"currency":"EUR","source":"tok_slow"}`

// holdKey starts a slow charge of acme's key "held", and returns once it
// holds the key. Its status comes on the channel.
func holdKey(t *testing.T, h *httpapi.Handler) <-chan int {
	first := make(chan int, 1)
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostCharge("acme", "held", slowCharge))
		first <- resp.StatusCode
	}()
	time.Sleep(500 * time.Millisecond) // the first holds the key
	return first
}

// twinsOf starts n requests for the key holdKey holds. Their answers come
// on the channel.
func twinsOf(t *testing.T, h *httpapi.Handler, n int) <-chan events.APIGatewayV2HTTPResponse {
	answers := make(chan events.APIGatewayV2HTTPResponse, n)
	for range n {
		go func() { answers <- handle(t, h, testkit.PostCharge("acme", "held", slowCharge)) }()
	}
	return answers
}

// TestARequestForAKeyInProgressClaimsItAtMostEightTimes: a request for a
// key in flight gives its rate count back, but waits for the key for up
// to INFLIGHT_WAIT (2 s), claiming again after each pause. docs/capacity.md
// bounds that at 8 conditional writes; limit.MaxWaiters bounds the waits.
func TestARequestForAKeyInProgressClaimsItAtMostEightTimes(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t, providersim.WithSlowDelay(3500*time.Millisecond))
	counter := &testkit.CallCounter{}
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: 10, Concurrency: 100}
		w.Deps.Clock = clock.Now
		w.Deps.Clients = testkit.Clients(t, counter.Option())
	})
	first := holdKey(t, h)
	counter.Snapshot()         // Snapshot counts since the last
	const twins, claims = 3, 8 // claims: docs/capacity.md's, within INFLIGHT_WAIT
	answers := twinsOf(t, h, twins)
	for range twins {
		if resp := <-answers; resp.StatusCode != http.StatusConflict {
			t.Fatalf("a request for the key in progress: %d %s, want 409 in progress", resp.StatusCode, resp.Body)
		}
	}
	byOp := counter.Snapshot()
	if byOp["PutItem"] < twins || byOp["PutItem"] > twins*claims {
		t.Errorf("%d requests for a key in progress made %v, want from %d to %d claims (PutItem)", twins, byOp, twins, twins*claims)
	}
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("the first request: %d, want 201", code)
	}
}

// TestRequestsWaitingForAKeyLeaveTheirTenantsRate: a request for a key in
// flight gives its rate count back as it starts waiting for the key. Its
// wait may outlast its second, and a count comes back only within it. So
// retries that each wait would otherwise take the tenant's rate from its
// new charges.
func TestRequestsWaitingForAKeyLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t, providersim.WithSlowDelay(3500*time.Millisecond))
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	const rate, twins = 5, 4
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
		w.Deps.Clock = clock.Now
	})
	first := holdKey(t, h)
	answers := twinsOf(t, h, twins)
	time.Sleep(800 * time.Millisecond) // the twins wait for the key, up to 2 s
	for i := range twins {
		if resp := handle(t, h, testkit.PostCharge("acme", fmt.Sprintf("new-%d", i), visa)); resp.StatusCode != http.StatusCreated {
			t.Errorf("new charge %d while %d requests wait for a key: %d %s, want 201", i, twins, resp.StatusCode, resp.Body)
		}
	}
	for range twins {
		if resp := <-answers; resp.StatusCode != http.StatusConflict {
			t.Errorf("a request for the key in progress: %d %s, want 409 in progress", resp.StatusCode, resp.Body)
		}
	}
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("the first request: %d, want 201", code)
	}
}

// TestARetryStormOnOneKeyLeavesItsTenantsConcurrency (issue 42): twins
// of one key in progress, spread over two instances. At most
// limit.MaxWaiters of them wait in a window of INFLIGHT_WAIT, fleet-wide.
// The rest answer 409 in progress at once, their wait never counted. So
// a concurrency of 1 (10 s of handler time in the span) still admits the
// tenant's new charges. The eight waits of 2 s on their instance alone
// would spend it.
func TestARetryStormOnOneKeyLeavesItsTenantsConcurrency(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t, providersim.WithSlowDelay(3500*time.Millisecond))
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) // one window throughout
	instance := func() *httpapi.Handler {
		return d.ChargeHandler(t, func(w *testkit.Wiring) {
			w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: 100, Concurrency: 1}
			w.Deps.Clock = clock.Now
		})
	}
	const twins = 16
	fleet := []*httpapi.Handler{instance(), instance()}
	first := holdKey(t, instance())
	type answer struct {
		resp events.APIGatewayV2HTTPResponse
		took time.Duration
	}
	answers := make(chan answer, twins)
	for i := range twins {
		h := fleet[i%len(fleet)]
		go func() {
			began := time.Now()
			resp := handle(t, h, testkit.PostCharge("acme", "held", slowCharge))
			answers <- answer{resp, time.Since(began)}
		}()
	}
	time.Sleep(500 * time.Millisecond) // every twin has found the key in progress
	for i := range 3 {
		if resp := handle(t, fleet[0], testkit.PostCharge("acme", fmt.Sprintf("new-%d", i), visa)); resp.StatusCode != http.StatusCreated {
			t.Errorf("new charge %d while %d twins of a key in progress came: %d %s, want 201", i, twins, resp.StatusCode, resp.Body)
		}
	}
	waited := 0
	for range twins {
		a := <-answers
		if slug, _ := problemOf(t, a.resp); a.resp.StatusCode != http.StatusConflict || slug != "request-in-progress" || a.resp.Headers[httpapi.HeaderRetryAfter] == "" {
			t.Errorf("a twin: %d %v %s, want 409 request-in-progress with Retry-After", a.resp.StatusCode, a.resp.Headers, a.resp.Body)
		}
		if a.took > time.Second {
			waited++
		}
	}
	if waited > limit.MaxWaiters {
		t.Errorf("%d twins of one key in one window of INFLIGHT_WAIT: %d waited, want at most %d", twins, waited, limit.MaxWaiters)
	}
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("the first request: %d, want 201", code)
	}
	if got := d.Sim.Ledger().TotalCharges; got != 4 {
		t.Fatalf("provider charges %d, want 4: the key's once and three new charges", got)
	}
	t.Logf("%d twins of one key in progress: %d waited, %d answered at once", twins, waited, twins-waited)
}

// TestATwinGrantedAWaitGetsTheOriginalAnswer: the holder ends within
// INFLIGHT_WAIT. The twins granted a wait get its answer, replayed; the
// one past limit.MaxWaiters answers 409 in progress at once.
func TestATwinGrantedAWaitGetsTheOriginalAnswer(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t, providersim.WithSlowDelay(1500*time.Millisecond))
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: 100, Concurrency: 100}
		w.Deps.Clock = clock.Now
	})
	first := holdKey(t, h)
	answers := twinsOf(t, h, limit.MaxWaiters+1)
	replayed, conflicts := 0, 0
	for range limit.MaxWaiters + 1 {
		switch resp := <-answers; {
		case resp.StatusCode == http.StatusCreated && resp.Headers[httpapi.HeaderReplayed] == "true":
			replayed++
		case resp.StatusCode == http.StatusConflict:
			conflicts++
		default:
			t.Errorf("a twin: %d %v %s, want the replay or 409 in progress", resp.StatusCode, resp.Headers, resp.Body)
		}
	}
	if replayed != limit.MaxWaiters || conflicts != 1 {
		t.Errorf("%d twins, the holder done within INFLIGHT_WAIT: %d replayed, %d in progress; want %d and 1", limit.MaxWaiters+1, replayed, conflicts, limit.MaxWaiters)
	}
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("the first request: %d, want 201", code)
	}
	if got := d.Sim.Ledger().TotalCharges; got != 1 {
		t.Fatalf("provider charges %d, want 1", got)
	}
}

// outage is a card provider in front of the deployment's simulator. It
// answers the first refused POSTs to a path ending in its suffix 503
// Provider-Not-Processed, and sends later ones on. It holds the first
// until gate closes. calls counts the POSTs sent to it.
type outage struct {
	calls      atomic.Int32
	held, gate chan struct{}
}

// everyPOST is an outage's refused count that refuses every POST.
const everyPOST = math.MaxInt32

func newOutage(t *testing.T, sim, suffix string, refused int32) (*outage, string) {
	t.Helper()
	target, err := url.Parse(sim)
	if err != nil {
		t.Fatal(err)
	}
	o := &outage{held: make(chan struct{}), gate: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, suffix) {
			n := o.calls.Add(1)
			if n == 1 {
				close(o.held)
				<-o.gate
			}
			if n <= refused {
				r.Header.Set(providersim.HeaderFault, "unavailable")
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return o, srv.URL
}

// TestATwinThatTakesTheKeyOverCountsAgainstTheRate (review 9): a twin
// gives its count back as it starts waiting. The holder is released (the
// provider did not process it), and the twin claims the key and sends the
// charge itself: new work, never counted again. During a provider outage
// a retry storm on one key sends the provider a charge per twin that
// waited, past the rate, and leaves the rate whole for new keys. The
// twins are limit.MaxWaiters: any more answer 409 at once.
func TestATwinThatTakesTheKeyOverCountsAgainstTheRate(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	provider, providerURL := newOutage(t, d.ProviderURL, "/v1/charges", everyPOST)
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) // one second throughout
	const rate, twins = 2, limit.MaxWaiters
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
		w.Charge.ProviderURL = providerURL
		w.Deps.Clock = clock.Now
	})
	const body = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	first := make(chan int, 1)
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostCharge("acme", "held", body))
		first <- resp.StatusCode
	}()
	<-provider.held // the first holds the key, its charge at the provider
	answers := make(chan events.APIGatewayV2HTTPResponse, twins)
	for range twins {
		go func() { answers <- handle(t, h, testkit.PostCharge("acme", "held", body)) }()
		time.Sleep(300 * time.Millisecond) // it waits for the key, its count given back
	}
	close(provider.gate)
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("the first request: %d, want 503 provider-unavailable", code)
	}
	for range twins {
		if resp := <-answers; resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a twin: %d %s, want 503 provider-unavailable, the key taken over", resp.StatusCode, resp.Body)
		}
	}
	// Every request so far sent a charge: each did new work in the second.
	resp := handle(t, h, testkit.PostCharge("acme", "new", body))
	if resp.StatusCode != http.StatusTooManyRequests {
		worked := provider.calls.Load()
		t.Fatalf("rate %d: %d requests sent the provider a charge in one second; a new key then: %d, want 429", rate, worked, resp.StatusCode)
	}
}

// TestReadsAndMovesAreLimitedToo: every route a tenant calls counts, and a
// read past the rate says nothing of keys.
func TestReadsAndMovesAreLimitedToo(t *testing.T) {
	t.Parallel()
	_, h, _ := limitedStack(t, 1)
	handle(t, h, testkit.GetCharge("acme", "ch_000000000000000000000000"))
	for _, req := range []events.APIGatewayV2HTTPRequest{
		testkit.GetCharge("acme", "ch_000000000000000000000000"),
		testkit.ListRefunds("acme", "ch_000000000000000000000000", ""),
		testkit.PostMove("acme", "ch_000000000000000000000000", "capture", ""),
	} {
		resp := handle(t, h, req)
		slug, detail := problemOf(t, resp)
		if resp.StatusCode != http.StatusTooManyRequests || slug != "rate-limited" || strings.Contains(detail, "key") {
			t.Errorf("%s %s: %d %s, want 429 rate-limited that names no key", req.RequestContext.HTTP.Method, req.RawPath, resp.StatusCode, resp.Body)
		}
	}
}

// TestRefusalsAfterReadingTheStoreCountAgainstTheRate: a request gives its
// count back only when it did no new work. Input refused before the store
// is read did none. A refund listing whose starting_after names no refund,
// or a capture above the authorized amount, is refused only after the
// charge was read, so it counts: past the tenant's rate, 429.
func TestRefusalsAfterReadingTheStoreCountAgainstTheRate(t *testing.T) {
	t.Parallel()
	_, h, clock := limitedStack(t, 2)
	resp := handle(t, h, testkit.PostCharge("acme", "k1", `{"amount":1500,"currency":"EUR","source":"tok_visa","capture":false}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, resp.Body)
	}
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		req    events.APIGatewayV2HTTPRequest
		detail string
		counts bool
	}{
		{"a listing after an unknown refund", testkit.ListRefunds("acme", c.ID, "starting_after=re_000000000000000000000000"), "names no refund of this charge", true},
		{"a capture above the authorization", testkit.PostMove("acme", c.ID, "capture", `{"amount":1501}`), "more than the authorized amount", true},
		{"a listing's limit out of range", testkit.ListRefunds("acme", c.ID, "limit=0"), "limit: must be", false},
		{"a capture's body that is not JSON", testkit.PostMove("acme", c.ID, "capture", `{`), "JSON", false},
	} {
		clock.Advance(time.Second)
		served := 0
		for range 10 {
			resp := handle(t, h, tc.req)
			if resp.StatusCode == http.StatusTooManyRequests {
				break
			}
			slug, detail := problemOf(t, resp)
			if resp.StatusCode != http.StatusBadRequest || slug != "invalid-request" || !strings.Contains(detail, tc.detail) {
				t.Fatalf("%s: %d %s, want 400 naming %q, or 429", tc.name, resp.StatusCode, resp.Body, tc.detail)
			}
			served++
		}
		if counted := served == 2; counted != tc.counts {
			t.Errorf("%s: %d of 10 in a second answered 400 at a rate of 2; want counted %v", tc.name, served, tc.counts)
		}
	}
}

// shedService answers every Create busy (a throttled store) until told
// otherwise, then provider-unavailable, and notes what it was asked.
type shedService struct {
	httpapi.Service // nil: a call of any other method fails the test
	busy            bool
	asked           []string
}

func (s *shedService) Create(context.Context, idem.Key, charge.Request, idem.Fingerprint) (charge.Result, error) {
	s.asked = append(s.asked, "create")
	if s.busy {
		return charge.Result{Outcome: charge.OutcomeBusy}, nil
	}
	return charge.Result{Outcome: charge.OutcomeUnavailable}, nil
}

func (s *shedService) Get(context.Context, string, string) (charge.Result, error) {
	s.asked = append(s.asked, "get")
	return charge.Result{Outcome: charge.OutcomeNotFound}, nil
}

func (s *shedService) Capture(context.Context, string, string, int64) (charge.Result, error) {
	s.asked = append(s.asked, "capture")
	return charge.Result{Outcome: charge.OutcomeNotFound}, nil
}

// TestAThrottleShedsEveryTenantsReadsOnTheInstance: shedding is per
// instance, not per tenant. One tenant's partition throttling its charge
// sheds another tenant's read on that instance too, as documented.
func TestAThrottleShedsEveryTenantsReadsOnTheInstance(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	svc := &shedService{busy: true}
	h, err := httpapi.NewHandler(svc, func(o *httpapi.Options) {
		o.Clock, o.Shedder, o.Logger, o.Metrics = clock.Now, limit.NewShedder(0, clock.Now), slog.New(slog.DiscardHandler), io.Discard
	})
	if err != nil {
		t.Fatal(err)
	}
	handle(t, h, testkit.PostCharge("flood", "k1", visa)) // its partition throttled
	svc.busy = false
	if resp := handle(t, h, testkit.GetCharge("quiet", "ch_000000000000000000000000")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("another tenant's read after the flooding tenant's partition throttled: %d %s, want 503", resp.StatusCode, resp.Body)
	}
}

// TestAThrottledStoreShedsWhatCanWait: once the store was throttled, reads
// and refunds are answered 503 with Retry-After without reaching the
// service, while charges and captures still do; after a while, all are
// served again.
func TestAThrottledStoreShedsWhatCanWait(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	svc := &shedService{busy: true}
	logs := &testkit.LogBuffer{}
	h, err := httpapi.NewHandler(svc, func(o *httpapi.Options) {
		o.Clock, o.Shedder, o.Logger, o.Metrics = clock.Now, limit.NewShedder(0, clock.Now), slog.New(slog.NewJSONHandler(logs, nil)), io.Discard
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "k1", visa)); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("throttled create: %d, want 503", resp.StatusCode)
	}
	svc.busy = false
	clock.Advance(time.Second)
	for _, req := range []events.APIGatewayV2HTTPRequest{
		testkit.GetCharge("acme", "ch_000000000000000000000000"),
		testkit.PostRefund("acme", "r1", "ch_000000000000000000000000", `{"amount":100}`),
		testkit.ListRefunds("acme", "ch_000000000000000000000000", ""),
	} {
		resp := handle(t, h, req)
		slug, _ := problemOf(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || slug != "service-unavailable" || resp.Headers[httpapi.HeaderRetryAfter] != "4" {
			t.Errorf("%s %s while shedding: %d %v %s, want 503 service-unavailable, Retry-After 4", req.RequestContext.HTTP.Method, req.RawPath, resp.StatusCode, resp.Headers, resp.Body)
		}
	}
	handle(t, h, testkit.PostCharge("acme", "k2", visa))
	handle(t, h, testkit.PostMove("acme", "ch_000000000000000000000000", "capture", ""))
	if got := strings.Join(svc.asked, ","); got != "create,create,capture" {
		t.Fatalf("the service was asked %s while shedding, want create,create,capture", got)
	}
	if n := strings.Count(logs.String(), `"limit":"shed","request_id":"","route"`); n != 3 || strings.Count(logs.String(), `"outcome":"shed"`) != 3 {
		t.Errorf("%d requests logged shed, want 3:\n%s", n, logs)
	}
	clock.Advance(limit.DefaultShedFor)
	handle(t, h, testkit.GetCharge("acme", "ch_000000000000000000000000"))
	if got := svc.asked[len(svc.asked)-1]; got != "get" {
		t.Fatalf("after DefaultShedFor, a read was not served: %v", svc.asked)
	}
}

// slowCaptures is a card provider in front of the deployment's simulator
// that answers each capture 3.5 s late.
func slowCaptures(t *testing.T, sim string) string {
	t.Helper()
	target, err := url.Parse(sim)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/capture") {
			r.Header.Set(providersim.HeaderFault, providersim.FaultSlow)
			r.Header.Set(providersim.HeaderDelay, "3500ms")
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// capturing authorizes a charge through a handler whose tenants may start
// rate requests a second, its clock frozen in one. The card provider is
// what proxy puts in front of the deployment's simulator. It starts
// capturing the charge, and returns the capture's status on first.
func capturing(t *testing.T, rate int, proxy func(sim string) string, wire ...func(*testkit.Wiring)) (h *httpapi.Handler, id string, first <-chan int) {
	t.Helper()
	h, id, _ = authorizedUnder(t, rate, proxy, wire...)
	code := make(chan int, 1)
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostMove("acme", id, "capture", ""))
		code <- resp.StatusCode
	}()
	return h, id, code
}

// authorizedUnder returns a handler holding tenant acme to rate, its
// provider behind proxy, and the id of acme's authorized charge. Its
// clock stays in one second until moved. wire wires it further.
func authorizedUnder(t *testing.T, rate int, proxy func(sim string) string, wire ...func(*testkit.Wiring)) (*httpapi.Handler, string, *testkit.Clock) {
	t.Helper()
	d := testkit.Deploy(t)
	providerURL := proxy(d.ProviderURL)
	clock := testkit.NewClock(time.Now().Truncate(time.Second))
	h := d.ChargeHandler(t, append([]func(*testkit.Wiring){func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
		w.Charge.ProviderURL = providerURL
		w.Deps.Clock = clock.Now
	}}, wire...)...)
	resp := handle(t, h, testkit.PostCharge("acme", "auth", `{"amount":1500,"currency":"EUR","source":"tok_visa","capture":false}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("authorize: %d %s", resp.StatusCode, resp.Body)
	}
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatal(err)
	}
	return h, c.ID, clock
}

// TestCaptureRetriesWaitingForAMoveLeaveTheirTenantsRate (review 10): a
// capture retried while the first runs waits for it, up to INFLIGHT_WAIT,
// then answers 409 request-in-progress: no new work. It gives its count
// back as it starts waiting, as a request for a key in progress does: its
// wait may outlast its second. So retrying a stuck capture leaves the
// tenant's rate to its new charges.
func TestCaptureRetriesWaitingForAMoveLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate, retries = 7, 4
	h, id, first := capturing(t, rate, func(sim string) string { return slowCaptures(t, sim) })
	time.Sleep(500 * time.Millisecond) // the first capture is at the provider
	answers := make(chan events.APIGatewayV2HTTPResponse, retries)
	for range retries {
		go func() { answers <- handle(t, h, testkit.PostMove("acme", id, "capture", "")) }()
	}
	time.Sleep(800 * time.Millisecond) // the retries wait for the first, up to 2 s
	for i := range retries {
		if resp := handle(t, h, testkit.PostCharge("acme", fmt.Sprintf("new-%d", i), visa)); resp.StatusCode != http.StatusCreated {
			t.Errorf("rate %d, new charge %d while %d capture retries wait for the first: %d %s, want 201", rate, i, retries, resp.StatusCode, resp.Body)
		}
	}
	for range retries {
		if resp := <-answers; resp.StatusCode != http.StatusConflict {
			t.Errorf("a capture retried while the first runs: %d %s, want 409 in progress", resp.StatusCode, resp.Body)
		}
	}
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first capture: %d, want 200", code)
	}
}

// TestCaptureRetriesPastMaxWaitersAnswerAtOnce (issue 42): capture
// retries while the first runs. At most limit.MaxWaiters of them wait for
// its move; the rest answer 409 in progress at once, with Retry-After.
func TestCaptureRetriesPastMaxWaitersAnswerAtOnce(t *testing.T) {
	t.Parallel()
	const retries = 6
	h, id, first := capturing(t, 100, func(sim string) string { return slowCaptures(t, sim) })
	time.Sleep(500 * time.Millisecond) // the first capture is at the provider
	waited := waitingCaptures(t, h, id, retries, func(resp events.APIGatewayV2HTTPResponse) {
		if resp.StatusCode != http.StatusConflict || resp.Headers[httpapi.HeaderRetryAfter] == "" {
			t.Errorf("a capture retried while the first runs: %d %v %s, want 409 in progress with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
		}
	})
	if waited > limit.MaxWaiters {
		t.Errorf("%d capture retries while the first runs: %d waited, want at most %d", retries, waited, limit.MaxWaiters)
	}
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first capture: %d, want 200", code)
	}
}

// TestACaptureThatWaitedThenMakesTheMoveCountsAgain: a capture retried
// while the first is at the provider waits, its count given back. The
// first is refused, not processed, and the retry makes the move itself:
// new work, counted again. So each capture sent counts once.
func TestACaptureThatWaitedThenMakesTheMoveCountsAgain(t *testing.T) {
	t.Parallel()
	// The rate is the authorization, the capture and its retry.
	const rate = 3
	var provider *outage
	h, id, first := capturing(t, rate, func(sim string) (url string) {
		provider, url = newOutage(t, sim, "/capture", everyPOST)
		return url
	})
	<-provider.held // the first capture is at the provider
	retry := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() { retry <- handle(t, h, testkit.PostMove("acme", id, "capture", "")) }()
	time.Sleep(300 * time.Millisecond) // it waits for the first, its count given back
	close(provider.gate)
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("the first capture: %d, want 503 provider-unavailable", code)
	}
	if resp := <-retry; resp.StatusCode != http.StatusServiceUnavailable || provider.calls.Load() != 2 {
		t.Fatalf("the retry: %d %s, %d captures sent; want 503 provider-unavailable, the move its own", resp.StatusCode, resp.Body, provider.calls.Load())
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("rate %d: an authorization and 2 captures sent in one second; a new charge then: %d, want 429", rate, resp.StatusCode)
	}
}

// slowUpdates delays each UpdateItem whose expression starts with set by
// delay, on a real client of the store: every request waiting reads the
// row before the first such write lands. "SET #status = :via" begins a
// capture or cancel; "SET #deadline = :until" postpones a move.
func slowUpdates(set string, delay time.Duration) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("SlowUpdates",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && u.UpdateExpression != nil && strings.HasPrefix(*u.UpdateExpression, set) {
						time.Sleep(delay)
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

// waitingCaptures sends retries captures of charge id at once, checks each
// answer, and returns how many took over a second: those that waited.
func waitingCaptures(t *testing.T, h *httpapi.Handler, id string, retries int, check func(events.APIGatewayV2HTTPResponse)) int {
	t.Helper()
	took := make(chan time.Duration, retries)
	for range retries {
		go func() {
			began := time.Now()
			check(handle(t, h, testkit.PostMove("acme", id, "capture", "")))
			took <- time.Since(began)
		}()
	}
	waited := 0
	for range retries {
		if <-took > time.Second {
			waited++
		}
	}
	return waited
}

// TestCaptureTwinsThatLoseTheMoveDoNotCountAgain (review 11): capture
// twins wait for the first capture, their counts given back. The
// provider refuses it, not processed, and the row is free again. Every
// twin then retakes its count before beginMove, but only one makes the
// move: the others wait for it and send nothing. docs/capacity.md: a
// waiting request "counts again if it then asks the provider itself".
// The rate admits the authorization, the first capture and its twins at
// once. Once the twins' counts are given back, the authorization, the
// first capture and the one capture the twins sent are 3 of the rate
// of 5: a new charge must still be admitted.
func TestCaptureTwinsThatLoseTheMoveDoNotCountAgain(t *testing.T) {
	t.Parallel()
	const rate, twins = 5, 3
	var provider *outage
	h, id, first := capturing(t, rate, func(sim string) (url string) {
		provider, url = newOutage(t, sim, "/capture", 1)
		return url
	}, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, slowUpdates("SET #status = :via", 250*time.Millisecond))
	})
	<-provider.held // the first capture is at the provider
	answers := make(chan events.APIGatewayV2HTTPResponse, twins)
	for range twins {
		go func() { answers <- handle(t, h, testkit.PostMove("acme", id, "capture", "")) }()
	}
	time.Sleep(300 * time.Millisecond) // the twins wait, their counts given back
	close(provider.gate)
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("the first capture: %d, want 503 provider-unavailable", code)
	}
	statuses := make([]int, 0, twins)
	for range twins {
		statuses = append(statuses, (<-answers).StatusCode)
	}
	if sent := provider.calls.Load(); sent != 2 {
		t.Fatalf("%d captures sent, want 2: the first, and one of the twins'; twins answered %v", sent, statuses)
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: an authorization and 2 captures sent in one second, %d twins answered %v; a new charge then: %d %s, want 201",
			rate, twins, statuses, resp.StatusCode, resp.Body)
	}
}

// TestACaptureThatWaitedThenSettlesTheMoveCountsAgain (review 11): a
// capture retried while the first is at the provider waits, its count
// given back. The first's attempt runs out of time, and the retry asks
// the provider for the payment's state to settle it: a provider call.
// docs/capacity.md: it "counts again if it then asks the provider
// itself, to make the move or settle it". The provider's state cannot
// settle it yet, so the retry waits out INFLIGHT_WAIT and answers 409.
// Its count must stay: of a rate of 3, two new charges are left. A retry
// sent once the attempt's time is up settles first, then waits: its wait
// must not give back the count of its provider call.
func TestACaptureThatWaitedThenSettlesTheMoveCountsAgain(t *testing.T) {
	t.Parallel()
	for _, waitsFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("waits first %v", waitsFirst), func(t *testing.T) {
			t.Parallel()
			const rate = 3 // the authorization, the first capture and its retry
			var provider *outage
			h, id, clock := authorizedUnder(t, rate, func(sim string) (url string) {
				provider, url = newOutage(t, sim, "/capture", everyPOST)
				return url
			})
			t.Cleanup(func() { close(provider.gate) }) // before the proxy closes
			go func() {
				_, _ = h.Handle(context.WithoutCancel(t.Context()), testkit.PostMove("acme", id, "capture", ""))
			}()
			<-provider.held // the first capture is at the provider
			retry := make(chan events.APIGatewayV2HTTPResponse, 1)
			send := func() { go func() { retry <- handle(t, h, testkit.PostMove("acme", id, "capture", "")) }() }
			if waitsFirst {
				send()
				time.Sleep(300 * time.Millisecond) // it waits for the first, its count given back
			}
			clock.Advance(31 * time.Second) // the first's attempt is past its deadline
			if !waitsFirst {
				send()
			}
			if resp := <-retry; resp.StatusCode != http.StatusConflict {
				t.Fatalf("the retry: %d %s, want 409 in progress, the move settled later", resp.StatusCode, resp.Body)
			}
			got := make([]int, 0, rate)
			for i := range rate {
				got = append(got, handle(t, h, testkit.PostCharge("acme", fmt.Sprintf("new-%d", i), visa)).StatusCode)
			}
			if got[rate-1] != http.StatusTooManyRequests {
				t.Fatalf("rate %d: the retry asked the provider for the payment's state in this second; %d new charges then: %v, want the last 429", rate, rate, got)
			}
		})
	}
}

// TestACaptureRefusedAWaitThenSettlesTheMoveCountsAgain: a capture retry
// is refused a wait as the first capture's deadline passes. Its second
// look asks the provider for the payment's state, as a wait that ran out
// would: new work, so its count stays. Of a rate of 3 in that second, two
// new charges are left.
func TestACaptureRefusedAWaitThenSettlesTheMoveCountsAgain(t *testing.T) {
	t.Parallel()
	const rate = 3 // the retry and two new charges, in a second of their own
	var provider *outage
	var clock *testkit.Clock
	h, id, clock := authorizedUnder(t, rate, func(sim string) (url string) {
		provider, url = newOutage(t, sim, "/capture", everyPOST)
		return url
	}, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, waitTimesOutAfter(func() {
			clock.Advance(400 * time.Millisecond) // the first's deadline passes
		}))
	})
	t.Cleanup(func() { close(provider.gate) }) // before the proxy closes
	clock.Advance(500 * time.Millisecond)      // the first's deadline falls mid-second
	go func() {
		_, _ = h.Handle(context.WithoutCancel(t.Context()), testkit.PostMove("acme", id, "capture", ""))
	}()
	<-provider.held                         // the first capture is at the provider
	clock.Advance(29700 * time.Millisecond) // 300 ms before the first's deadline
	if resp := handle(t, h, testkit.PostMove("acme", id, "capture", "")); resp.StatusCode != http.StatusConflict {
		t.Fatalf("the retry: %d %s, want 409 in progress, the move settled later", resp.StatusCode, resp.Body)
	}
	got := make([]int, 0, rate)
	for i := range rate {
		got = append(got, handle(t, h, testkit.PostCharge("acme", fmt.Sprintf("new-%d", i), visa)).StatusCode)
	}
	if got[rate-1] != http.StatusTooManyRequests {
		t.Fatalf("rate %d: the retry, refused a wait, asked the provider for the payment's state in this second; %d new charges then: %v, want the last 429", rate, rate, got)
	}
}

// TestRepeatsOfASettledCaptureLeaveTheirTenantsRate (review 11): the
// same capture again answers the captured charge, and the provider is
// not asked (docs/contract.md: "the provider captured once"). It is a
// replay: it did no new work. docs/contract.md: "What counts against the
// rate is a request that did new work", and a client retrying without
// end leaves the rate to the tenant's other requests. A capture whose
// answer was lost, retried, must not take its tenant's new charges.
func TestRepeatsOfASettledCaptureLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate = 3 // the authorization, the capture and a new charge
	h, id, first := capturing(t, rate, func(sim string) string { return sim })
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the capture: %d, want 200", code)
	}
	for i := range rate {
		if resp := handle(t, h, testkit.PostMove("acme", id, "capture", "")); resp.StatusCode != http.StatusOK {
			t.Fatalf("rate %d, the same capture again, repeat %d: %d %s, want 200 the captured charge", rate, i, resp.StatusCode, resp.Body)
		}
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: an authorization and a capture in one second, the capture repeated %d times; a new charge then: %d %s, want 201", rate, rate, resp.StatusCode, resp.Body)
	}
}

// TestRepeatsOfASettledCancelLeaveTheirTenantsRate: as for a capture, the
// same cancel again answers the canceled charge, and a capture of it 409
// state-conflict. Neither does new work, so neither counts.
func TestRepeatsOfASettledCancelLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate = 3 // the authorization, the cancel and a new charge
	h, id, _ := authorizedUnder(t, rate, func(sim string) string { return sim })
	if resp := handle(t, h, testkit.PostMove("acme", id, "cancel", "")); resp.StatusCode != http.StatusOK {
		t.Fatalf("the cancel: %d %s, want 200", resp.StatusCode, resp.Body)
	}
	for i := range rate {
		if resp := handle(t, h, testkit.PostMove("acme", id, "cancel", "")); resp.StatusCode != http.StatusOK {
			t.Fatalf("rate %d, the same cancel again, repeat %d: %d %s, want 200 the canceled charge", rate, i, resp.StatusCode, resp.Body)
		}
		if resp := handle(t, h, testkit.PostMove("acme", id, "capture", "")); resp.StatusCode != http.StatusConflict {
			t.Fatalf("rate %d, a capture of the canceled charge, repeat %d: %d %s, want 409 state-conflict", rate, i, resp.StatusCode, resp.Body)
		}
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: an authorization and a cancel in one second, then %d repeats and captures; a new charge then: %d %s, want 201", rate, rate, resp.StatusCode, resp.Body)
	}
}

// TestRefundsOfAnUncapturedChargeLeaveTheirTenantsRate (review 12): a
// refund of a charge only authorized answers 409 charge-state-conflict.
// It reads the charge and stops: no key claimed, no hold, no provider call.
// docs/contract.md: "So does a `409 state-conflict` found without acting."
// A capture of a canceled charge gives its count back; this refund must
// too, or a client retrying it locks its tenant out of new charges.
func TestRefundsOfAnUncapturedChargeLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate = 3 // the authorization and two more
	h, id, _ := authorizedUnder(t, rate, func(sim string) string { return sim })
	for i := range rate {
		if resp := handle(t, h, testkit.PostRefund("acme", fmt.Sprintf("r-%d", i), id, "")); resp.StatusCode != http.StatusConflict {
			t.Fatalf("rate %d, refund %d of an authorized charge: %d %s, want 409 charge-state-conflict", rate, i, resp.StatusCode, resp.Body)
		}
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: an authorization, then %d refunds of it answered 409 without acting; a new charge then: %d %s, want 201",
			rate, rate, resp.StatusCode, resp.Body)
	}
}

// reclaimAnswerLost is a DynamoDB connection that resets after each
// attempt at re-claiming a released key is applied: the claim landed, its
// answer lost. hit says it was tried.
type reclaimAnswerLost struct{ hit atomic.Bool }

func (r *reclaimAnswerLost) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") &&
		bytes.Contains(body, []byte("SET #status = :inflight, #tok = :tok, #lexp = :lexp, #shard = :shard, #ad = :ad")) {
		r.hit.Store(true)
		return idemtest.FaultyConnection{Fault: idemtest.Reset}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestATwinWhoseTakeOverMayHaveLandedCountsAgainstTheRate (review 12): a
// twin waits for its key, its count given back. The holder is released,
// and the twin claims the key again; DynamoDB applies it, and the answer
// is lost. The twin answers 503 outcome-pending: it holds the key, and
// the reconciler will send its charge. A first request whose claim is
// unknown keeps its count; docs/contract.md: a twin that takes the key
// over "counts again". Here no count ever covers that charge.
func TestATwinWhoseTakeOverMayHaveLandedCountsAgainstTheRate(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	provider, providerURL := newOutage(t, d.ProviderURL, "/v1/charges", 1)
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) // one second throughout
	const rate = 2                                                          // the holder's charge, and the twin's
	faults := &reclaimAnswerLost{}
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
		w.Charge.ProviderURL = providerURL
		w.Deps.Clock = clock.Now
		w.Deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: faults}
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxBackoff, so.RateLimiter = time.Millisecond, ratelimit.None })
		})
	})
	first := make(chan int, 1)
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostCharge("acme", "held", visa))
		first <- resp.StatusCode
	}()
	<-provider.held // the first holds the key, its charge at the provider
	twin := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() { twin <- handle(t, h, testkit.PostCharge("acme", "held", visa)) }()
	time.Sleep(300 * time.Millisecond) // it waits for the key, its count given back
	close(provider.gate)
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("the first request: %d, want 503 provider-unavailable, the key released", code)
	}
	if resp := <-twin; !faults.hit.Load() || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Body, httpapi.ProblemOutcomePending.Slug) {
		t.Fatalf("the twin: re-claim's answer lost %v; %d %s, want 503 outcome-pending", faults.hit.Load(), resp.StatusCode, resp.Body)
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("rate %d: the holder's charge sent, and the twin's claim landed for the reconciler to send; a new key then: %d, want 429", rate, resp.StatusCode)
	}
}

// claimsRefused is a DynamoDB connection refused to every claim while
// armed: the claim never leaves, and nothing is stored.
type claimsRefused struct{ armed, hit atomic.Bool }

func (c *claimsRefused) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.armed.Load() && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		c.hit.Store(true)
		return idemtest.FaultyConnection{Fault: idemtest.Refused}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestChargesRefusedUnclaimedLeaveTheirTenantsRate (review 12): while
// DynamoDB refuses a charge's claim at every attempt, the charge answers
// 503: nothing stored, nothing sent. docs/contract.md: "What counts
// against the rate is a request that did new work." These did none, yet
// keep their count: a client retrying through a store's hiccup spends its
// tenant's rate on answers that did nothing.
func TestChargesRefusedUnclaimedLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) // one second throughout
	const rate = 3
	faults := &claimsRefused{}
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
		w.Deps.Clock = clock.Now
		w.Deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: faults}
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxBackoff, so.RateLimiter = time.Millisecond, ratelimit.None })
		})
	})
	faults.armed.Store(true)
	for i := range rate {
		if resp := handle(t, h, testkit.PostCharge("acme", "k", visa)); !faults.hit.Load() || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("attempt %d, its claim refused: %d %s, want 503, nothing stored", i, resp.StatusCode, resp.Body)
		}
	}
	faults.armed.Store(false)
	if resp := handle(t, h, testkit.PostCharge("acme", "k", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: %d attempts refused unclaimed, nothing stored or sent; the same charge then: %d %s, want 201", rate, rate, resp.StatusCode, resp.Body)
	}
}

// TestRequestsOnAMalformedChargeIDLeaveTheirTenantsRate: a capture, cancel
// or refund of an id that is no charge's answers 404 before reading
// anything. docs/contract.md: a request refused as invalid before
// anything was read gives its count back.
func TestRequestsOnAMalformedChargeIDLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate = 3 // the authorization and two more
	h, _, _ := authorizedUnder(t, rate, func(sim string) string { return sim })
	for i, req := range []events.APIGatewayV2HTTPRequest{
		testkit.PostMove("acme", "nope", "capture", ""),
		testkit.PostMove("acme", "nope", "cancel", ""),
		testkit.PostRefund("acme", "r", "nope", ""),
	} {
		if resp := handle(t, h, req); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("request %d on a malformed charge id: %d %s, want 404", i, resp.StatusCode, resp.Body)
		}
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: an authorization, then 3 requests on a malformed id answered 404; a new charge then: %d %s, want 201", rate, resp.StatusCode, resp.Body)
	}
}

// TestChargesStoppedBeforeTheirClaimLeaveTheirTenantsRate: a source the
// provider refuses on sight (502), or a provider whose key cannot be read
// (500), stops a charge before its claim: nothing stored or sent. Each
// gives its count back, as docs/contract.md says.
func TestChargesStoppedBeforeTheirClaimLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate = 3
	for name, c := range map[string]struct {
		source string
		status int
		secret func(string) string
	}{
		"source refused": {"tok_visa", http.StatusBadGateway, func(key string) string { return key }},
		"key unreadable": {stripesim.PMVisa, http.StatusInternalServerError, func(string) string { return "chargeonce-test-no-such-secret" }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := testkit.Deploy(t)
			clock := testkit.NewClock(time.Now().Truncate(time.Second)) // one second throughout
			_, stripeWiring := testkit.Stripe(t, clock.Now)
			h := d.ChargeHandler(t, stripeWiring, func(w *testkit.Wiring) {
				w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: rate, Concurrency: 100}
				w.Charge.ProviderSecretName = c.secret(w.Charge.ProviderSecretName)
			})
			body := `{"amount":1500,"currency":"EUR","source":"` + c.source + `"}`
			for i := range rate + 1 {
				if resp := handle(t, h, testkit.PostCharge("acme", fmt.Sprintf("k-%d", i), body)); resp.StatusCode != c.status {
					t.Fatalf("rate %d, attempt %d stopped before its claim: %d %s, want %d", rate, i, resp.StatusCode, resp.Body, c.status)
				}
			}
		})
	}
}

// TestReadsOfAMalformedChargeIDLeaveTheirTenantsRate (review 13): a read
// of an id that is no charge's answers 404 before reading anything.
// docs/contract.md: "A request refused as invalid before anything was
// read gives its count back too: a `404` for an id that is no charge's,
// say." A capture, cancel or refund of one does; a read must too.
func TestReadsOfAMalformedChargeIDLeaveTheirTenantsRate(t *testing.T) {
	t.Parallel()
	const rate = 4 // the authorization and three more
	h, _, _ := authorizedUnder(t, rate, func(sim string) string { return sim })
	for i, req := range []events.APIGatewayV2HTTPRequest{
		testkit.GetCharge("acme", "nope"),
		testkit.GetRefund("acme", "nope", "nope"),
		testkit.ListRefunds("acme", "nope", ""),
	} {
		if resp := handle(t, h, req); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("read %d of a malformed charge id: %d %s, want 404", i, resp.StatusCode, resp.Body)
		}
	}
	if resp := handle(t, h, testkit.PostCharge("acme", "new", visa)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("rate %d: an authorization, then 3 reads of a malformed id answered 404; a new charge then: %d %s, want 201", rate, resp.StatusCode, resp.Body)
	}
}

// waitRefusedAfter answers the n-th conditional write that takes a wait on
// a key or move only once after has run. The write itself lands at once;
// only its answer comes late, as a slow limits table's does.
func waitRefusedAfter(n int32, after func()) func(*dynamodb.Options) {
	var writes atomic.Int32
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("WaitAnsweredLate",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					u, ok := in.Parameters.(*dynamodb.UpdateItemInput)
					if !ok || u.UpdateExpression == nil || !strings.HasPrefix(*u.UpdateExpression, "ADD #w") {
						return next.HandleInitialize(ctx, in)
					}
					out, md, err := next.HandleInitialize(ctx, in)
					if writes.Add(1) == n {
						after()
					}
					return out, md, err
				}), middleware.Before)
		})
	}
}

// TestATwinRefusedAWaitAfterTheKeySettledGetsTheReplay (review waitcap):
// two twins wait on a key in progress. A third is refused a wait; while
// its refusal is on its way, the holder settles. docs/contract.md: "The
// others answer at once what a wait that ran out would", and "Answering
// in progress at once is always honest". No request is in progress any
// more: the stored answer is there to replay, as a wait that ran out
// would find it with its last claim.
func TestATwinRefusedAWaitAfterTheKeySettledGetsTheReplay(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	provider, providerURL := newOutage(t, d.ProviderURL, "/v1/charges", 0)
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) // one window throughout
	settled := make(chan struct{})
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = d.LimitsTable, limit.Limits{Rate: 100, Concurrency: 100}
		w.Charge.ProviderURL = providerURL
		w.Deps.Clock = clock.Now
		w.Deps.Clients = testkit.Clients(t, waitRefusedAfter(limit.MaxWaiters+1, func() {
			close(provider.gate) // the holder's charge goes through
			<-settled
		}))
	})
	const body = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	first := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostCharge("acme", "held", body))
		first <- resp
		close(settled)
	}()
	<-provider.held // the first holds the key, its charge at the provider
	waiting := make(chan events.APIGatewayV2HTTPResponse, limit.MaxWaiters)
	for range limit.MaxWaiters {
		go func() { waiting <- handle(t, h, testkit.PostCharge("acme", "held", body)) }()
	}
	time.Sleep(300 * time.Millisecond) // both took their waits
	resp := handle(t, h, testkit.PostCharge("acme", "held", body))
	original := <-first
	if original.StatusCode != http.StatusCreated {
		t.Fatalf("the first request: %d %s, want 201", original.StatusCode, original.Body)
	}
	if resp.StatusCode != http.StatusCreated || resp.Headers[httpapi.HeaderReplayed] != "true" || resp.Body != original.Body {
		t.Errorf("a twin refused a wait as the key settled 201: %d %s; want the stored answer replayed, no request being in progress", resp.StatusCode, resp.Body)
	}
	for range limit.MaxWaiters {
		if r := <-waiting; r.StatusCode != http.StatusCreated {
			t.Errorf("a twin granted a wait: %d %s, want the replay", r.StatusCode, r.Body)
		}
	}
	if got := d.Sim.Ledger().TotalCharges; got != 1 {
		t.Fatalf("provider charges %d, want 1", got)
	}
}

// TestACaptureRefusedAWaitAfterTheMoveWasMadeAnswersTheCapture (review
// waitcap): two capture retries wait for the first capture at the
// provider. A third is refused a wait; while its refusal is on its way,
// the first capture is made. README: "a capture while the same one
// runs ... then its answer"; docs/contract.md: a refused one answers "what
// a wait that ran out would". Nothing runs any more: the charge is
// captured, and a wait that ran out reads the row again first.
func TestACaptureRefusedAWaitAfterTheMoveWasMadeAnswersTheCapture(t *testing.T) {
	t.Parallel()
	var provider *outage
	settled := make(chan struct{})
	h, id, _ := authorizedUnder(t, 100, func(sim string) (url string) {
		provider, url = newOutage(t, sim, "/capture", 0)
		return url
	}, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, waitRefusedAfter(limit.MaxWaiters+1, func() {
			close(provider.gate) // the first capture is made
			<-settled
		}))
	})
	first := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostMove("acme", id, "capture", ""))
		first <- resp
		close(settled)
	}()
	<-provider.held // the first capture is at the provider
	waiting := make(chan events.APIGatewayV2HTTPResponse, limit.MaxWaiters)
	for range limit.MaxWaiters {
		go func() { waiting <- handle(t, h, testkit.PostMove("acme", id, "capture", "")) }()
	}
	time.Sleep(300 * time.Millisecond) // both took their waits
	resp := handle(t, h, testkit.PostMove("acme", id, "capture", ""))
	if original := <-first; original.StatusCode != http.StatusOK {
		t.Fatalf("the first capture: %d %s, want 200", original.StatusCode, original.Body)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a capture refused a wait as the first was made: %d %v %s; want 200, the charge captured, nothing in progress", resp.StatusCode, resp.Headers, resp.Body)
	}
	for range limit.MaxWaiters {
		if r := <-waiting; r.StatusCode != http.StatusOK {
			t.Errorf("a capture granted a wait: %d %s, want 200", r.StatusCode, r.Body)
		}
	}
	if got := provider.calls.Load(); got != 1 {
		t.Fatalf("captures sent %d, want 1", got)
	}
}

// waitTimesOutAfter holds each conditional write that takes a wait until
// after has run. By then its 50 ms have passed: it fails unsent, as on a
// limits table that hangs.
func waitTimesOutAfter(after func()) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("WaitTimesOut",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && u.UpdateExpression != nil && strings.HasPrefix(*u.UpdateExpression, "ADD #w") {
						after()
						<-ctx.Done()
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

// TestACaptureRefusedAWaitAfterTheMoveWasUndoneCapturesItself (review
// waitcap): a capture retry finds the first capture at the provider. Its
// write to take a wait hangs; meanwhile the provider refuses the first
// capture, not processed, and the row is back in requires_capture.
// README: "if it was not made, this one captures itself"; docs/contract.md:
// answering in progress at once "is always honest". Nothing is in
// progress: the retry may capture, or at least not say one runs.
func TestACaptureRefusedAWaitAfterTheMoveWasUndoneCapturesItself(t *testing.T) {
	t.Parallel()
	var provider *outage
	settled := make(chan struct{})
	h, id, _ := authorizedUnder(t, 100, func(sim string) (url string) {
		provider, url = newOutage(t, sim, "/capture", 1)
		return url
	}, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, waitTimesOutAfter(func() {
			close(provider.gate) // the first capture is refused, not processed
			<-settled
		}))
	})
	go func() {
		resp, _ := h.Handle(t.Context(), testkit.PostMove("acme", id, "capture", ""))
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("the first capture: %d %s, want 503 provider-unavailable", resp.StatusCode, resp.Body)
		}
		close(settled)
	}()
	<-provider.held // the first capture is at the provider
	resp := handle(t, h, testkit.PostMove("acme", id, "capture", ""))
	if resp.StatusCode != http.StatusOK || provider.calls.Load() != 2 {
		t.Errorf("a capture retry as the first was proven not made: %d %v %s, %d captures sent; want 200, the retry's own capture, nothing in progress",
			resp.StatusCode, resp.Headers, resp.Body, provider.calls.Load())
	}
}

// TestCaptureRetriesPastTheMovesDeadlineWaitAtMostMaxWaiters (review
// waitcap): the first capture is at the provider past its attempt's
// deadline. Capture retries come at once; each asks the provider's state,
// which cannot settle it yet, and the move's deadline is postponed.
// docs/contract.md: "At most two requests wait on one key or move ... So
// at most four wait at once." Each retry then waits for the move without
// taking a wait: all of them wait.
func TestCaptureRetriesPastTheMovesDeadlineWaitAtMostMaxWaiters(t *testing.T) {
	t.Parallel()
	const retries = 6
	var provider *outage
	h, id, clock := authorizedUnder(t, 100, func(sim string) (url string) {
		provider, url = newOutage(t, sim, "/capture", everyPOST)
		return url
	}, func(w *testkit.Wiring) {
		w.Deps.Clients = testkit.Clients(t, slowUpdates("SET #deadline = :until", 300*time.Millisecond))
	})
	t.Cleanup(func() { close(provider.gate) }) // before the proxy closes
	go func() {
		_, _ = h.Handle(context.WithoutCancel(t.Context()), testkit.PostMove("acme", id, "capture", ""))
	}()
	<-provider.held                 // the first capture is at the provider
	clock.Advance(31 * time.Second) // the first's attempt is past its deadline
	waited := waitingCaptures(t, h, id, retries, func(resp events.APIGatewayV2HTTPResponse) {
		if resp.StatusCode != http.StatusConflict {
			t.Errorf("a capture retry, the move not settled: %d %s, want 409 in progress", resp.StatusCode, resp.Body)
		}
	})
	if waited > limit.MaxWaiters {
		t.Errorf("%d capture retries of one move past its deadline: %d waited for it at once, want at most %d", retries, waited, limit.MaxWaiters)
	}
}
