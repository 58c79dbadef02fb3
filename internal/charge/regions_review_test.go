package charge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/regions"
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

// TestAnEventAcknowledgedByTheOtherRegionIsNotLostInAFailover: Stripe
// sends every event to both Regions' endpoints. r1 serves acme, and is
// failing: its delivery fails, and Stripe will deliver it again there.
// r2 does not serve acme yet, so it acknowledges its delivery, and Stripe
// never sends it there again. Then acme fails over to r2, and r1 returns
// drained. Stripe's redelivery to r1 is acknowledged too: r1 no longer
// serves acme. No Region ever settles the event.
func TestAnEventAcknowledgedByTheOtherRegionIsNotLostInAFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tr := newTwoRegions(t)
	id := tr.r1.authorized(t, "acme", 1000)
	row := tr.r1.row(t, "acme", id)
	key, err := idem.NewKey("acme", charge.ChargeOperation, string(row.IdempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	notifier := func(region string) *charge.Service {
		return tr.r1.d.ReconcileService(t, func(w *testkit.Wiring) {
			w.Reconcile.Regions, w.Deps.Clock = tr.regions(region), tr.clock.Now
		})
	}
	r1, r2 := notifier("r1"), notifier("r2")
	n := charge.Notification{
		Provider: "stripe", EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""),
		Command: key, Reference: charge.ProviderReference(key, row.CreatedAt), Row: id,
		Result: provider.Result{Status: provider.StatusCanceled},
	}
	acked := func(res charge.Result) bool { return res.Outcome == charge.OutcomeNothingToDo }
	// r1's delivery fails (r1 is down). r2's:
	res, err := r2.Notify(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	first := acked(res)
	route, err := tr.routes.Route(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.routes.Move(ctx, route, "r2", tr.clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	tr.clock.Advance(regions.FenceDelay + time.Second)
	route, _ = tr.routes.Route(ctx, "r1")
	if _, err := tr.routes.Drained(ctx, route, "r1"); err != nil {
		t.Fatal(err)
	}
	tr.clock.Advance(regions.DefaultLease)
	// r1 is back; Stripe redelivers there, and only there.
	res, err = r1.Notify(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.r1.row(t, "acme", id); first && acked(res) && got.Status != charge.StatusCanceled {
		t.Fatalf("both Regions acknowledged the event (r2 first, then r1 after the failover), and none settled it: the charge is %s", got.Status)
	}
}
