package lambdaidem_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// putOrder is a PUT of body to the order id, on route, under key.
func putOrder(route, id, key, body string) events.APIGatewayV2HTTPRequest {
	req := httpRequest("acme", key, body)
	req.RouteKey, req.RawPath = route, "/orders/"+id
	req.RequestContext.HTTP.Method = "PUT"
	if route != "$default" {
		req.PathParameters = map[string]string{"id": id, "shop": "main"}
	}
	return req
}

// TestFingerprintCoversTheRoute: by default, one key and one body sent to
// two orders are two requests, the second refused rather than answered
// with the first order; a retry of either is still a replay.
func TestFingerprintCoversTheRoute(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs atomic.Int32
	next := func(_ context.Context, req events.APIGatewayV2HTTPRequest, _ *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 200, Body: []byte(`{"order":"` + req.RawPath + `"}`)}), nil
	}
	call := func(h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		t.Helper()
		resp, err := h(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	byDefault := lambdaidem.HTTP(s, "put-order", next)
	for _, route := range []string{"PUT /orders/{id}", "ANY /shops/{shop}/orders/{id}", "$default"} {
		key := idemtest.UniqueKey(t, "x").ClientKey()
		runs.Store(0)
		first := call(byDefault, putOrder(route, "1", key, `{"qty":1,"item":"book"}`))
		again := call(byDefault, putOrder(route, "1", key, `{"item":"book", "qty":1}`))
		if first.StatusCode != 200 || again.Headers[lambdaidem.HeaderReplayed] != "true" || again.Body != first.Body {
			t.Fatalf("%s: a retry of order 1: %d, then %d %v %s; want a replay", route, first.StatusCode, again.StatusCode, again.Headers, again.Body)
		}
		wantProblem(t, call(byDefault, putOrder(route, "2", key, `{"qty":1,"item":"book"}`)), 422, "idempotency-key-reused")
		if runs.Load() != 1 {
			t.Fatalf("%s: %d runs, want 1", route, runs.Load())
		}
	}

	key := idemtest.UniqueKey(t, "x").ClientKey()
	put := putOrder("ANY /orders/{id}", "1", key, `{}`)
	call(byDefault, put)
	del := put
	del.RequestContext.HTTP.Method = "DELETE"
	wantProblem(t, call(byDefault, del), 422, "idempotency-key-reused")

	byFields := lambdaidem.HTTP(s, "put-order-fields", next, func(o *lambdaidem.Options) { o.Fingerprint = lambdaidem.FingerprintFields("item") })
	call(byFields, putOrder("PUT /orders/{id}", "1", key, `{"item":"book","sent_at":1}`))
	if again := call(byFields, putOrder("PUT /orders/{id}", "1", key, `{"item":"book","sent_at":2}`)); again.Headers[lambdaidem.HeaderReplayed] != "true" {
		t.Fatalf("FingerprintFields, a resend: %d %v; want a replay", again.StatusCode, again.Headers)
	}
	wantProblem(t, call(byFields, putOrder("PUT /orders/{id}", "2", key, `{"item":"book"}`)), 422, "idempotency-key-reused")

	bodyAlone := lambdaidem.HTTP(s, "put-order-body", next, func(o *lambdaidem.Options) { o.Fingerprint = lambdaidem.FingerprintBody })
	call(bodyAlone, putOrder("PUT /orders/{id}", "1", key, `{"item":"book"}`))
	if other := call(bodyAlone, putOrder("PUT /orders/{id}", "2", key, `{"item":"book"}`)); other.Headers[lambdaidem.HeaderReplayed] != "true" || other.Body != `{"order":"/orders/1"}` {
		t.Fatalf("FingerprintBody: %d %v %s; want the body alone to count, order 1 replayed", other.StatusCode, other.Headers, other.Body)
	}
}

// TestFingerprintCoversTheResourceREST: a REST API's resource and path
// parameters count as an HTTP API's route does.
func TestFingerprintCoversTheResourceREST(t *testing.T) {
	t.Parallel()
	handler := lambdaidem.REST(memstore.New(), "put-order", func(context.Context, events.APIGatewayProxyRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 200}), nil
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	order := func(id string) events.APIGatewayProxyRequest {
		req := events.APIGatewayProxyRequest{
			HTTPMethod: "PUT", Resource: "/orders/{id}", Path: "/orders/" + id, PathParameters: map[string]string{"id": id},
			Body: `{}`, Headers: map[string]string{"Idempotency-Key": key},
		}
		req.RequestContext.Authorizer = map[string]any{"principalId": "acme"}
		return req
	}
	for i, want := range []int{200, 200, 422} {
		resp, err := handler(t.Context(), order([]string{"1", "1", "2"}[i]))
		if err != nil || resp.StatusCode != want {
			t.Fatalf("call %d: %d %s, %v; want %d", i+1, resp.StatusCode, resp.Body, err, want)
		}
	}
}

// storedIntent is the Intent lambdaidem stores for an API request, as a
// resolver decodes it.
type storedIntent struct {
	Route   string            `json:"route"`
	Method  string            `json:"method"`
	Path    map[string]string `json:"path"`
	RawPath string            `json:"rawPath"`
	Body    json.RawMessage   `json:"body"`
	RawBody []byte            `json:"rawBody"`
}

// TestAPIStoresTheRequestAsIntent: a command whose attempt died is settled
// by a resolver that reads the request from the record. It gets the
// route, the method, the path and the canonical body, and never a
// credential from a header or the query string.
func TestAPIStoresTheRequestAsIntent(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	crash := func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, errors.New("crashed") // the record stays IN_FLIGHT
	}
	crashREST := func(context.Context, events.APIGatewayProxyRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, errors.New("crashed")
	}
	key := idemtest.UniqueKey(t, "x").ClientKey()
	req := putOrder("PUT /orders/{id}", "o-1", key, `{"qty": 2, "item": "book"}`)
	req.Headers["authorization"], req.Headers["cookie"] = "Bearer secret-token", "session=secret-cookie"
	req.QueryStringParameters = map[string]string{"api_key": "secret-query"}
	if _, err := lambdaidem.HTTP(s, "put-order", crash)(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	rest := events.APIGatewayProxyRequest{
		HTTPMethod: "PUT", Resource: "/orders/{id}", Path: "/orders/o-1", PathParameters: map[string]string{"id": "o-1"},
		Headers:                         map[string]string{"Idempotency-Key": key, "Authorization": "Bearer secret-token"},
		MultiValueQueryStringParameters: map[string][]string{"api_key": {"secret-query"}},
		Body:                            base64.StdEncoding.EncodeToString([]byte(`{"qty": 2, "item": "book"}`)), IsBase64Encoded: true,
	}
	rest.RequestContext.Authorizer = map[string]any{"principalId": "acme"}
	if _, err := lambdaidem.REST(s, "put-order-rest", crashREST)(t.Context(), rest); err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]storedIntent{
		"put-order":      {Route: "PUT /orders/{id}", Method: "PUT", Path: map[string]string{"id": "o-1", "shop": "main"}, RawPath: "/orders/o-1"},
		"put-order-rest": {Route: "PUT /orders/{id}", Method: "PUT", Path: map[string]string{"id": "o-1"}, RawPath: "/orders/o-1"},
	} {
		k, _ := idem.NewKey("acme", op, key)
		rec, err := s.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		var got storedIntent
		if err := json.Unmarshal(rec.Intent, &got); err != nil {
			t.Fatalf("%s: intent %q: %v", op, rec.Intent, err)
		}
		if got.Route != want.Route || got.Method != want.Method || !maps.Equal(got.Path, want.Path) || got.RawPath != want.RawPath ||
			string(got.Body) != `{"item":"book","qty":2}` || got.RawBody != nil {
			t.Fatalf("%s: intent %s, want %+v with the canonical body", op, rec.Intent, want)
		}
		if bytes.Contains(rec.Intent, []byte("secret")) {
			t.Fatalf("%s: intent %s holds a credential", op, rec.Intent)
		}
	}
}

