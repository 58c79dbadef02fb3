package lambdaidem_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// echoTenant answers 200 with the tenant its lease's key names.
func echoTenant(_ context.Context, _ events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
	return idem.Succeeded(idem.Response{Status: 200, Body: []byte(l.Key.Tenant())}), nil
}

func echoTenantREST(_ context.Context, _ events.APIGatewayProxyRequest, l *idem.Lease) (idem.Outcome, error) {
	return idem.Succeeded(idem.Response{Status: 200, Body: []byte(l.Key.Tenant())}), nil
}

func TestTenants(t *testing.T) {
	t.Parallel()
	jwt := func(claims map[string]string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}
	}
	lambda := func(ctx map[string]any) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: ctx}
	}
	iam := func(userID string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			AccountID: "123456789012", UserID: userID, UserARN: "arn:aws:sts::123456789012:assumed-role/orders/" + userID,
		}}
	}
	cases := []struct {
		name       string
		tenant     func(lambdaidem.Request) (string, bool)
		authorizer *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		want       string // "" for 401
	}{
		{"default: JWT sub", nil, jwt(map[string]string{"sub": "u-1"}), "u-1"},
		{"default: IAM role, not its session", nil, iam("AROAEXAMPLEROLEID:session-7"), "AROAEXAMPLEROLEID"},
		{"default: an HTTP API Lambda authorizer has no principal", nil, lambda(map[string]any{"tenant": "acme"}), ""},
		{"default: no authorizer", nil, nil, ""},
		{"JWT claim", lambdaidem.TenantFromJWTClaim("org"), jwt(map[string]string{"sub": "u-1", "org": "acme"}), "acme"},
		{"JWT claim missing", lambdaidem.TenantFromJWTClaim("org"), jwt(map[string]string{"sub": "u-1"}), ""},
		{"Lambda context string", lambdaidem.TenantFromLambdaContext("tenant"), lambda(map[string]any{"tenant": "acme"}), "acme"},
		{"Lambda context integer", lambdaidem.TenantFromLambdaContext("tenant"), lambda(map[string]any{"tenant": float64(42)}), "42"},
		{"Lambda context fraction", lambdaidem.TenantFromLambdaContext("tenant"), lambda(map[string]any{"tenant": 4.2}), ""},
		{"IAM user", lambdaidem.TenantFromIAMPrincipal(), iam("AIDAEXAMPLEUSERID"), "AIDAEXAMPLEUSERID"},
		{"IAM without a signature", lambdaidem.TenantFromIAMPrincipal(), jwt(map[string]string{"sub": "u-1"}), ""},
		{"constant", lambdaidem.TenantConstant("single"), nil, "single"},
		{"an Auth0 subject", nil, jwt(map[string]string{"sub": "auth0|5f7c8ec7c33c6c004bbafe82"}), "auth0|5f7c8ec7c33c6c004bbafe82"},
		{"a tenant with the key's separator", lambdaidem.TenantConstant("a#b"), nil, ""},
	}
	s := memstore.New()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			handler := lambdaidem.HTTP(s, "create-order", echoTenant, func(o *lambdaidem.Options) { o.Tenant = c.tenant })
			req := httpRequest("", idemtest.UniqueKey(t, "x").ClientKey(), `{}`)
			req.RequestContext.Authorizer = c.authorizer
			resp, err := handler(t.Context(), req)
			switch {
			case err != nil:
				t.Fatal(err)
			case c.want == "":
				wantProblem(t, resp, 401, "unauthorized")
			case resp.StatusCode != 200 || resp.Body != c.want:
				t.Fatalf("got %d %s, want tenant %s", resp.StatusCode, resp.Body, c.want)
			}
		})
	}
}

func TestTenantsREST(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	cases := []struct {
		name   string
		tenant func(lambdaidem.Request) (string, bool)
		ctx    events.APIGatewayProxyRequestContext
		want   string
	}{
		{"default: Lambda authorizer principalId", nil, events.APIGatewayProxyRequestContext{Authorizer: map[string]any{"principalId": "acme"}}, "acme"},
		{"default: Cognito sub", nil, events.APIGatewayProxyRequestContext{Authorizer: map[string]any{"claims": map[string]any{"sub": "u-1"}}}, "u-1"},
		{"default: IAM", nil, events.APIGatewayProxyRequestContext{Identity: events.APIGatewayRequestIdentity{User: "AROAEXAMPLEROLEID:s", AccountID: "123456789012"}}, "AROAEXAMPLEROLEID"},
		{"Lambda context", lambdaidem.TenantFromLambdaContext("org"), events.APIGatewayProxyRequestContext{Authorizer: map[string]any{"principalId": "u-1", "org": "acme"}}, "acme"},
		{"Cognito claim", lambdaidem.TenantFromJWTClaim("custom:org"), events.APIGatewayProxyRequestContext{Authorizer: map[string]any{"claims": map[string]any{"custom:org": "acme"}}}, "acme"},
		{"none", nil, events.APIGatewayProxyRequestContext{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			handler := lambdaidem.REST(s, "create-order", echoTenantREST, func(o *lambdaidem.Options) { o.Tenant = c.tenant })
			req := events.APIGatewayProxyRequest{Body: `{}`, Headers: map[string]string{"Idempotency-Key": idemtest.UniqueKey(t, "x").ClientKey()}, RequestContext: c.ctx}
			resp, err := handler(t.Context(), req)
			switch {
			case err != nil:
				t.Fatal(err)
			case c.want == "":
				if resp.StatusCode != 401 {
					t.Fatalf("got %d %s, want 401", resp.StatusCode, resp.Body)
				}
			case resp.StatusCode != 200 || resp.Body != c.want:
				t.Fatalf("got %d %s, want tenant %s", resp.StatusCode, resp.Body, c.want)
			}
		})
	}
}

