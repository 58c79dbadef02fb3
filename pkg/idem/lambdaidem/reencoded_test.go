package lambdaidem_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

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

// throttledBegin is a Backend whose Begin is throttled once on is set.
type throttledBegin struct {
	idem.Backend
	on atomic.Bool
}

func (s *throttledBegin) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if s.on.Load() {
		return idem.Begun{}, fmt.Errorf("mystore: begin: throttled: %w", idem.ErrUnavailable)
	}
	return s.Backend.Begin(ctx, key, fp, intent)
}

// TestThrottledRetryTitleClaimsNothing: the CHANGELOG says
// "The throttled answer no longer says 'nothing was done'", and only the
// detail changed: the problem's title is still "Service temporarily
// unavailable; nothing was done". A retry of a request that was carried
// out (201, the order created) whose claim is throttled is told nothing
// was done.
func TestThrottledRetryTitleClaimsNothing(t *testing.T) {
	t.Parallel()
	s := &throttledBegin{Backend: memstore.New()}
	var runs atomic.Int32
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"order":"o-1"}`)}), nil
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	first, _ := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if first.StatusCode != 201 {
		t.Fatalf("first: %d %s", first.StatusCode, first.Body)
	}
	s.on.Store(true)
	retry, _ := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if strings.Contains(strings.ToLower(retry.Body), "nothing was done") {
		t.Fatalf("retry of a request that was carried out (%d runs): %d %s; says \"nothing was done\"", runs.Load(), retry.StatusCode, retry.Body)
	}
}
