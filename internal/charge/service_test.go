package charge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// storeCall is one DynamoDB call of a request's path: its action, and a
// part of its body where the path makes that action more than once.
type storeCall struct{ name, action, marker string }

// The calls the paths make.
var (
	claimCall  = storeCall{"claim", "PutItem", ""}
	commitCall = storeCall{"commit", "TransactWriteItems", ""}
	readCall   = storeCall{"read", "GetItem", ""}
	queryCall  = storeCall{"read", "Query", ""}
	holdCall   = storeCall{"hold", "UpdateItem", "SET #hold"}
	moveCall   = storeCall{"move", "UpdateItem", "SET #status = :via"}
	settleCall = storeCall{"settle", "UpdateItem", "SET #status = :to"}
)

// storeFaults is a DynamoDB transport that fails one call of each armed
// tenant's, at every attempt the SDK makes at it.
type storeFaults struct {
	mu    sync.Mutex
	armed map[string]*armedCall // by tenant
}

type armedCall struct {
	call  storeCall
	fault idemtest.ConnectionFault
	// invocation is the SDK's id of the call it hit, once it has.
	invocation string
}

func (s *storeFaults) arm(tenant string, call storeCall, fault idemtest.ConnectionFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed == nil {
		s.armed = map[string]*armedCall{}
	}
	s.armed[tenant] = &armedCall{call: call, fault: fault}
}

// disarm stops failing tenant's calls and reports whether one was hit.
func (s *storeFaults) disarm(tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.armed[tenant]
	delete(s.armed, tenant)
	return a != nil && a.invocation != ""
}

// clients are SDK clients whose DynamoDB requests go through s, with the
// SDK's retries but not their pauses.
func (s *storeFaults) clients(t *testing.T) awsenv.Clients {
	return testkit.Clients(t, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: s}
		o.Logger = logging.Nop{} // not a warning for each answer cut short
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxBackoff, so.RateLimiter = time.Millisecond, ratelimit.None })
	})
}

// stalled is a fault of this test's: DynamoDB applies the request, and
// its answer never comes before the request's context ends.
const stalled idemtest.ConnectionFault = "stalled"

func (s *storeFaults) RoundTrip(req *http.Request) (*http.Response, error) {
	fault, hit := s.hit(req, readBody(req))
	switch {
	case hit && fault == stalled:
		if resp, err := http.DefaultTransport.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
		}
		<-req.Context().Done()
		return nil, req.Context().Err()
	case hit:
		return idemtest.FaultyConnection{Fault: fault}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// hit reports whether req is an attempt at an armed call, and its fault.
func (s *storeFaults) hit(req *http.Request, body []byte) (idemtest.ConnectionFault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.Header.Get("Amz-Sdk-Invocation-Id")
	for tenant, a := range s.armed {
		switch {
		case !bytes.Contains(body, []byte(tenant)):
		case a.invocation != "":
			if a.invocation == id {
				return a.fault, true
			}
		case strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+a.call.action) && bytes.Contains(body, []byte(a.call.marker)):
			a.invocation = id
			return a.fault, true
		}
	}
	return "", false
}

// faultedPath is a request whose DynamoDB calls fail in turn.
type faultedPath struct {
	name string
	// prepare makes what tenant's request needs, and returns it.
	prepare func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest
	calls   []faultedCall
	// untouched checks, after a service-unavailable answer, that the
	// request did nothing: a retry is answered as a first request.
	untouched func(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest)
}

// faultedCall is a call of a path, and the faults after which it may
// have written: those are answered outcome-pending, the others
// service-unavailable.
type faultedCall struct {
	storeCall
	pending []idemtest.ConnectionFault
}

// Which faults leave a call's write possibly landed.
var (
	none  []idemtest.ConnectionFault
	sent  = []idemtest.ConnectionFault{idemtest.Reset, idemtest.Truncated}
	reset = []idemtest.ConnectionFault{idemtest.Reset}
	all   = idemtest.ConnectionFaults
)

// askedOnce: the retry is answered 201, and the provider was asked once
// for its reference, by the retry.
func askedOnce(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest) {
	t.Helper()
	retried := h.do(req)
	wantStatus(t, retried, http.StatusCreated)
	var b struct {
		ProviderReference string `json:"provider_reference"`
	}
	if err := json.Unmarshal([]byte(retried.Body), &b); err != nil || b.ProviderReference == "" {
		t.Fatalf("no provider reference in %s: %v", retried.Body, err)
	}
	l := h.sim.Ledger()
	if n := l.References[b.ProviderReference].Calls + l.Refunds[b.ProviderReference].Calls; n != 1 {
		t.Errorf("the provider was asked %d times for the retry's reference", n)
	}
}

