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
	// Ahead of the emulator's clock, which a move never starts before.
	clock := testkit.NewClock(time.Now().Add(time.Minute))
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

// TestAFailoverFencesWhateverTheOperatorsClock: Since is the operator's
// clock plus FenceDelay, but never before the table's clock at the read.
// An operator's clock 30 s slow must not start b while a's lease holds.
func TestAFailoverFencesWhateverTheOperatorsClock(t *testing.T) {
	ctx := t.Context()
	clock := testkit.NewClock(time.Now())
	r := newRoutes(t)
	homes := regions.Homes(nil, "a")
	fence := func(region string) *regions.Fence {
		f, err := regions.NewFence(r, region, homes, func(o *regions.FenceOptions) { o.Clock = clock.Now })
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := fence("a"), fence("b")
	if sv, err := a.Serving(ctx, "acme"); err != nil || !sv.Here {
		t.Fatalf("a before the move: %+v %v", sv, err)
	}
	operator := clock.Now().Add(-30 * time.Second) // the laptop's clock
	route, err := r.Route(ctx, "a")
	if err != nil || route.Read.IsZero() {
		t.Fatalf("the route read %+v (%v): want the table's clock", route, err)
	}
	if _, err := r.Move(ctx, route, "b", operator, regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	sa, errA := a.Serving(ctx, "acme")
	sb, errB := b.Serving(ctx, "acme")
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if sb.Here || sb.Since.Before(sa.Until) {
		t.Errorf("a (lease until %s) and b (since %s) both serve acme at %s", sa.Until.Format(time.TimeOnly), sb.Since.Format(time.TimeOnly), clock.Now().Format(time.TimeOnly))
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
