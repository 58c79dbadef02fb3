package gateway_test

import (
	"context"
	"encoding/base64"
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
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/chargeonce/chargeonce/internal/local/gateway"
)

var routes = []string{"POST /charges", "GET /charges/{id}", "GET /charges/latest"}

// recorder is a handler that keeps the events it gets and answers res.
type recorder struct {
	mu     sync.Mutex
	events []events.APIGatewayV2HTTPRequest
	ctxs   []context.Context
	res    events.APIGatewayV2HTTPResponse
}

func (r *recorder) handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, req)
	r.ctxs = append(r.ctxs, ctx)
	return r.res, nil
}

func (r *recorder) only(t *testing.T) (events.APIGatewayV2HTTPRequest, context.Context) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) != 1 {
		t.Fatalf("handler invoked %d times, want 1", len(r.events))
	}
	return r.events[0], r.ctxs[0]
}

func serve(t *testing.T, h gateway.HandlerFunc, opts ...func(*gateway.Options)) *httptest.Server {
	t.Helper()
	gw, err := gateway.New(h, routes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestEventLikeAPIGateway(t *testing.T) {
	t.Parallel()
	rec := &recorder{res: events.APIGatewayV2HTTPResponse{StatusCode: 201}}
	srv := serve(t, rec.handle, gateway.WithTenantClaim("org"), gateway.WithTimeout(7*time.Second))
	before := time.Now()
	res, _ := do(t, http.MethodPost, srv.URL+"/charges?expand=a&expand=b&x=1", `{"amount":1500}`, http.Header{
		"Authorization":   {"Bearer dev:acme"},
		"Content-Type":    {"application/json"},
		"Idempotency-Key": {"order-1"},
		"X-Multi":         {"one", "two"},
		"User-Agent":      {"test-agent/1"},
		"Cookie":          {"a=1; b=2"},
	})
	if res.StatusCode != 201 {
		t.Fatalf("status %d", res.StatusCode)
	}
	ev, ctx := rec.only(t)
	checks := []struct{ field, got, want string }{
		{"Version", ev.Version, "2.0"},
		{"RouteKey", ev.RouteKey, "POST /charges"},
		{"RawPath", ev.RawPath, "/charges"},
		{"RawQueryString", ev.RawQueryString, "expand=a&expand=b&x=1"},
		{"Body", ev.Body, `{"amount":1500}`},
		{"content-type", ev.Headers["content-type"], "application/json"},
		{"idempotency-key", ev.Headers["idempotency-key"], "order-1"},
		{"x-multi", ev.Headers["x-multi"], "one,two"},
		{"authorization", ev.Headers["authorization"], "Bearer dev:acme"},
		{"host", ev.Headers["host"], strings.TrimPrefix(srv.URL, "http://")},
		{"query expand", ev.QueryStringParameters["expand"], "a,b"},
		{"query x", ev.QueryStringParameters["x"], "1"},
		{"HTTP.Method", ev.RequestContext.HTTP.Method, "POST"},
		{"HTTP.Path", ev.RequestContext.HTTP.Path, "/charges"},
		{"HTTP.SourceIP", ev.RequestContext.HTTP.SourceIP, "127.0.0.1"},
		{"HTTP.UserAgent", ev.RequestContext.HTTP.UserAgent, "test-agent/1"},
		{"RequestContext.RouteKey", ev.RequestContext.RouteKey, "POST /charges"},
		{"Stage", ev.RequestContext.Stage, "$default"},
		{"claim", ev.RequestContext.Authorizer.JWT.Claims["org"], "acme"},
		{"sub", ev.RequestContext.Authorizer.JWT.Claims["sub"], "dev:acme"},
		{"RequestID", ev.RequestContext.RequestID, res.Header.Get("Apigw-Requestid")},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.field, c.got, c.want)
		}
	}
	for name := range ev.Headers {
		if name != strings.ToLower(name) {
			t.Errorf("header %q is not lower-case", name)
		}
	}
	if _, ok := ev.Headers["cookie"]; ok || strings.Join(ev.Cookies, "|") != "a=1|b=2" {
		t.Errorf("cookies = %q, headers = %v", ev.Cookies, ev.Headers)
	}
	if ev.IsBase64Encoded || ev.RequestContext.RequestID == "" {
		t.Errorf("base64 %v, request id %q", ev.IsBase64Encoded, ev.RequestContext.RequestID)
	}
	if ev.RequestContext.TimeEpoch < before.UnixMilli() {
		t.Errorf("time %d, before the request (%d)", ev.RequestContext.TimeEpoch, before.UnixMilli())
	}
	lc, ok := lambdacontext.FromContext(ctx)
	if !ok || len(lc.AwsRequestID) != 36 {
		t.Errorf("lambda context %+v, %v", lc, ok)
	}
	if deadline, ok := ctx.Deadline(); !ok || deadline.Sub(before) > 8*time.Second || deadline.Sub(before) < 6*time.Second {
		t.Errorf("deadline %v (%v after the request), want the 7s timeout", deadline, deadline.Sub(before))
	}
}