// stillAuthorized: the provider neither captured nor canceled the
// charge, and the retry is answered 200.
func stillAuthorized(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest) {
	t.Helper()
	if e := h.sim.Ledger().References[h.row(t, tenantOf(req), req.PathParameters["id"]).ProviderReference]; e.Captures != 0 || e.Canceled {
		t.Errorf("the provider holds %+v", e)
	}
	wantStatus(t, h.do(req), http.StatusOK)
}

// readAgain: the retry is answered 200.
func readAgain(t *testing.T, h *harness, req events.APIGatewayV2HTTPRequest) {
	t.Helper()
	wantStatus(t, h.do(req), http.StatusOK)
}

// faultedPaths are every request's path with its DynamoDB calls.
func faultedPaths() []faultedPath {
	move := func(verb string) func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest {
		return func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest {
			return postMove(tenant, h.authorized(t, tenant, 1000), verb, "")
		}
	}
	moveCalls := []faultedCall{{readCall, none}, {moveCall, sent}, {settleCall, all}}
	return []faultedPath{{
		name: "create",
		prepare: func(_ *testing.T, _ *harness, tenant string) events.APIGatewayV2HTTPRequest {
			return post(tenant, newKey(), visa)
		},
		calls:     []faultedCall{{claimCall, sent}, {commitCall, all}},
		untouched: askedOnce,
	}, {
		name: "create again",
		prepare: func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest {
			req := post(tenant, newKey(), visa)
			wantStatus(t, h.do(req), http.StatusCreated)
			return req
		},
		// The claim meets the settled record: refused, it wrote nothing,
		// even with the refusal cut short.
		calls:     []faultedCall{{claimCall, reset}},
		untouched: askedOnce,
	}, {
		name: "refund",
		prepare: func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest {
			return postRefund(tenant, newKey(), h.charged(t, tenant, 1000), `{"amount":1000}`)
		},
		// A hold that may have landed is freed, then the key released.
		calls:     []faultedCall{{readCall, none}, {claimCall, sent}, {holdCall, none}, {commitCall, all}},
		untouched: askedOnce,
	}, {
		name: "capture", prepare: move("capture"), calls: moveCalls, untouched: stillAuthorized,
	}, {
		name: "cancel", prepare: move("cancel"), calls: moveCalls, untouched: stillAuthorized,
	}, {
		name: "get",
		prepare: func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest {
			return get(tenant, h.charged(t, tenant, 1000))
		},
		calls:     []faultedCall{{queryCall, none}},
		untouched: readAgain,
	}, {
		name: "get refund",
		prepare: func(t *testing.T, h *harness, tenant string) events.APIGatewayV2HTTPRequest {
			id := h.charged(t, tenant, 1000)
			made := h.do(postRefund(tenant, newKey(), id, `{"amount":100}`))
			wantStatus(t, made, http.StatusCreated)
			var rf struct{ ID string }
			if err := json.Unmarshal([]byte(made.Body), &rf); err != nil {
				t.Fatal(err)
			}
			return testkit.GetRefund(tenant, id, rf.ID)
		},
		calls:     []faultedCall{{readCall, none}},
		untouched: readAgain,
	}}
}

// TestStoreFaultsAreAnsweredAsWhatTheyProve: every call of every path,
// its connection refused, reset after DynamoDB applied it, or its answer
// cut short. A failed read, or a write never sent, proves that this
// request wrote nothing: 503 service-unavailable. A write that may have
// landed after the claim is 503 outcome-pending. Never 500.
func TestStoreFaultsAreAnsweredAsWhatTheyProve(t *testing.T) {
	t.Parallel()
	faults := &storeFaults{}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) { d.Clients = faults.clients(t) }})
	for _, p := range faultedPaths() {
		for _, c := range p.calls {
			for _, fault := range idemtest.ConnectionFaults {
				t.Run(p.name+"/"+c.name+"/"+string(fault), func(t *testing.T) {
					t.Parallel()
					tenant := testkit.UniqueName("acme")
					req := p.prepare(t, h, tenant)
					faults.arm(tenant, c.storeCall, fault)
					resp := h.do(req)
					if !faults.disarm(tenant) {
						t.Fatalf("no %s call was made: the test proves nothing", c.action)
					}
					want := httpapi.ProblemServiceUnavailable.Slug
					if slices.Contains(c.pending, fault) {
						want = httpapi.ProblemOutcomePending.Slug
					}
					if resp.StatusCode != http.StatusServiceUnavailable || problemType(t, resp) != want || resp.Headers[httpapi.HeaderRetryAfter] == "" {
						t.Fatalf("%s's %s over a connection %s: %d %s; want 503 %s with Retry-After", p.name, c.name, fault, resp.StatusCode, resp.Body, want)
					}
					if _, keyed := req.Headers[strings.ToLower(httpapi.HeaderIdempotencyKey)]; !keyed && strings.Contains(resp.Body, "key") {
						t.Errorf("a request without a key is told of one: %s", resp.Body)
					}
					if want == httpapi.ProblemServiceUnavailable.Slug {
						p.untouched(t, h, req)
					}
				})
			}
		}
	}
}

