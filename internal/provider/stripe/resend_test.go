package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

// resendServer: Stripe executes the request for key `dropped` sent on a
// kept-alive connection, and the connection drops before the answer. Go's
// transport re-sends it on a fresh connection (it carries an
// Idempotency-Key); that re-send is answered by Stripe's edge with
// status/body (rate limited, or an auth refusal), never reaching the
// idempotency layer.
func resendServer(t *testing.T, h http.Handler, dropped string, status int, body string) (*httptest.Server, *atomic.Int32) {
	var seen atomic.Int32
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Idempotency-Key") != dropped {
			h.ServeHTTP(w, r)
			return
		}
		switch seen.Add(1) {
		case 1:
			h.ServeHTTP(httptest.NewRecorder(), r) // executed, answer lost
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			_ = conn.Close()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &seen
}

// TestResentChargeAnsweredByTheEdgeIsAmbiguous: Stripe executed a charge
// whose kept-alive connection dropped before the answer; Go re-sent it, and
// the re-send was turned away at the edge (a rate limit, an API key
// refusal) before Stripe's deduplication could answer for the first. That
// answer says nothing of the first send: the outcome is unknown.
func TestResentChargeAnsweredByTheEdgeIsAmbiguous(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"429", http.StatusTooManyRequests, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests hit the API too quickly."}}`},
		{"401", http.StatusUnauthorized, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			dropped := "co_dropped_" + tc.name
			srv, seen := resendServer(t, b.sim, dropped, tc.status, tc.body)
			a := newAdapter(t, srv.URL, func(o *stripe.Options) { o.HTTPClient, o.Clock = srv.Client(), b.clock.Now })
			if _, err := a.Charge(context.Background(), charge("co_first_"+tc.name, stripesim.PMVisa)); err != nil {
				t.Fatal(err)
			}
			_, err := a.Charge(context.Background(), charge(dropped, stripesim.PMVisa))
			t.Logf("sends seen: %d, charged: %d, err: %v", seen.Load(), b.sim.Charged(dropped), err)
			if b.sim.Charged(dropped) != 1 {
				t.Fatalf("setup: charged %d", b.sim.Charged(dropped))
			}
			if errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrRejected) {
				t.Fatalf("charge executed by Stripe, yet the adapter says it did not act: %v (want ErrAmbiguous)", err)
			}
		})
	}
}