func TestRouteKeyAndPathParameters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path, route, id string
	}{
		{"/charges/ch_123", "GET /charges/{id}", "ch_123"},
		{"/charges/a%2Fb%20c", "GET /charges/{id}", "a/b c"},
		{"/charges/latest", "GET /charges/latest", ""}, // a literal beats a parameter
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{res: events.APIGatewayV2HTTPResponse{StatusCode: 200}}
			srv := serve(t, rec.handle)
			if res, body := do(t, http.MethodGet, srv.URL+tt.path, "", http.Header{"Authorization": {"Bearer dev:acme"}}); res.StatusCode != 200 {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			ev, _ := rec.only(t)
			if ev.RouteKey != tt.route || ev.PathParameters["id"] != tt.id || ev.RawPath != tt.path {
				t.Errorf("route %q, params %v, raw path %q", ev.RouteKey, ev.PathParameters, ev.RawPath)
			}
			if ev.Body != "" || ev.IsBase64Encoded {
				t.Errorf("body %q, base64 %v", ev.Body, ev.IsBase64Encoded)
			}
		})
	}
}

func TestBinaryBodyIsBase64(t *testing.T) {
	t.Parallel()
	rec := &recorder{res: events.APIGatewayV2HTTPResponse{StatusCode: 200}}
	srv := serve(t, rec.handle)
	raw := "\xff\xfe\x00binary"
	do(t, http.MethodPost, srv.URL+"/charges", raw, http.Header{"Authorization": {"Bearer dev:acme"}})
	ev, _ := rec.only(t)
	got, err := base64.StdEncoding.DecodeString(ev.Body)
	if !ev.IsBase64Encoded || err != nil || string(got) != raw {
		t.Errorf("base64 %v, body %q (%v)", ev.IsBase64Encoded, ev.Body, err)
	}
}

func TestGatewayAnswersWithoutInvoking(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path, auth string
		status                   int
		message                  string
	}{
		{"no token", http.MethodPost, "/charges", "", 401, "Unauthorized"},
		{"not a dev token", http.MethodPost, "/charges", "Bearer eyJhbGciOi.x.y", 401, "Unauthorized"},
		{"empty tenant", http.MethodPost, "/charges", "Bearer dev:", 401, "Unauthorized"},
		{"other scheme", http.MethodPost, "/charges", "Basic dev:acme", 401, "Unauthorized"},
		{"unknown path", http.MethodPost, "/refunds", "Bearer dev:acme", 404, "Not Found"},
		{"unknown method", http.MethodDelete, "/charges/ch_1", "Bearer dev:acme", 404, "Not Found"},
		{"empty parameter", http.MethodGet, "/charges/", "Bearer dev:acme", 404, "Not Found"},
		{"too deep", http.MethodGet, "/charges/a/b", "Bearer dev:acme", 404, "Not Found"},
		{"unknown route before auth", http.MethodGet, "/nowhere", "", 404, "Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{res: events.APIGatewayV2HTTPResponse{StatusCode: 200}}
			srv := serve(t, rec.handle)
			h := http.Header{}
			if tt.auth != "" {
				h.Set("Authorization", tt.auth)
			}
			res, body := do(t, tt.method, srv.URL+tt.path, "{}", h)
			var msg struct{ Message string }
			if err := json.Unmarshal([]byte(body), &msg); err != nil || res.StatusCode != tt.status || msg.Message != tt.message {
				t.Errorf("%d %s, want %d {\"message\":%q}", res.StatusCode, body, tt.status, tt.message)
			}
			if len(rec.events) != 0 {
				t.Errorf("handler invoked %d times", len(rec.events))
			}
		})
	}
}

