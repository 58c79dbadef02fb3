package gateway_test

import (
	"net/http"
	"testing"

	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestChargeAPIThroughTheGateway serves the real charge handler, on the
// emulator, behind the gateway, and drives it over HTTP as a client would.
func TestChargeAPIThroughTheGateway(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	cfg := d.Charge()
	cfg.TenantClaim = "org_id" // the gateway puts the tenant in the configured claim
	api, stop, err := d.Serve(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	create := http.Header{
		"Authorization":   {"Bearer dev:acme"},
		"Content-Type":    {"application/json"},
		"Idempotency-Key": {testkit.UniqueName("order")},
	}
	const body = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	first, firstBody := do(t, http.MethodPost, api+"/charges", body, create)
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	replay, replayBody := do(t, http.MethodPost, api+"/charges", body, create)
	if replay.StatusCode != http.StatusCreated || replay.Header.Get("Idempotent-Replayed") != "true" || replayBody != firstBody {
		t.Fatalf("replay: %d %v %s", replay.StatusCode, replay.Header, replayBody)
	}
	if mismatch, b := do(t, http.MethodPost, api+"/charges", `{"amount":1600,"currency":"EUR","source":"tok_visa"}`, create); mismatch.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("mismatch: %d %s", mismatch.StatusCode, b)
	}

	location := first.Header.Get("Location")
	if got, b := do(t, http.MethodGet, api+location, "", http.Header{"Authorization": {"Bearer dev:acme"}}); got.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %d %s", location, got.StatusCode, b)
	}
	if other, b := do(t, http.MethodGet, api+location, "", http.Header{"Authorization": {"Bearer dev:globex"}}); other.StatusCode != http.StatusNotFound {
		t.Errorf("GET %s as another tenant: %d %s", location, other.StatusCode, b)
	}
	if anon, b := do(t, http.MethodGet, api+location, "", nil); anon.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d %s", location, anon.StatusCode, b)
	}
}
