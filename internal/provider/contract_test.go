package provider_test

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/providertest"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestContract runs the provider contract suite against the Client on the
// simulator.
func TestContract(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Subject {
		logs := &testkit.LogBuffer{}
		sim := providersim.New(providersim.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		return providertest.Subject{
			Provider:    provider.NewClient(srv.URL, "", provider.WithHTTPClient(srv.Client())),
			Unreachable: provider.NewClient("http://"+providertest.ClosedAddr(t), ""),
			Sources: providertest.Sources{
				Charge:      providersim.SourceVisa,
				Decline:     providersim.SourceDecline,
				Unavailable: providersim.SourceUnavailable,
				LostAnswer:  providersim.SourceTimeoutOnce,
				Late:        providersim.SourceLateOnce,
				Unknown:     "tok_unknown_5f0c9d2e",
			},
			Charged: func(reference string) int {
				if e := sim.Ledger().References[reference]; e.Status == provider.StatusCharged {
					return e.Charges
				}
				return 0
			},
			Refunded: func(reference string) int { return sim.Ledger().Refunds[reference].Refunds },
			RefundedAmount: func(charge string) int64 {
				var sum int64
				for _, r := range sim.Ledger().Refunds {
					if r.ChargeID == charge {
						sum += r.Amount
					}
				}
				return sum
			},
			Payment: func(charge string) providertest.Payment {
				for _, e := range sim.Ledger().References {
					if e.ID == charge {
						return providertest.Payment{Authorized: e.Authorized, Captured: e.Captured, Captures: e.Captures, Canceled: e.Canceled}
					}
				}
				return providertest.Payment{}
			},
			Expire: func(charge string) { sim.Expire(charge) },
			Down:   sim.SetDown,
			// The simulator's lookup is authoritative once late charges land.
			Settle: func() { sim.Land() },
			Logs:   logs.String,
		}
	})
}
