package lambdaidem_test

import (
	"context"
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