// TestAPIIntentOfABodyThatIsNotJSON: under a fingerprint of the caller's
// that takes any body, the body is stored as it was sent.
func TestAPIIntentOfABodyThatIsNotJSON(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	h := lambdaidem.HTTP(s, "upload", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, nil
	}, func(o *lambdaidem.Options) {
		o.Fingerprint = func(r lambdaidem.Request) (idem.Fingerprint, error) { return idem.FingerprintOf(r.Body), nil }
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	if _, err := h(t.Context(), httpRequest("acme", key, "name=book&qty=2")); err != nil {
		t.Fatal(err)
	}
	k, _ := idem.NewKey("acme", "upload", key)
	rec, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	var got storedIntent
	if err := json.Unmarshal(rec.Intent, &got); err != nil || string(got.RawBody) != "name=book&qty=2" || got.Body != nil {
		t.Fatalf("intent %s (%v): want the raw body", rec.Intent, err)
	}
}

// TestAPIRefusesARequestTooLargeToStore: a request whose intent does not
// fit a record is answered 413, and nothing is stored or run.
func TestAPIRefusesARequestTooLargeToStore(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs atomic.Int32
	h := lambdaidem.HTTP(s, "put-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 200}), nil
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	resp, err := h(t.Context(), httpRequest("acme", key, `{"note":"`+strings.Repeat("a", 200<<10)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, resp, 413, "request-too-large")
	k, _ := idem.NewKey("acme", "put-order", key)
	if _, err := s.Get(t.Context(), k); !errors.Is(err, idem.ErrNotFound) || runs.Load() != 0 {
		t.Fatalf("after a 413: record %v, %d runs; want none", err, runs.Load())
	}
}

// TestAPIIntentOption: a body the record must not keep is left out by an
// Intent of the caller's; its error is answered 400 with nothing stored.
func TestAPIIntentOption(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	fail := false
	h := lambdaidem.HTTP(s, "pay", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, nil
	}, func(o *lambdaidem.Options) {
		o.Intent = func(lambdaidem.Request) ([]byte, error) {
			if fail {
				return nil, errors.New("no intent")
			}
			return nil, nil
		}
	})
	for _, fail = range []bool{false, true} {
		key := idemtest.UniqueKey(t, "x").ClientKey()
		resp, err := h(t.Context(), httpRequest("acme", key, `{"card":"4242424242424242"}`))
		if err != nil {
			t.Fatal(err)
		}
		k, _ := idem.NewKey("acme", "pay", key)
		rec, err := s.Get(t.Context(), k)
		switch {
		case fail:
			wantProblem(t, resp, 400, "invalid-request")
			if !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("an Intent that failed: record %v, want none", err)
			}
		case err != nil || len(rec.Intent) != 0:
			t.Fatalf("an Intent of nil: record %v %v, want one without an intent", rec, err)
		}
	}
}

// TestQueryStringIsFingerprinted: on a $default route (a
// Lambda function URL, or an HTTP API's catch-all), a request's query
// string is part of what it acts on. One key sent with another query is
// another request, but gets the first one's answer replayed.
func TestQueryStringIsFingerprinted(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	handler := lambdaidem.HTTP(memstore.New(), "refund", func(_ context.Context, req events.APIGatewayV2HTTPRequest, _ *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"refunded":"` + req.QueryStringParameters["amount"] + `"}`)}), nil
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	req := func(amount string) events.APIGatewayV2HTTPRequest {
		r := httpRequest("acme", key, `{"order":"o-1"}`)
		r.RouteKey, r.RawPath, r.RawQueryString = "$default", "/refunds", "amount="+amount
		r.QueryStringParameters = map[string]string{"amount": amount}
		r.RequestContext.HTTP.Method = "POST"
		return r
	}
	first, _ := handler(t.Context(), req("1"))
	other, _ := handler(t.Context(), req("1000"))
	if first.StatusCode != 201 {
		t.Fatalf("first: %d %s", first.StatusCode, first.Body)
	}
	if other.Headers[lambdaidem.HeaderReplayed] == "true" {
		t.Fatalf("a refund of 1000 under a key used for a refund of 1: %d %s replayed (%d runs); want 422 idempotency-key-reused", other.StatusCode, other.Body, runs.Load())
	}
}

// TestLambdaContextIntegerTenants: an HTTP API event is decoded with
// encoding/json, so an integer tenant arrives as a float64. From 2^53 on,
// two ids can round to one float64 (2^53+1 reads as 2^53, and snowflake
// ids of ~2^60 likewise): as one tenant they would share answers, so
// neither is a tenant. Below 2^53 an integer is exact, and a tenant.
func TestLambdaContextIntegerTenants(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	handler := lambdaidem.HTTP(memstore.New(), "create-order", func(_ context.Context, req events.APIGatewayV2HTTPRequest, _ *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"for":"` + req.RequestContext.RequestID + `"}`)}), nil
	}, func(o *lambdaidem.Options) { o.Tenant = lambdaidem.TenantFromLambdaContext("tenantId") })
	event := func(tenant, requestID string) events.APIGatewayV2HTTPRequest {
		raw := `{"routeKey":"POST /orders","rawPath":"/orders","headers":{"idempotency-key":"order-1"},"body":"{}",` +
			`"requestContext":{"requestId":"` + requestID + `","http":{"method":"POST"},"authorizer":{"lambda":{"tenantId":` + tenant + `}}}}`
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal([]byte(raw), &req); err != nil {
			t.Fatal(err)
		}
		return req
	}
	for _, pair := range [][2]string{{"1152921504606846977", "1152921504606846976"}, {"9007199254740992", "9007199254740993"}} {
		a, _ := handler(t.Context(), event(pair[0], "tenant-a"))
		b, _ := handler(t.Context(), event(pair[1], "tenant-b"))
		if a.StatusCode != 401 || b.StatusCode != 401 || b.Headers[lambdaidem.HeaderReplayed] == "true" || runs.Load() != 0 {
			t.Fatalf("tenants %s and %s: %d %s, %d %s (%d runs); want both refused 401, as one tenant they would share answers",
				pair[0], pair[1], a.StatusCode, a.Body, b.StatusCode, b.Body, runs.Load())
		}
	}
	if c, _ := handler(t.Context(), event("9007199254740991", "tenant-c")); c.StatusCode != 201 {
		t.Fatalf("tenant 2^53-1: %d %s, want 201", c.StatusCode, c.Body)
	}
}

