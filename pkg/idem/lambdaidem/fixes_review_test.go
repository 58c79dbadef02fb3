package lambdaidem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// throttledAfterInFlight is a Backend whose Begin, once it has told a
// caller that another attempt holds the key (ErrInFlight), is throttled
// (ErrUnavailable) on the caller's next claim: DynamoDB under load.
type throttledAfterInFlight struct {
	idem.Backend
	sawInFlight atomic.Bool
}

func (s *throttledAfterInFlight) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if s.sawInFlight.Load() {
		return idem.Begun{}, fmt.Errorf("mystore: begin: throttled: %w", idem.ErrUnavailable)
	}
	b, err := s.Backend.Begin(ctx, key, fp, intent)
	if errors.Is(err, idem.ErrInFlight) {
		s.sawInFlight.Store(true)
	}
	return b, err
}

// TestWaitThenThrottledIsInProgress: a retry that, waiting
// (Options.Wait), found the key held by the first attempt, whose outcome
// is unknown, and then met a throttled claim, is told "nothing was done".
// But Do saw proof of the opposite: an attempt with this key ran and may
// have carried the request out. The answer must not be
// service-unavailable, "this request was not carried out".
func TestWaitThenThrottledIsInProgress(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	s := &throttledAfterInFlight{Backend: inner}
	var runs atomic.Int32
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Unknown(idem.Response{}), errors.New("provider timed out: the charge may have gone through")
	}, func(o *lambdaidem.Options) { o.Wait = 2 * time.Second })
	key := idemtest.UniqueKey(t, "x").ClientKey()
	first, err := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if err != nil || first.StatusCode != 503 || !strings.Contains(first.Body, "outcome-pending") {
		t.Fatalf("first: %d %s, %v; want 503 outcome-pending", first.StatusCode, first.Body, err)
	}
	retry, err := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if err != nil || runs.Load() != 1 {
		t.Fatalf("retry: %v, %d runs", err, runs.Load())
	}
	if strings.Contains(retry.Body, "service-unavailable") || strings.Contains(strings.ToLower(retry.Body), "nothing was done") {
		t.Fatalf("retry of a request whose first attempt may have charged: %d %s\nwant 409 or outcome-pending, never \"nothing was done\"", retry.StatusCode, retry.Body)
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

// TestPassedExpiryIsLeftOut: a key whose first attempt left
// its outcome unknown stays IN_FLIGHT, and deduplicates, until a
// reconciler settles it (recovery.md: "an hour or two days later too").
// v1 now sends Idempotency-Expires on the 409 from the InFlightError's
// RecordExpiresAt, the earliest retention could end had the command been
// settled when its lease ended. A day later that is a date in the past,
// on an answer that proves the key still deduplicates.
func TestPassedExpiryIsLeftOut(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Unknown(idem.Response{}), errors.New("provider timed out")
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	if first, _ := handler(t.Context(), httpRequest("acme", key, `{}`)); first.StatusCode != 503 {
		t.Fatalf("first: %d %s", first.StatusCode, first.Body)
	}
	clock.Advance(25 * time.Hour) // the reconciler has not run yet
	retry, _ := handler(t.Context(), httpRequest("acme", key, `{}`))
	if retry.StatusCode != 409 {
		t.Fatalf("retry: %d %s; want 409", retry.StatusCode, retry.Body)
	}
	if h, ok := retry.Headers[lambdaidem.HeaderIdempotencyExpires]; ok {
		at, err := time.Parse(http.TimeFormat, h)
		if err != nil || !at.After(clock.Now()) {
			t.Fatalf("409 with Idempotency-Expires %q at %s: the key still deduplicates, but the header says it stopped", h, clock.Now().Format(http.TimeFormat))
		}
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