func TestResponseWrittenBack(t *testing.T) {
	t.Parallel()
	rec := &recorder{res: events.APIGatewayV2HTTPResponse{
		StatusCode:        402,
		Headers:           map[string]string{"Content-Type": "application/problem+json", "Idempotent-Replayed": "true"},
		MultiValueHeaders: map[string][]string{"Vary": {"Accept", "Authorization"}},
		Cookies:           []string{"s=1; Path=/"},
		Body:              base64.StdEncoding.EncodeToString([]byte(`{"status":402}`)),
		IsBase64Encoded:   true,
	}}
	srv := serve(t, rec.handle)
	res, body := do(t, http.MethodPost, srv.URL+"/charges", "{}", http.Header{"Authorization": {"Bearer dev:acme"}})
	if res.StatusCode != 402 || body != `{"status":402}` {
		t.Errorf("%d %q", res.StatusCode, body)
	}
	if res.Header.Get("Content-Type") != "application/problem+json" || res.Header.Get("Idempotent-Replayed") != "true" ||
		strings.Join(res.Header.Values("Vary"), ",") != "Accept,Authorization" || res.Header.Get("Set-Cookie") != "s=1; Path=/" {
		t.Errorf("headers %v", res.Header)
	}
}

func TestFailedInvocationIs500(t *testing.T) {
	t.Parallel()
	tests := map[string]gateway.HandlerFunc{
		"error": func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{StatusCode: 200}, errors.New("boom")
		},
		"panic": func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			panic("boom")
		},
		"no status": func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{Body: "ok"}, nil
		},
		"bad base64": func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "!!", IsBase64Encoded: true}, nil
		},
		"timed out": func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			<-ctx.Done()
			return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
		},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := serve(t, h, gateway.WithTimeout(100*time.Millisecond))
			res, body := do(t, http.MethodPost, srv.URL+"/charges", "{}", http.Header{"Authorization": {"Bearer dev:acme"}})
			if res.StatusCode != 500 || body != `{"message":"Internal Server Error"}` {
				t.Errorf("%d %s", res.StatusCode, body)
			}
		})
	}
}

func TestNewRefusesBadRoutes(t *testing.T) {
	t.Parallel()
	h := (&recorder{}).handle
	for _, key := range []string{"/charges", "POST charges", "GET /charges/{id", "GET /charges/{}"} {
		if _, err := gateway.New(h, []string{key}); err == nil {
			t.Errorf("route key %q accepted", key)
		}
	}
	if _, err := gateway.New(nil, routes); err == nil {
		t.Error("nil handler accepted")
	}
	if _, err := gateway.New(h, routes, gateway.WithTimeout(0)); err == nil {
		t.Error("zero timeout accepted")
	}
}

// TestPublicRouteSkipsTheAuthorizer: a public route (a webhook) is invoked
// without a token, and its event carries no authorizer context even when
// a token is sent; the other routes still require one.
func TestPublicRouteSkipsTheAuthorizer(t *testing.T) {
	rec := &recorder{res: events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK}}
	gw, err := gateway.New(rec.handle, append([]string{"POST /webhooks/stripe"}, routes...), gateway.WithPublicRoutes("POST /webhooks/stripe"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	for _, token := range []string{"", "Bearer " + gateway.TokenPrefix + "acme"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/stripe", strings.NewReader(`{"id":"evt_1"}`))
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("public route with token %q: %d, want 200", token, resp.StatusCode)
		}
		ev, _ := rec.only(t)
		if ev.RouteKey != "POST /webhooks/stripe" || ev.RequestContext.Authorizer != nil || ev.Body != `{"id":"evt_1"}` {
			t.Fatalf("public route event = %s, authorizer %+v, body %q", ev.RouteKey, ev.RequestContext.Authorizer, ev.Body)
		}
		rec.events, rec.ctxs = nil, nil
	}
	resp, err := http.Post(srv.URL+"/charges", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(rec.events) != 0 {
		t.Fatalf("a private route without a token: %d (%d invocations), want 401 and none", resp.StatusCode, len(rec.events))
	}
}