// TestStuckMoveSettledOverAFailedConnection: a capture finds the move
// before it past its deadline, and settles it from the provider's state.
// That settlement's write fails, whatever way: the move's outcome is
// unknown to this request, so 503 outcome-pending, never 500.
func TestStuckMoveSettledOverAFailedConnection(t *testing.T) {
	t.Parallel()
	faults := &storeFaults{}
	clock := testkit.NewClock(time.Now())
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) { d.Clients, d.Clock = faults.clients(t), clock.Now }})
	stuck := map[idemtest.ConnectionFault]events.APIGatewayV2HTTPRequest{}
	for _, fault := range idemtest.ConnectionFaults {
		tenant := testkit.UniqueName("acme")
		req := postMove(tenant, h.authorized(t, tenant, 1000), "capture", "")
		faults.arm(tenant, settleCall, idemtest.Refused) // captured, not recorded
		if resp := h.do(req); problemType(t, resp) != httpapi.ProblemOutcomePending.Slug || !faults.disarm(tenant) {
			t.Fatalf("a capture whose settlement was refused: %d %s", resp.StatusCode, resp.Body)
		}
		stuck[fault] = req
	}
	clock.Advance(31 * time.Second) // past the moves' deadline
	for fault, req := range stuck {
		faults.arm(tenantOf(req), settleCall, fault)
		resp := h.do(req)
		if !faults.disarm(tenantOf(req)) {
			t.Fatalf("%s: the stuck move was not settled: %d %s", fault, resp.StatusCode, resp.Body)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || problemType(t, resp) != httpapi.ProblemOutcomePending.Slug {
			t.Errorf("a stuck move's settlement over a connection %s: %d %s; want 503 outcome-pending", fault, resp.StatusCode, resp.Body)
		}
	}
}

// TestEveryPathAnswersBeforeItsDeadline: each call of each path stalls
// until the request's time runs out. The function still answers, with
// time to spare before its deadline, so the gateway never answers for it.
// A read that stalled wrote nothing: service-unavailable. A write may have
// landed: outcome-pending.
func TestEveryPathAnswersBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	faults := &storeFaults{}
	h := newHarnessWith(t, harnessConfig{
		// The provider's answer comes well before the stalled commit.
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.CommitReserve = 1500 * time.Millisecond }},
		deps: func(d *app.Deps) { d.Clients = faults.clients(t) },
	})
	type stall struct {
		path   faultedPath
		call   faultedCall
		tenant string
		req    events.APIGatewayV2HTTPRequest
		resp   events.APIGatewayV2HTTPResponse
		err    error
		left   time.Duration // before the deadline, once answered
		hit    bool
	}
	var stalls []*stall
	for _, p := range faultedPaths() {
		for _, c := range p.calls {
			st := &stall{path: p, call: c, tenant: testkit.UniqueName("acme")}
			st.req = p.prepare(t, h, st.tenant)
			stalls = append(stalls, st)
		}
	}
	// All at once: each waits out its budget.
	var wg sync.WaitGroup
	for _, st := range stalls {
		faults.arm(st.tenant, st.call.storeCall, stalled)
		wg.Go(func() {
			st.resp, st.left, st.err = h.handleWithin(t.Context(), st.req)
			st.hit = faults.disarm(st.tenant)
		})
	}
	wg.Wait()
	for _, st := range stalls {
		t.Run(st.path.name+"/"+st.call.name, func(t *testing.T) {
			if !st.hit || st.err != nil {
				t.Fatalf("stalled %v (else the test proves nothing), error %v", st.hit, st.err)
			}
			validateContract(t, st.req, st.resp)
			t.Logf("answered %d, %s before its deadline", st.resp.StatusCode, st.left.Round(time.Millisecond))
			want := httpapi.ProblemOutcomePending.Slug
			if st.call.action == readCall.action || st.call.action == queryCall.action {
				want = httpapi.ProblemServiceUnavailable.Slug
			}
			if st.left < answerSpare {
				t.Errorf("answered %s before its deadline, want at least %s: %d %s", st.left, answerSpare, st.resp.StatusCode, st.resp.Body)
			}
			if st.resp.StatusCode != http.StatusServiceUnavailable || problemType(t, st.resp) != want {
				t.Errorf("%d %s; want 503 %s", st.resp.StatusCode, st.resp.Body, want)
			}
		})
	}
}

// A request under a deadline has answerBudget of the function's time
// left. Its answer must leave at least answerSpare of it.
const (
	answerBudget = 2500 * time.Millisecond
	answerSpare  = 100 * time.Millisecond
)

