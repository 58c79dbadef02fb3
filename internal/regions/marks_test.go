package regions_test

import (
	"context"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// recorder is a queue.Marker that notes the keys it is asked to mark or
// unmark, and whether each call's context ends within the lease.
type recorder struct {
	calls  []string
	leased []bool
}

func (r *recorder) note(ctx context.Context, what string, key idem.Key) {
	deadline, ok := ctx.Deadline()
	r.calls = append(r.calls, what+" "+key.Tenant())
	r.leased = append(r.leased, ok && !deadline.After(time.Now().Add(regions.DefaultLease)))
}

func (r *recorder) MarkQueued(ctx context.Context, key idem.Key, _ time.Time) (bool, error) {
	r.note(ctx, "mark", key)
	return true, nil
}

func (r *recorder) RenewQueued(ctx context.Context, key idem.Key, _ time.Time, _ time.Duration) error {
	r.note(ctx, "renew", key)
	return nil
}

func (r *recorder) UnmarkQueued(ctx context.Context, key idem.Key, _ time.Time) error {
	r.note(ctx, "unmark", key)
	return nil
}

// TestAFenceMarksOnlyItsTenantsWithinTheLease: marks and unmarks pass the
// fence for a tenant this Region serves, under the lease. Another Region's
// tenant's are neither made nor removed. An unread fence marks nothing,
// and says why.
func TestAFenceMarksOnlyItsTenantsWithinTheLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	homes := regions.Homes(map[string]string{"beta": "b"}, "a")
	rec := &recorder{}
	f, err := regions.NewFence(newRoutes(t), "a", homes)
	if err != nil {
		t.Fatal(err)
	}
	marks := f.Marks(rec)
	until := time.Now().Add(time.Hour)
	for _, tenant := range []string{"acme", "beta"} {
		key, _ := idem.NewKey(tenant, "create-charge", "k")
		marked, err := marks.MarkQueued(ctx, key, until)
		if err != nil || marked != (tenant == "acme") {
			t.Errorf("MarkQueued of %s: %t %v", tenant, marked, err)
		}
		if err := marks.UnmarkQueued(ctx, key, until); err != nil {
			t.Errorf("UnmarkQueued of %s: %v", tenant, err)
		}
	}
	if got := rec.calls; len(got) != 2 || got[0] != "mark acme" || got[1] != "unmark acme" || !rec.leased[0] || !rec.leased[1] {
		t.Errorf("calls past the fence: %v, within the lease %v; want acme's mark and unmark, leased", got, rec.leased)
	}

	unread := unreadFence(t, homes)
	rec = &recorder{}
	key, _ := idem.NewKey("acme", "create-charge", "k")
	if marked, err := unread.Marks(rec).MarkQueued(ctx, key, until); marked || err == nil || len(rec.calls) != 0 {
		t.Errorf("MarkQueued behind an unread fence: %t %v, calls %v; want nothing marked, the error", marked, err, rec.calls)
	}
}

// TestAFenceRenewsOnlyItsTenantsMarksWithinTheLease: a delivery renews its
// key's mark for a tenant this Region serves, under the lease. Another
// Region's tenant's mark is left to end. An unread fence renews nothing,
// and says why.
func TestAFenceRenewsOnlyItsTenantsMarksWithinTheLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	homes := regions.Homes(map[string]string{"beta": "b"}, "a")
	rec := &recorder{}
	f, err := regions.NewFence(newRoutes(t), "a", homes)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	for _, tenant := range []string{"acme", "beta"} {
		key, _ := idem.NewKey(tenant, "create-charge", "k")
		if err := f.Marks(rec).RenewQueued(ctx, key, until, time.Hour); err != nil {
			t.Errorf("RenewQueued of %s: %v", tenant, err)
		}
	}
	if got := rec.calls; len(got) != 1 || got[0] != "renew acme" || !rec.leased[0] {
		t.Errorf("renewals past the fence: %v, within the lease %v; want acme's, leased", got, rec.leased)
	}

	unread := unreadFence(t, homes)
	rec = &recorder{}
	key, _ := idem.NewKey("acme", "create-charge", "k")
	if err := unread.Marks(rec).RenewQueued(ctx, key, until, time.Hour); err == nil || len(rec.calls) != 0 {
		t.Errorf("RenewQueued behind an unread fence: %v, calls %v; want nothing renewed, the error", err, rec.calls)
	}
}

// unreadFence is Region a's fence on a routes table that does not exist.
func unreadFence(t *testing.T, homes func(string) string) *regions.Fence {
	t.Helper()
	routes, err := regions.NewRoutes(testkit.Clients(t).DynamoDB, testkit.UniqueName("no-such-routes"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := regions.NewFence(routes, "a", homes)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
