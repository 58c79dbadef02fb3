package regions

import (
	"context"
	"time"

	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Marks is m behind the fence. A queued mark is a write to a tenant's
// record, like any other. So it is made only for a tenant this Region
// serves, and ends with the lease.
func (f *Fence) Marks(m queue.Marker) queue.Marker { return fencedMarks{f, m} }

type fencedMarks struct {
	fence *Fence
	m     queue.Marker
}

// MarkQueued marks nothing for another Region's tenant: its own sweeper
// queues the key. An unread fence is the error, and nothing is sent.
func (fm fencedMarks) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	ctx, cancel, err := fm.fence.within(ctx, key.Tenant())
	if ctx == nil {
		return false, err
	}
	defer cancel()
	return fm.m.MarkQueued(ctx, key, until)
}

// RenewQueued leaves another Region's tenant's mark to end: its serving
// Region's message renews it there.
func (fm fencedMarks) RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error {
	ctx, cancel, err := fm.fence.within(ctx, key.Tenant())
	if ctx == nil {
		return err
	}
	defer cancel()
	return fm.m.RenewQueued(ctx, key, until, hold)
}

// UnmarkQueued leaves another Region's tenant's mark: it ends by itself.
func (fm fencedMarks) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	ctx, cancel, err := fm.fence.within(ctx, key.Tenant())
	if ctx == nil {
		return err
	}
	defer cancel()
	return fm.m.UnmarkQueued(ctx, key, until)
}

// within is ctx ending with the lease, while this Region serves tenant;
// nil otherwise, with the error that kept the fence unread.
func (f *Fence) within(ctx context.Context, tenant string) (context.Context, context.CancelFunc, error) {
	sv, err := f.Serving(ctx, tenant)
	if err != nil || !sv.Here {
		return nil, nil, err
	}
	c, cancel := context.WithDeadline(ctx, time.Now().Add(sv.Until.Sub(f.clock())))
	return c, cancel, nil
}