// handleWithin hands req to the handler with answerBudget left, and says
// how much of it the answer left.
func (h *harness) handleWithin(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, answerBudget)
	defer cancel()
	deadline, _ := ctx.Deadline()
	resp, err := h.handler.Handle(ctx, req)
	return resp, time.Until(deadline), err
}

// TestLogsCarryNoSecrets drives every outcome and checks the log lines: one
// JSON object per request with its outcome and key hash, and never the card
// source, the raw body or the raw key.
func TestLogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.InflightWait = 0 })
	key := "secret-key-" + newKey()
	sources := []string{"tok_visa", "tok_decline", "tok_timeout_once", "tok_unavailable_once"}
	var bodies []string
	for i, src := range sources {
		body := strings.Replace(visa, "tok_visa", src, 1)
		bodies = append(bodies, body)
		k := key + "-" + string(rune('a'+i))
		h.do(post("acme", k, body))
		h.do(post("acme", k, body))                                     // replay or conflict
		h.do(post("acme", k, strings.Replace(body, "1500", "1501", 1))) // mismatch
	}
	h.do(post("acme", key+"-bad", `{"amount":0,"currency":"EUR","source":"tok_visa"}`))

	logs := h.logs.String()
	outcomes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if o, ok := rec["outcome"].(string); ok {
			outcomes[o] = true
			if rec["tenant"] != "acme" || rec["key_hash"] == "" {
				t.Errorf("request log without tenant or key hash: %q", line)
			}
		}
	}
	for _, want := range []string{"created", "replayed", "mismatch", "declined", "ambiguous", "unavailable", "conflict", "invalid"} {
		if !outcomes[want] {
			t.Errorf("no log line with outcome %q (got %v)", want, outcomes)
		}
	}
	for _, secret := range append(append(sources, key, "secret-key"), bodies...) {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

// TestInternalErrorsRevealNothing makes the store fail and checks the 500
// body is the generic problem, with no trace of the cause.
func TestInternalErrorsRevealNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.ChargesTable = "no-such-table-x1" })
	resp := h.do(get("acme", "ch_000000000000000000000000"))
	wantStatus(t, resp, 500)
	if problemType(t, resp) != "internal-error" {
		t.Fatalf("500 body %s", resp.Body)
	}
	for _, leak := range []string{"no-such-table", "ResourceNotFound", "dynamodb", "operation error"} {
		if strings.Contains(strings.ToLower(resp.Body), strings.ToLower(leak)) {
			t.Errorf("500 body reveals %q: %s", leak, resp.Body)
		}
	}
}

// TestErrorClassNamesFaultsAsFaults: a claim or take-over whose answer a
// cut connection lost is a store fault, not an internal error. Its
// message is delivered again, and the chaos run counts internal errors.
func TestErrorClassNamesFaultsAsFaults(t *testing.T) {
	t.Parallel()
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a take-over whose answer a cut connection lost", fmt.Errorf("idem: take over k: %w", &idem.UnknownClaimError{Err: reset}), "store_unavailable"},
		{"a claim whose answer came too late", fmt.Errorf("idem: begin k: %w", &idem.UnknownClaimError{Err: context.DeadlineExceeded}), "deadline"},
		{"a store that refused the call", fmt.Errorf("idem: get k: %w", idem.ErrUnavailable), "store_unavailable"},
		{"a reconcile message SQS did not answer", fmt.Errorf("queue: send: %w", &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage", Err: reset}), "queue_unavailable"},
		{"an error of no known kind", errors.New("charge: no operation"), "internal"},
	} {
		if got := charge.ErrorClass(c.err); got != c.want {
			t.Errorf("%s: class %q, want %q", c.name, got, c.want)
		}
	}
}

// TestAnUnansweredClaimIsLoggedAsAStoreFault: DynamoDB takes a charge's
// claim and the connection resets before its answer. The log names the
// cause a store fault, never an internal error.
func TestAnUnansweredClaimIsLoggedAsAStoreFault(t *testing.T) {
	t.Parallel()
	faults := &storeFaults{}
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) { d.Clients = faults.clients(t) }})
	tenant := testkit.UniqueName("acme")
	faults.arm(tenant, claimCall, idemtest.Reset)
	resp := h.do(post(tenant, newKey(), visa))
	if !faults.disarm(tenant) || problemType(t, resp) != httpapi.ProblemOutcomePending.Slug {
		t.Fatalf("a claim over a reset connection: %d %s, want 503 outcome-pending", resp.StatusCode, resp.Body)
	}
	for _, r := range h.logs.Records(t) {
		if r["msg"] == "charge: claim outcome unknown; queued for reconciliation" {
			if r["cause"] != "store_unavailable" {
				t.Fatalf("logged cause %v, want store_unavailable", r["cause"])
			}
			return
		}
	}
	t.Fatalf("no unknown claim logged:\n%s", h.logs)
}