// TestKeyAndFingerprint: a key from another header or from a function, and
// a fingerprint of some members of the body only.
func TestKeyAndFingerprint(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs atomic.Int32
	next := func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"order":"o-1"}`)}), nil
	}
	call := func(h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		t.Helper()
		resp, err := h(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	key := idemtest.UniqueKey(t, "x").ClientKey()

	byHeader := lambdaidem.HTTP(s, "by-header", next, func(o *lambdaidem.Options) {
		o.Header = "X-Request-Id"
		o.Fingerprint = lambdaidem.FingerprintFields("item", "qty")
	})
	req := httpRequest("acme", "", `{"item":"book","qty":1,"sent_at":"2026-01-01T00:00:00Z"}`)
	req.Headers["x-request-id"] = key
	if resp := call(byHeader, req); resp.StatusCode != 201 || runs.Load() != 1 {
		t.Fatalf("first: %d %s", resp.StatusCode, resp.Body)
	}
	req.Body = `{"sent_at":"2026-01-01T00:05:00Z","qty":1,"item":"book"}` // resent later
	if resp := call(byHeader, req); resp.StatusCode != 201 || resp.Headers[lambdaidem.HeaderReplayed] != "true" || runs.Load() != 1 {
		t.Fatalf("a resend differing outside the fingerprinted members: %d %v, %d runs; want a replay", resp.StatusCode, resp.Headers, runs.Load())
	}
	req.Body = `{"item":"book","qty":2}`
	wantProblem(t, call(byHeader, req), 422, "idempotency-key-reused")
	for _, body := range []string{`[1]`, `null`, `{"item":"a","item":"b"}`, ``} {
		req.Body = body
		wantProblem(t, call(byHeader, req), 400, "invalid-request")
	}
	if p := wantProblem(t, call(byHeader, httpRequest("acme", key, `{}`)), 400, "invalid-idempotency-key"); !strings.Contains(p.Detail, "X-Request-Id header") {
		t.Fatalf("detail %q does not name the header", p.Detail)
	}

	byQuery := lambdaidem.HTTP(s, "by-query", next, func(o *lambdaidem.Options) {
		o.Key = func(r lambdaidem.Request) (string, bool) {
			k, ok := r.HTTP().QueryStringParameters["request"]
			return k, ok
		}
	})
	req = httpRequest("acme", "", `{"item":"book"}`)
	req.QueryStringParameters = map[string]string{"request": key}
	for i := range 2 {
		if resp := call(byQuery, req); resp.StatusCode != 201 || (resp.Headers[lambdaidem.HeaderReplayed] == "true") != (i == 1) {
			t.Fatalf("call %d with the key in the query: %d %v", i+1, resp.StatusCode, resp.Headers)
		}
	}
	if p := wantProblem(t, call(byQuery, httpRequest("acme", key, `{}`)), 400, "invalid-idempotency-key"); !strings.Contains(p.Detail, "idempotency key is required") {
		t.Fatalf("detail %q: want the key named as a key, not a header", p.Detail)
	}
}

func TestOnReplayAndProblemBase(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var replays atomic.Int32
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{}`)}), nil
	}, func(o *lambdaidem.Options) {
		o.ProblemBase = "https://api.example.com/problems/"
		o.OnReplay = func(_ context.Context, r lambdaidem.Request, key idem.Key, resp idem.Response) idem.Response {
			replays.Add(1)
			if r.Route != "POST /orders" || key.Operation() != "create-order" || resp.Headers[lambdaidem.HeaderReplayed] != "true" {
				t.Errorf("OnReplay got route %q, key %s, headers %v", r.Route, key.LogHash(), resp.Headers)
			}
			resp.Headers["X-Replayed-By"] = "hook"
			return resp
		}
	})
	req := httpRequest("acme", idemtest.UniqueKey(t, "x").ClientKey(), `{}`)
	first, _ := handler(t.Context(), req)
	again, _ := handler(t.Context(), req)
	if first.Headers["X-Replayed-By"] != "" || again.Headers["X-Replayed-By"] != "hook" || replays.Load() != 1 {
		t.Fatalf("first %v, replay %v, %d hook calls: want the hook on the replay only", first.Headers, again.Headers, replays.Load())
	}
	req.Body = `{"other":1}`
	resp, _ := handler(t.Context(), req)
	var p problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Type != "https://api.example.com/problems/idempotency-key-reused" {
		t.Fatalf("problem %s under the API's own base: %v", resp.Body, err)
	}
	if strings.Contains(lambdaidem.DefaultProblemBase, "chargeonce.dev") {
		t.Fatalf("the default problem base %s is the service's", lambdaidem.DefaultProblemBase)
	}
}

