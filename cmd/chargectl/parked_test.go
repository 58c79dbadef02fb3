package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// lostCreates loses POSTs (creates) while lose is set: the request never
// reaches Stripe, but the failure comes after it could have been sent.
type lostCreates struct{ lose bool }

func (l *lostCreates) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.lose && req.Method == http.MethodPost {
		return nil, errors.New("connection reset by peer")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestOperatorReleaseOfAParkedStripeCommand: in Stripe mode a parked
// command (older than the dedup window less its margin, nothing charged)
// is settled --released by the operator, configured as the functions are
// (PROVIDER=stripe). The released key lives no longer than Stripe
// deduplicates its reference, so the client's retry is a new command that
// charges once, not a re-claim of the old reference wedged IN_FLIGHT again.
func TestOperatorReleaseOfAParkedStripeCommand(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	ctx := context.Background()
	clock := testkit.NewClock(time.Now())
	sim, wire := testkit.Stripe(t, clock.Now)
	lossy := &lostCreates{}
	h := s.Deployment.ChargeHandler(t, wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) {
			o.HTTPClient, o.Timeout = &http.Client{Transport: lossy}, time.Second
		})
	})
	recon := s.Deployment.ReconcileService(t, wire)
	body := `{"amount":1500,"currency":"EUR","source":"` + stripesim.PMVisa + `"}`
	clientKey := testkit.UniqueName("order")
	do := func() int {
		t.Helper()
		resp, err := h.Handle(ctx, testkit.PostCharge("acme", clientKey, body))
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	lossy.lose = true
	if got := do(); got != http.StatusServiceUnavailable {
		t.Fatalf("lost create: %d, want 503 outcome-pending", got)
	}
	lossy.lose = false
	key, err := idem.NewKey("acme", charge.ChargeOperation, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	// Past the dedup window less its margin (23h), before 24h.
	clock.Advance(23*time.Hour + 30*time.Minute)
	if out, err := recon.Reconcile(ctx, key); err != nil || out != charge.OutcomeParked {
		t.Fatalf("reconcile: %s %v, want parked", out, err)
	}
	// The operator checks Stripe: no charge. Settle --released.
	var stdout, stderr bytes.Buffer
	env := adminEnv{
		getenv: func(name string) string {
			if name == app.EnvProvider {
				return app.ProviderStripe
			}
			return s.env[name]
		},
		clients: func(context.Context) (awsenv.Clients, error) { return s.clients, nil },
		s3:      func(context.Context) (*s3.Client, error) { return testkit.S3(t), nil },
		caller:  whoever,
		clock:   clock.Now,
		stdin:   strings.NewReader(""),
	}
	if code := runAdmin(ctx, []string{"settle", "--yes", "--released", "acme", clientKey}, env, &stdout, &stderr); code != exitOK {
		t.Fatalf("settle --released: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	st, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(ctx, key)
	if err == nil {
		t.Logf("after settle --released: %s, created %s, expires %s (created + %s)", rec.Status, rec.CreatedAt, rec.ExpiresAt, rec.ExpiresAt.Sub(rec.CreatedAt))
		if rec.ExpiresAt.After(rec.CreatedAt.Add(stripe.DedupWindow - stripe.DedupMargin)) {
			t.Errorf("released key expires %s after its creation, later than Stripe's dedup window less its margin (23h)", rec.ExpiresAt.Sub(rec.CreatedAt))
		}
	}
	// The client's retry: nothing was charged, and the released key is gone.
	clock.Advance(time.Minute)
	if got := do(); got != http.StatusCreated {
		rec, _ := st.Get(ctx, key)
		t.Errorf("client retry after the operator's release: %d, want 201 (a new command charging once); record now %s", got, rec.Status)
		clock.Advance(stripe.SettleWindow + time.Minute)
		out, err := recon.Reconcile(ctx, key)
		t.Errorf("reconcile after that retry: %s %v (wedged again, for an operator)", out, err)
	}
	if n := sim.Requests(); n == 0 {
		t.Fatal("no create reached Stripe")
	}
}
