package stripe_test

import (
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider/providertest"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

const testKey = "sk_test_chargeonce"

// backend is the adapter on its own stripesim.
type backend struct {
	sim     *stripesim.Simulator
	adapter *stripe.Adapter
	clock   *testkit.Clock
	url     string
	logs    *testkit.LogBuffer
}

// newBackend starts a stripesim whose search lags by stripe.SearchLag and
// an adapter that talks to it; both log to one buffer.
func newBackend(t *testing.T, optFns ...func(*stripesim.Options)) *backend {
	t.Helper()
	b := &backend{clock: testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), logs: &testkit.LogBuffer{}}
	logger := slog.New(slog.NewJSONHandler(b.logs, nil))
	b.sim = stripesim.New(append([]func(*stripesim.Options){func(o *stripesim.Options) {
		o.SecretKey, o.Clock, o.SearchLag, o.Logger = testKey, b.clock.Now, stripe.SearchLag, logger
	}}, optFns...)...)
	srv := httptest.NewServer(b.sim)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	b.adapter = newAdapter(t, srv.URL, func(o *stripe.Options) {
		// Lost answers cost a timeout each.
		o.Logger, o.Clock, o.Timeout = logger, b.clock.Now, time.Second
	})
	return b
}

func newAdapter(t *testing.T, url string, optFns ...func(*stripe.Options)) *stripe.Adapter {
	t.Helper()
	a, err := stripe.New(testKey, append([]func(*stripe.Options){func(o *stripe.Options) { o.BaseURL = url }}, optFns...)...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestContract runs the provider contract suite against the adapter on
// stripesim.
func TestContract(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Subject {
		b := newBackend(t)
		return providertest.Subject{
			Provider:    b.adapter,
			Unreachable: newAdapter(t, "http://"+providertest.ClosedAddr(t)),
			Sources: providertest.Sources{
				Charge:      stripesim.PMVisa,
				Decline:     stripesim.PMDeclined,
				Unavailable: stripesim.PMRateLimited,
				LostAnswer:  stripesim.PMTimeout,
				Late:        stripesim.PMLate,
				Unknown:     "pm_unknown_5f0c9d2e",
			},
			Charged:        b.sim.Charged,
			Refunded:       b.sim.Refunded,
			RefundedAmount: b.sim.RefundedAmount,
			Payment: func(charge string) providertest.Payment {
				e, _ := b.sim.Intent(charge)
				return providertest.Payment{Authorized: e.Authorized, Captured: e.Captured, Captures: e.Captures, Canceled: e.Canceled > 0}
			},
			// Stripe cancels an authorization it has held seven days.
			Expire: func(string) { b.clock.Advance(stripesim.AuthorizationWindow) },
			Settle: func() {
				b.sim.Land()
				b.clock.Advance(stripe.SettleWindow)
			},
			Logs: b.logs.String,
		}
	})
}
