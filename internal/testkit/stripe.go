package testkit

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

// StripeSecret is the secret API key of the Stripe simulators Stripe
// serves.
const StripeSecret = "sk_test_chargeonce"

// Stripe serves a stateful Stripe simulator (stripesim) on clock, for the
// test's lifetime. Its search lags by stripe.SearchLag, as Stripe's may. It
// returns the simulator and a Wiring option. The option points the
// deployment's functions at it with PROVIDER=stripe. Its key is in a secret
// of the test's. The option also sets their clock to clock.
func Stripe(t testing.TB, clock func() time.Time, optFns ...func(*stripesim.Options)) (*stripesim.Simulator, func(*Wiring)) {
	t.Helper()
	sim := stripesim.New(append([]func(*stripesim.Options){func(o *stripesim.Options) {
		o.SecretKey, o.Clock, o.SearchLag = StripeSecret, clock, stripe.SearchLag
	}}, optFns...)...)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	key := Secret(t, StripeSecret)
	return sim, func(w *Wiring) {
		w.Charge.Provider, w.Charge.ProviderURL, w.Charge.ProviderSecretName = app.ProviderStripe, srv.URL, key
		w.Intake.Provider, w.Intake.ProviderURL, w.Intake.ProviderSecretName = app.ProviderStripe, srv.URL, key
		w.Reconcile.Provider, w.Reconcile.ProviderURL, w.Reconcile.ProviderSecretName = app.ProviderStripe, srv.URL, key
		w.Deps.Clock = clock
	}
}
