package charge_test

import (
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestAWebhookIsSettledInTheServingRegion: r1 serves acme, no failover
// ever. Stripe tells r1 an authorization of acme's was canceled. The event
// is r1's to settle: its dedup key's tenant is the provider, "stripe",
// whose route the fence never read.
func TestAWebhookIsSettledInTheServingRegion(t *testing.T) {
	t.Parallel()
	tr := newTwoRegions(t)
	id := tr.r1.authorized(t, "acme", 1000)
	row := tr.r1.row(t, "acme", id)
	key, err := idem.NewKey("acme", charge.ChargeOperation, string(row.IdempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	svc := tr.r1.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.Regions, w.Deps.Clock = tr.regions("r1"), tr.clock.Now
	})
	n := charge.Notification{
		Provider: "stripe", EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""),
		Command: key, Reference: charge.ProviderReference(key, row.CreatedAt), Row: id,
		Result: provider.Result{Status: provider.StatusCanceled},
	}
	res, err := svc.Notify(t.Context(), n)
	if err != nil || res.Outcome != charge.OutcomeResolvedCanceled {
		t.Fatalf("r1, serving acme, settles its event: %+v, %v; want %q", res, err, charge.OutcomeResolvedCanceled)
	}
}