// TestFederatedUsersAreTenantsOfTheirOwn: TenantFromIAMPrincipal cuts
// the unique ID at ':' so that a role's sessions are one tenant. But a
// federated user's ID (GetFederationToken) is "account:name": every
// federated user of the account, whatever its name, and the account's root
// (whose ID is the account), become one tenant, and get each other's
// answers under the same client key.
func TestFederatedUsersAreTenantsOfTheirOwn(t *testing.T) {
	t.Parallel()
	handler := lambdaidem.HTTP(memstore.New(), "create-order", func(_ context.Context, req events.APIGatewayV2HTTPRequest, _ *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"for":"` + req.RequestContext.Authorizer.IAM.UserARN + `"}`)}), nil
	}, func(o *lambdaidem.Options) { o.Tenant = lambdaidem.TenantFromIAMPrincipal() })
	caller := func(name string) events.APIGatewayV2HTTPRequest {
		req := httpRequest("", "order-1", `{}`)
		req.RequestContext.HTTP.Method = "POST"
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			AccountID: "123456789012", UserID: "123456789012:" + name, UserARN: "arn:aws:sts::123456789012:federated-user/" + name,
		}}
		return req
	}
	alice, _ := handler(t.Context(), caller("alice"))
	bob, _ := handler(t.Context(), caller("bob"))
	if alice.StatusCode != 201 || bob.Headers[lambdaidem.HeaderReplayed] == "true" {
		t.Fatalf("federated user bob got %d %s (replayed %q): alice's answer", bob.StatusCode, bob.Body, bob.Headers[lambdaidem.HeaderReplayed])
	}
}

// TestReencodedQueryIsTheSameRequest: a retry whose query string a client
// or proxy re-encoded (parameters in another order, a space as %20 rather
// than +, ~ as %7E) carries the same decoded parameters, what the handler
// reads. It gets its original answer, not 422: the fingerprint takes the
// decoded parameters, as it takes the canonical body.
func TestReencodedQueryIsTheSameRequest(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	handler := lambdaidem.HTTP(memstore.New(), "refund", func(_ context.Context, req events.APIGatewayV2HTTPRequest, _ *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"refunded":"` + req.QueryStringParameters["amount"] + `"}`)}), nil
	})
	for _, tc := range []struct{ name, first, retry string }{
		{"order", "amount=1&note=a+b", "note=a+b&amount=1"},
		{"space", "amount=1&note=a+b", "amount=1&note=a%20b"},
		{"tilde", "amount=1&note=x~y", "amount=1&note=x%7Ey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := idemtest.UniqueKey(t, "x").ClientKey()
			req := func(raw string) events.APIGatewayV2HTTPRequest {
				r := httpRequest("acme", key, `{"order":"o-1"}`)
				r.RawQueryString = raw
				r.QueryStringParameters = map[string]string{"amount": "1", "note": map[string]string{"space": "a b", "order": "a b", "tilde": "x~y"}[tc.name]}
				return r
			}
			first, _ := handler(t.Context(), req(tc.first))
			if first.StatusCode != 201 {
				t.Fatalf("first: %d %s", first.StatusCode, first.Body)
			}
			retry, _ := handler(t.Context(), req(tc.retry))
			if retry.StatusCode != 201 || retry.Headers[lambdaidem.HeaderReplayed] != "true" {
				t.Fatalf("retry of the same request, query %q re-encoded as %q: %d %s; want the original 201 replayed", tc.first, tc.retry, retry.StatusCode, retry.Body)
			}
		})
	}
}
