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

// limits returns tenant's limits as last read. If the overrides are due,
// it starts a read and does not wait for it: a slow table still refreshes
// them, and costs a request nothing.
func (o *overrides) limits(ctx context.Context, tenant string) Limits {
	if o.due() {
		go o.read(context.WithoutCancel(ctx))
	}
	return o.cached(tenant)
}

// due reports whether the overrides are due, and if so marks a read under
// way. One caller reads; the others keep the last read meanwhile.
func (o *overrides) due() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reading || o.clock().Before(o.next) {
		return false
	}
	o.reading = true
	return true
}

// read reads the overrides, waiting at most readTimeout. The caller marked
// it under way with due.
func (o *overrides) read(ctx context.Context) {
	now := o.clock()
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
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
