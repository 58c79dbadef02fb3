package e2e

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// webhookSettles runs the charge bootstrap in Stripe mode, against
// stripesim, behind the local API Gateway (which invokes it under the
// runtime emulator), and has stripesim's signed webhook settle a charge
// whose answer Stripe's edge lost while its backend charged: the request
// answers 503 outcome-pending, the charge lands, payment_intent.succeeded
// reaches POST /webhooks/stripe, and the record is SUCCEEDED within
// seconds, before its lease would let the reconciler in. The retry
// replays the 201; Stripe charged once.
func webhookSettles(t *testing.T, rie, bootstrap string, chargeEnv map[string]string, idemTable string) {
	const secretKey, whsec = "sk_test_e2e", "whsec_test_e2e"
	var api http.Handler
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.ServeHTTP(w, r) }))
	t.Cleanup(apiSrv.Close)
	sim := stripesim.New(func(o *stripesim.Options) {
		o.SecretKey, o.WebhookURL, o.WebhookSecret = secretKey, apiSrv.URL+"/webhooks/stripe", whsec
		o.WebhookRetry = 200 * time.Millisecond
	})
	t.Cleanup(sim.WaitWebhooks)
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)

	env := awsEnv(t)
	maps.Copy(env, chargeEnv)
	maps.Copy(env, map[string]string{
		app.EnvProvider: app.ProviderStripe, app.EnvProviderURL: simSrv.URL,
		app.EnvProviderSecretName: testkit.Secret(t, secretKey), app.EnvWebhookSecretName: testkit.Secret(t, whsec),
		"AWS_LAMBDA_FUNCTION_NAME": "chargeonce-charge-stripe", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
		"AWS_LAMBDA_FUNCTION_TIMEOUT": strconv.Itoa(int(functions["charge"].Seconds())),
	})
	fn := startFunction(t, rie, "charge-stripe", bootstrap, env)
	// The emulator runs one invocation at a time (one Lambda instance);
	// the gateway's requests wait their turn, as for a concurrency of 1.
	var one sync.Mutex
	gw, err := gateway.New(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		one.Lock()
		defer one.Unlock()
		payload, err := json.Marshal(req)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		var res events.APIGatewayV2HTTPResponse
		return res, fn.call(ctx, payload, &res)
	}, httpapi.Routes,
		gateway.WithPublicRoutes(httpapi.RouteWebhook), gateway.WithTenantClaim(testkit.TenantClaim), gateway.WithTimeout(functions["charge"]))
	if err != nil {
		t.Fatal(err)
	}
	api = gw

	tenant, key := testkit.UniqueName("acme"), "order-webhook"
	post := func() (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiSrv.URL+"/charges", strings.NewReader(`{"amount":1500,"currency":"EUR","source":"`+stripesim.PMLate+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+gateway.TokenPrefix+tenant)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}
	if status, _, body := post(); status != http.StatusServiceUnavailable || !strings.Contains(body, "outcome-pending") {
		t.Fatalf("the charge whose answer was lost: %d %s, want 503 outcome-pending", status, body)
	}

	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, idemTable)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := idem.NewKey(tenant, charge.ChargeOperation, key)
	rec, err := store.Get(t.Context(), k)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("record after the lost answer: %+v, %v; want IN_FLIGHT", rec, err)
	}
	leaseEnds := rec.LeaseExpiresAt
	landed := time.Now()
	if n := sim.Land(); n != 1 {
		t.Fatalf("landed %d charges, want 1", n)
	}
	for {
		if rec, err = store.Get(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		if rec.Status != idem.StatusInFlight || time.Since(landed) > 15*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	settle := time.Since(landed)
	t.Logf("webhook settle time under the runtime emulator: %v from the charge landing to SUCCEEDED (the lease had %v left)",
		settle.Round(time.Millisecond), leaseEnds.Sub(landed).Round(time.Millisecond))
	if rec.Status != idem.StatusSucceeded || settle > 5*time.Second || !time.Now().Before(leaseEnds) {
		t.Fatalf("record %s after %v (lease ends %v); want SUCCEEDED within seconds, before the lease ends", rec.Status, settle, leaseEnds)
	}
	status, header, body := post()
	if status != http.StatusCreated || header.Get(httpapi.HeaderReplayed) != "true" || body != string(rec.Response.Body) {
		t.Fatalf("retry: %d %v %s, want the webhook's 201 replayed", status, header, body)
	}
	var created struct {
		ProviderReference string `json:"provider_reference"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || sim.Charged(created.ProviderReference) != 1 {
		t.Fatalf("Stripe charged %s %d times, want 1 (%v)", created.ProviderReference, sim.Charged(created.ProviderReference), err)
	}
	if sim.WaitWebhooks(); sim.WebhooksDelivered() != 1 {
		t.Errorf("%d webhooks acknowledged, want 1", sim.WebhooksDelivered())
	}
}
