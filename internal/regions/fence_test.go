package regions_test

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestAFenceServesOnlyItsTenantsAndOnlyAfterTheFence: a Region serves its
// home's tenants; after a move, the old Region stops once its lease ends,
// and the new one starts only after the fence, when every lease read
// before the move has ended.
func TestAFenceServesOnlyItsTenantsAndOnlyAfterTheFence(t *testing.T) {
	ctx := t.Context()
	clock := testkit.NewClock(time.Now())
	r := newRoutes(t)
	homes := regions.Homes(map[string]string{"beta": "b"}, "a")
	fence := func(region string) *regions.Fence {
		f, err := regions.NewFence(r, region, homes, func(o *regions.FenceOptions) { o.Clock = clock.Now })
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := fence("a"), fence("b")
	serving := func(f *regions.Fence, tenant string) regions.Serving {
		t.Helper()
		sv, err := f.Serving(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return sv
	}
	if !serving(a, "acme").Here || serving(b, "acme").Here || !serving(b, "beta").Here || serving(a, "beta").Here {
		t.Fatal("each Region serves its own home's tenants alone")
	}
	route, _ := r.Route(ctx, "a")
	if _, err := r.Move(ctx, route, "b", clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	// a read the route just before the move: it keeps serving within its
	// lease, and b, which has not read the move, does not yet.
	if sv := serving(a, "acme"); !sv.Here || sv.Until.After(clock.Now().Add(regions.DefaultLease)) {
		t.Fatalf("a within its lease: %+v", sv)
	}
	clock.Advance(regions.DefaultLease)
	if sv := serving(a, "acme"); sv.Here || sv.Region != "b" {
		t.Fatalf("a after its lease: %+v, want served by b", sv)
	}
	if sv := serving(b, "acme"); sv.Here || sv.Region != "b" || sv.Since.After(clock.Now().Add(regions.FenceDelay)) {
		t.Fatalf("b before the fence: %+v, want not yet", sv)
	}
	clock.Advance(regions.FenceDelay - regions.DefaultLease)
	sv := serving(b, "acme")
	if !sv.Here || sv.Unreplicated.IsZero() {
		t.Fatalf("b after the fence: %+v, want serving, a's writes unreplicated", sv)
	}
	key, _ := idem.NewKey("acme", "create-charge", "k")
	if b.Yields(key, "a") {
		t.Fatal("b yields a's claims before a is drained")
	}
	route, _ = r.Route(ctx, "a")
	if _, err := r.Drained(ctx, route, "a"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(regions.DefaultLease)
	if sv := serving(b, "acme"); !sv.Here || !sv.Unreplicated.IsZero() || !b.Yields(key, "a") {
		t.Fatalf("b once a is drained: %+v, yields %t", sv, b.Yields(key, "a"))
	}
}

// TestAFailoverFencesWithinTheClockMargin: Since is the operator's clock
// plus FenceDelay. An operator's clock behind by up to the margin still
// starts the new Region after the old one's lease. Further behind, it
// does not: regions.md makes a synced clock the operator's precondition.
func TestAFailoverFencesWithinTheClockMargin(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		behind time.Duration
		fenced bool
	}{{0, true}, {regions.FenceDelay - regions.DefaultLease, true}, {regions.FenceDelay - regions.DefaultLease + time.Second, false}} {
		clock := testkit.NewClock(time.Now())
		r := newRoutes(t)
		homes := regions.Homes(nil, "a")
		a, err := regions.NewFence(r, "a", homes, func(o *regions.FenceOptions) { o.Clock = clock.Now })
		if err != nil {
			t.Fatal(err)
		}
		sa, err := a.Serving(ctx, "acme") // just before the move
		if err != nil || !sa.Here {
			t.Fatalf("a before the move: %+v %v", sa, err)
		}
		route, _ := r.Route(ctx, "a")
		moved, err := r.Move(ctx, route, "b", clock.Now().Add(-tc.behind), regions.FenceDelay)
		if err != nil {
			t.Fatal(err)
		}
		if fenced := !moved.Since.Before(sa.Until); fenced != tc.fenced {
			t.Errorf("operator %s behind: b from %s, a's lease until %s: fenced %t, want %t",
				tc.behind, moved.Since.Format(time.TimeOnly), sa.Until.Format(time.TimeOnly), fenced, tc.fenced)
		}
	}
}

// TestStacksThatAgreeOnHomesServeATenantOnce: a tenant's home is each
// stack's configuration. Stacks deployed with the same homes, as
// operations.md requires, never both serve a tenant.
func TestStacksThatAgreeOnHomesServeATenantOnce(t *testing.T) {
	ctx := t.Context()
	r := newRoutes(t)
	homes := regions.Homes(map[string]string{"beta": "b"}, "a")
	a, errA := regions.NewFence(r, "a", homes)
	b, errB := regions.NewFence(r, "b", homes)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	for _, tenant := range []string{"acme", "beta"} {
		sa, errA := a.Serving(ctx, tenant)
		sb, errB := b.Serving(ctx, tenant)
		if errA != nil || errB != nil || sa.Here == sb.Here {
			t.Errorf("%s: a serves %t, b %t (%v %v): want exactly one", tenant, sa.Here, sb.Here, errA, errB)
		}
	}
}
