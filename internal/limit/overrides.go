package limit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// retryAfter is how soon a failed read of the overrides is tried again.
// Meanwhile the overrides held serve, or the defaults. A table that
// cannot be read costs each request no call of its own.
const retryAfter = 10 * time.Second

// overrides are the operators' per-tenant limits. They are read from the
// Store when the limiter is built, and again after maxAge: a change needs
// no deploy.
type overrides struct {
	store    Store
	defaults Limits
	maxAge   time.Duration
	clock    func() time.Time
	logger   *slog.Logger

	mu       sync.Mutex
	byTenant map[string]Limits
	next     time.Time // when the overrides are read again
	reading  bool      // a read is under way
}

// limits returns tenant's limits, reading the overrides first if they are
// due.
func (o *overrides) limits(ctx context.Context, tenant string) Limits {
	o.read(ctx, tableTimeout)
	return o.cached(tenant)
}

// read reads the overrides if they are due, waiting at most timeout. One
// caller reads. The others keep the last read meanwhile: a table that
// hangs holds one request, never all.
func (o *overrides) read(ctx context.Context, timeout time.Duration) {
	o.mu.Lock()
	now := o.clock()
	if o.reading || now.Before(o.next) {
		o.mu.Unlock()
		return
	}
	o.reading = true
	o.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	m, err := o.store.Overrides(rctx)
	cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reading = false
	if err != nil {
		o.next = now.Add(retryAfter)
		o.logger.WarnContext(ctx, "reading the tenants' limits failed; the last read, or the defaults, serve", "error", err.Error())
		return
	}
	o.byTenant, o.next = m, now.Add(o.maxAge)
}

// cached returns tenant's limits as last read.
func (o *overrides) cached(tenant string) Limits {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.defaults.over(o.byTenant[tenant])
}
