package regions

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Serving is a Region's standing for one tenant, under a lease.
type Serving struct {
	// Here: this Region serves the tenant now. Otherwise Region does, or
	// will from Since when Region is this one.
	Here   bool
	Region string
	Since  time.Time
	// Until ends the lease on this answer: a request's calls end before it.
	Until time.Time
	// Unreplicated, when not zero, is when this Region began to
	// serve the tenant. A Region that served it before may hold
	// unreplicated writes. So a charge created before then may have
	// changed there.
	Unreplicated time.Time
}

// DefaultLease is how long a Region trusts a route it read. A move takes
// effect FenceDelay after it is written. By then every lease read before
// has ended. The margin covers clocks and writes on the wire.
const (
	DefaultLease = 10 * time.Second
	FenceDelay   = DefaultLease + 5*time.Second
)

// Fence knows, from the routes table, which tenants this Region serves.
// It keeps a route for half its lease. It trusts it for the whole lease
// when the table is unreadable. It is safe for concurrent use.
type Fence struct {
	routes *Routes
	region string
	homes  func(tenant string) string // configured: the routes table decides
	lease  time.Duration
	clock  func() time.Time

	mu      sync.Mutex
	read    map[string]readRoute // by home Region
	tenants map[string]string    // the routes table's homes, which never change
}

// readRoute is a route and when its read began.
type readRoute struct {
	Route
	at time.Time
}

// FenceOptions configure a Fence. Zero fields take the defaults.
type FenceOptions struct {
	// Lease is how long a route read is trusted. Default DefaultLease;
	// Routes.Move's fence must exceed it.
	Lease time.Duration
	// Clock is the service's clock. Default time.Now.
	Clock func() time.Time
}

// NewFence returns the Fence of region. homes is the stack's configured
// home of each tenant. The routes table's home wins (Routes.Home).
func NewFence(routes *Routes, region string, homes func(tenant string) string, optFns ...func(*FenceOptions)) (*Fence, error) {
	if routes == nil || region == "" || homes == nil {
		return nil, errors.New("regions: a fence needs the routes, its Region and the tenants' homes")
	}
	o := FenceOptions{Lease: DefaultLease, Clock: time.Now}
	for _, fn := range optFns {
		fn(&o)
	}
	return &Fence{routes: routes, region: region, homes: homes, lease: o.Lease, clock: o.Clock, read: map[string]readRoute{}, tenants: map[string]string{}}, nil
}

// Region is the Region this Fence is.
func (f *Fence) Region() string { return f.region }

// Serving says whether this Region serves tenant now.
func (f *Fence) Serving(ctx context.Context, tenant string) (Serving, error) {
	home, err := f.home(ctx, tenant)
	if err != nil {
		return Serving{}, err
	}
	rt, err := f.route(ctx, home)
	if err != nil {
		return Serving{}, err
	}
	sv := Serving{Region: rt.ServedBy, Since: rt.Since, Until: rt.at.Add(f.lease)}
	sv.Here = rt.ServedBy == f.region && !f.clock().Before(rt.Since)
	if len(rt.Pending) > 0 {
		sv.Unreplicated = rt.Since
	}
	return sv, nil
}

// Yields reports whether another Region may write the records region
// claimed under key. It is an idem.Ledger's Yields. Region must no
// longer serve the tenant, and its writes must have replicated. Without
// the tenant's route read within its lease, nothing yields.
func (f *Fence) Yields(key idem.Key, region string) bool {
	rt, ok := f.readFor(key.Tenant())
	if !ok || !f.clock().Before(rt.at.Add(f.lease)) {
		return false
	}
	return region != rt.ServedBy && !slices.Contains(rt.Pending, region)
}

// Unreplicated is when this Region began to serve key's tenant, if a
// Region that served it before is not drained. It is an idem.Ledger's
// Unreplicated: a record older than that may be a stale copy here.
// Without the tenant's route read within its lease, every record made
// before now may be.
func (f *Fence) Unreplicated(key idem.Key) time.Time {
	rt, ok := f.readFor(key.Tenant())
	now := f.clock()
	switch {
	case !ok || !now.Before(rt.at.Add(f.lease)):
		return now
	case len(rt.Pending) > 0:
		return rt.Since
	}
	return time.Time{}
}

// readFor is the route last read for tenant's home, if Serving has read
// one.
func (f *Fence) readFor(tenant string) (readRoute, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	home, ok := f.tenants[tenant]
	if !ok {
		return readRoute{}, false
	}
	rt, ok := f.read[home]
	return rt, ok
}

// home is tenant's home Region, from the routes table. A stack reads it
// once, and keeps it: it never changes. Only the tenant's first request
// ever writes it, with this stack's configured home.
func (f *Fence) home(ctx context.Context, tenant string) (string, error) {
	f.mu.Lock()
	home, ok := f.tenants[tenant]
	f.mu.Unlock()
	if ok {
		return home, nil
	}
	home, err := f.routes.Home(ctx, tenant, f.homes(tenant))
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.tenants[tenant] = home
	f.mu.Unlock()
	return home, nil
}

// route is home's route: the one read less than half a lease ago, or a
// fresh read. A failed read falls back on a route still within its lease.
func (f *Fence) route(ctx context.Context, home string) (readRoute, error) {
	now := f.clock()
	f.mu.Lock()
	cached, ok := f.read[home]
	f.mu.Unlock()
	if ok && now.Before(cached.at.Add(f.lease/2)) {
		return cached, nil
	}
	rt, err := f.routes.Route(ctx, home)
	if err != nil {
		if ok && now.Before(cached.at.Add(f.lease)) {
			return cached, nil
		}
		return readRoute{}, err
	}
	fresh := readRoute{Route: rt, at: now}
	f.mu.Lock()
	f.read[home] = fresh
	f.mu.Unlock()
	return fresh, nil
}

// Homes returns a tenant's home Region: the one homes names, or def.
func Homes(homes map[string]string, def string) func(tenant string) string {
	homes = maps.Clone(homes)
	return func(tenant string) string {
		if h, ok := homes[tenant]; ok {
			return h
		}
		return def
	}
}