// TestUnknownOutcomeAnswers: each answer for an outcome not known says
// when to retry and what resolves it, and the 409s that follow keep saying
// so until it is resolved.
func TestUnknownOutcomeAnswers(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := idemtest.NewClock(t0)
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now }) // a lease of DefaultLease, 30s, without a deadline
	opts := func(o *lambdaidem.Options) {
		o.ResolveAfter = time.Minute
	}
	timeout := func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, context.DeadlineExceeded
	}
	handler := lambdaidem.HTTP(s, "create-order", timeout, opts)
	req := httpRequest("acme", idemtest.UniqueKey(t, "x").ClientKey(), `{}`)
	answer := func(status int, slug, retryAfter string, details ...string) {
		t.Helper()
		resp, err := handler(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		p := wantProblem(t, resp, status, slug)
		if resp.Headers["Retry-After"] != retryAfter {
			t.Errorf("Retry-After %q, want %q", resp.Headers["Retry-After"], retryAfter)
		}
		for _, d := range details {
			if !strings.Contains(p.Detail, d) {
				t.Errorf("detail %q does not say %q", p.Detail, d)
			}
		}
	}
	leaseEnd, resolveBy := "2026-03-01T12:00:30Z", "2026-03-01T12:01:30Z"
	answer(503, "outcome-pending", "90", leaseEnd, resolveBy, "reconciliation", "409 request-in-progress")
	answer(409, "request-in-progress", "30", leaseEnd)
	clock.Advance(40 * time.Second)
	answer(409, "request-in-progress", "50", "ended at "+leaseEnd, resolveBy)
	clock.Advance(time.Minute)
	answer(409, "request-in-progress", "30", "ended at "+leaseEnd, "due by "+resolveBy) // overdue: once every 30s

	lost := lambdaidem.HTTP(beginFails{Backend: s, err: &idem.UnknownClaimError{LeaseExpiresAt: clock.Now().Add(30 * time.Second), Err: idem.ErrUnavailable}}, "create-order", timeout, opts)
	resp, _ := lost(t.Context(), req)
	if p := wantProblem(t, resp, 503, "outcome-pending"); resp.Headers["Retry-After"] != "1" || !strings.Contains(p.Detail, "not carried out") {
		t.Fatalf("an unconfirmed claim: Retry-After %q, detail %q", resp.Headers["Retry-After"], p.Detail)
	}
}

// TestAuth0Tenant: an Auth0 subject ("auth0|…") is a tenant, end to end
// on both stores: the request runs once, its retry is a replay, and the
// same key from another provider's subject is another intent.
func TestAuth0Tenant(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s idemtest.Subject) {
		var runs atomic.Int32
		handler := lambdaidem.HTTP(s.Store, "create-order", func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
			runs.Add(1)
			return echoTenant(ctx, req, l)
		})
		key := idemtest.UniqueKey(t, "x").ClientKey()
		for i, c := range []struct {
			sub      string
			replayed bool
			runs     int32
		}{
			{"auth0|5f7c8ec7c33c6c004bbafe82", false, 1},
			{"auth0|5f7c8ec7c33c6c004bbafe82", true, 1},
			{"google-oauth2|103547991597142817347", false, 2},
		} {
			resp, err := handler(t.Context(), httpRequest(c.sub, key, `{"item":"book"}`))
			if err != nil || resp.StatusCode != 200 || resp.Body != c.sub || (resp.Headers[lambdaidem.HeaderReplayed] == "true") != c.replayed || runs.Load() != c.runs {
				t.Fatalf("call %d (%s): %d %s %v, %v, %d runs; want tenant %s, replayed %v", i+1, c.sub, resp.StatusCode, resp.Body, resp.Headers, err, runs.Load(), c.sub, c.replayed)
			}
		}
	})
}
