package limit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Limits are a tenant's limits. In an operator's override a zero field
// keeps the default.
type Limits struct {
	// Rate is how many of the tenant's requests may start in a second.
	Rate int `json:"rate"`
	// Concurrency is how many of them may run at once, on average over
	// ConcurrencySpan: seconds of handler time a second.
	Concurrency int `json:"concurrency"`
}

// The default limits. docs/capacity.md says why.
const (
	DefaultRate        = 100
	DefaultConcurrency = 40
)

// The highest limits. They are far past what one table serves, and keep
// the handler time a span allows far from overflowing.
const (
	MaxRate        = 1_000_000
	MaxConcurrency = 100_000
)

// CheckOverride reports whether l is an override an operator may set:
// each field zero or from 1 to its maximum, and one set.
func (l Limits) CheckOverride() error {
	if l.Rate < 0 || l.Rate > MaxRate || l.Concurrency < 0 || l.Concurrency > MaxConcurrency || l == (Limits{}) {
		return fmt.Errorf("limit: an override sets a rate from 1 to %d, a concurrency from 1 to %d, or both; got %+v", MaxRate, MaxConcurrency, l)
	}
	return nil
}

// over returns l with the fields that o sets, each at most its maximum.
// An override written past them by hand is held to them.
func (l Limits) over(o Limits) Limits {
	if o.Rate > 0 {
		l.Rate = min(o.Rate, MaxRate)
	}
	if o.Concurrency > 0 {
		l.Concurrency = min(o.Concurrency, MaxConcurrency)
	}
	return l
}

// busy is the handler time Concurrency allows in a window.
func (l Limits) busy() time.Duration { return time.Duration(l.Concurrency) * Window }

// interval is the time between two requests at the rate.
func (l Limits) interval() time.Duration { return Window / time.Duration(l.Rate) }

// ConcurrencySpan is how many windows a tenant's concurrency is averaged
// over. A request's handler time counts when it ends. A stall that ends
// many requests at once would fill one window; over ten, it averages out.
const ConcurrencySpan = 10

// Usage is what a tenant used of a window.
type Usage struct {
	Requests int
	// Busy is the handler time of the requests that ended in the window.
	Busy time.Duration
	// Running is how many of the window's requests have not ended.
	// Their handler time counts while they run.
	Running int
}

func (u Usage) plus(v Usage) Usage {
	return Usage{u.Requests + v.Requests, u.Busy + v.Busy, u.Running + v.Running}
}

// adds is what u adds, without what it takes back.
func (u Usage) adds() Usage {
	return Usage{max(u.Requests, 0), max(u.Busy, 0), max(u.Running, 0)}
}

// near reports whether u reaches half of a limit: past it, every request's
// count is shared at once.
func (u Usage) near(l Limits) bool { return 2*u.Requests >= l.Rate || 2*u.Busy >= l.busy() }

// Store holds the counts every instance shares, and the operators'
// overrides. *Table is the one the functions use.
type Store interface {
	// Add adds u to tenant's usage of the window. It adds late to the
	// Running of earlier windows: requests ended, or shared late. It
	// returns every instance's usage of the window and some before it.
	// They come last first, as the store holds them.
	Add(ctx context.Context, tenant string, window int64, u Usage, late map[int64]int) ([]Usage, error)
	// Overrides returns every override, by tenant.
	Overrides(ctx context.Context) (map[string]Limits, error)
}

// Window is the span a rate counts over.
const Window = time.Second

// An instance shares a quiet tenant's usage past SyncEvery requests, or a
// SyncShare-th of the rate if more, or past SyncBusy of handler time.
// Each instance's unshared part is what a tenant may exceed a limit by.
// Lambda gives an instance one request at a time: at most a window of
// handler time a window. So SyncBusy is half a window, whatever the
// concurrency, or slow requests would never be shared. Once the tenant
// nears a limit, each request is shared, or each HotShare-th of its limit
// if more. It is shared as it starts and as it ends. So a tenant's count
// takes at most about twice HotShare writes a second, however high its
// limit. Each instance adds a read a window, and a refusal it takes back.
const (
	SyncEvery = 5
	SyncBusy  = Window / 2
	SyncShare = 20
	HotShare  = 200
)

// HotSpan is how many windows a tenant stays hot after it last neared a
// limit. A flood that pauses for less is still shared when it
// resumes: an instance would otherwise let SyncEvery through again.
// It is a minute: over a large fleet, an instance may see one of the
// tenant's requests in many seconds, and must still read the others'.
const HotSpan = 6 * ConcurrencySpan

// shareTimeout bounds a share. The limits fail open: a table that hangs
// must not spend the request's deadline. Nor may it hold a charge's
// answer, as Done shares after the charge. It is many times a share's
// usual latency of a few milliseconds.
const shareTimeout = 150 * time.Millisecond

// DefaultMaxAge is how long the overrides are kept before they are read
// again.
const DefaultMaxAge = time.Minute

// maxTenants bounds the tenants an instance tracks. Past it, forgetBatch
// of them are forgotten at once, the cold first. One scan of them all
// then serves that many new tenants.
const (
	maxTenants  = 10_000
	forgetBatch = maxTenants / 10
)

// Options configure a Limiter. Zero fields take the defaults.
type Options struct {
	// Defaults are the limits of a tenant without an override.
	Defaults Limits
	// MaxAge is how long the overrides are kept.
	MaxAge time.Duration
	Clock  func() time.Time
	// Logger receives the failures to read or write the table.
	Logger *slog.Logger
}

// Limiter holds each tenant to its limits. Each instance counts what its
// own requests use of the current second. A tenant that uses more than a
// little is shared through the Store, so the limits hold across
// instances. It is safe for concurrent use.
type Limiter struct {
	store     Store
	o         Options
	overrides *overrides

	mu      sync.Mutex
	tenants map[string]*tenant
}

// tenant is what an instance knows of one tenant's current window.
type tenant struct {
	window int64
	// known is the window's usage by every instance, as of this
	// instance's last sync. sharing is what a sync under way adds to it.
	// pending is what this instance used since.
	known, sharing, pending Usage
	// past holds the usage of the windows before this one, last first, up
	// to ConcurrencySpan-1 of them. A sync learns what every instance
	// shared in them, so a fleet's concurrency holds.
	past []Usage
	// late holds what the next sync adds to earlier windows' Running.
	// It holds requests that ended here, or no sync shared in time.
	late map[int64]int
	// due paces the tenant's requests on this instance, a token bucket
	// kept as the time its next request is due at its rate (GCRA). It
	// may start a second's worth at once; a flood past that gets its rate
	// spread evenly, not all at each second's start.
	due time.Time
	// hotUntil is the last window the tenant is hot in: it neared a
	// limit, so every request is shared.
	hotUntil int64
	syncing  bool
	// read: a sync of this window learnt every instance's usage.
	read bool
	// failed: a sync of this window failed. The next window tries again,
	// so a table that cannot take writes costs each request no call.
	failed bool
}

// used is the window's usage as far as this instance knows.
func (t *tenant) used() Usage { return t.known.plus(t.sharing).plus(t.pending) }

// recentBusy is the handler time of the last ConcurrencySpan windows, this
// one included, as far as this instance knows.
func (t *tenant) recentBusy() time.Duration {
	busy := t.used().Busy
	for _, u := range t.past {
		busy += u.Busy
	}
	return busy
}

// inFlight is the handler time of the requests still running, as far as
// this instance knows. Each counts from its window's start. It will run
// some more: what it commits counts before it lands.
func (t *tenant) inFlight(now time.Time) time.Duration {
	since := now.Sub(time.Unix(t.window, 0))
	busy := time.Duration(max(t.used().Running, 0)) * since
	for i, u := range t.past {
		busy += time.Duration(max(u.Running, 0)) * (since + time.Duration(i+1)*Window)
	}
	return busy
}

// underConcurrency is when the handler time this instance knows of falls
// under the concurrency, as the oldest windows leave the span. Requests
// running count as if they ended now: their time so far lands in this
// window at best. It is asked only once over: the answer is a later
// window's start.
func (t *tenant) underConcurrency(lim Limits, now time.Time) time.Time {
	running := t.inFlight(now)
	windows := []time.Duration{t.used().Busy + running} // last first
	for _, u := range t.past {
		windows = append(windows, u.Busy)
	}
	busy, k := t.recentBusy()+running, 0
	// Once the span has passed every window has left: k stops there.
	for k < ConcurrencySpan && busy >= ConcurrencySpan*lim.busy() {
		// k windows on, the window ConcurrencySpan-k back has left.
		k++
		if back := ConcurrencySpan - k; back < len(windows) {
			busy -= windows[back]
		}
	}
	return time.Unix(t.window+int64(k), 0)
}

// Ticket is an admitted request, handed back to Done.
type Ticket struct {
	tenant string
	window int64
	start  time.Time
}

// Refusal is why a request was refused.
type Refusal struct {
	// Limit names the limit reached: "rate" or "concurrency".
	Limit  string
	Limits Limits
	// RetryAfter is how long until the limit admits a request again,
	// as far as this instance knows.
	RetryAfter time.Duration
}

// New returns a Limiter that shares counts through store and reads the
// overrides from it, a first time now. A read that fails leaves the
// defaults, and is tried again on a request a little later.
func New(ctx context.Context, store Store, optFns ...func(*Options)) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("limit: nil store")
	}
	o := Options{}
	for _, fn := range optFns {
		fn(&o)
	}
	o.Defaults = Limits{Rate: DefaultRate, Concurrency: DefaultConcurrency}.over(o.Defaults)
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Limiter{store: store, o: o, tenants: map[string]*tenant{}}
	l.overrides = &overrides{store: store, defaults: o.Defaults, maxAge: o.MaxAge, clock: o.Clock, logger: o.Logger}
	l.overrides.read(ctx)
	return l, nil
}

// Admit admits a request of tenant, or says which limit refuses it. An
// admitted request counts against the rate until Done says otherwise. A
// hot tenant's first request of a window here reads every instance's
// usage first. Lambda may send an instance one request in many seconds.
func (l *Limiter) Admit(ctx context.Context, name string) (*Ticket, *Refusal) {
	lim := l.overrides.limits(ctx, name)
	now := l.o.Clock()
	w := now.Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenant(name, w, lim)
	w = t.window
	sync := t.hot() && !t.syncing && !t.failed && (!t.read || t.hotDue(lim))
	// The request counts from here, and a sync shares it as running.
	// Lambda may send this instance no other before it ends.
	t.pending.Requests, t.pending.Running = t.pending.Requests+1, t.pending.Running+1
	if sync {
		l.share(ctx, name, t, lim)
	}
	refuse := func(limit string, wait time.Duration) (*Ticket, *Refusal) {
		// A share that outlived w took the count into w: take it back there.
		if t.window == w {
			t.pending.Requests--
		}
		t.end(w)
		// A refusal this sync shared is taken back at once. Else it would
		// count, and run, until this instance's next sync.
		if sync && t.read && !t.syncing && !t.failed {
			l.share(ctx, name, t, lim)
		}
		return nil, &Refusal{Limit: limit, Limits: lim, RetryAfter: wait}
	}
	next := time.Unix(w+1, 0).Sub(now)
	// The bucket's depth: a second's worth of requests less the one asked.
	depth := Window - lim.interval()
	switch {
	case t.used().Requests > lim.Rate:
		// The second is spent everywhere: the bucket empties, or what it
		// earned meanwhile would burst at the next second's start.
		t.due = now.Add(Window)
		return refuse("rate", next)
	case now.Before(t.due.Add(-depth)):
		return refuse("rate", t.due.Add(-depth).Sub(now))
	case t.recentBusy()+t.inFlight(now) >= ConcurrencySpan*lim.busy():
		// What ended leaves the span in time; what runs may not: at
		// least the next window.
		return refuse("concurrency", max(t.underConcurrency(lim, now).Sub(now), next))
	}
	t.due = later(t.due, now).Add(lim.interval())
	return &Ticket{tenant: name, window: w, start: now}, nil
}

// Done ends an admitted request. counted says whether it stays counted
// against the rate; its handler time counts either way. When the tenant's
// unshared usage is due, Done adds it to the Store.
func (l *Limiter) Done(ctx context.Context, tk *Ticket, counted bool) {
	lim := l.overrides.cached(tk.tenant)
	now := l.o.Clock()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenant(tk.tenant, now.Unix(), lim)
	if !counted {
		t.due = t.due.Add(-lim.interval())
		if tk.window == t.window {
			t.pending.Requests--
		}
	}
	t.end(tk.window)
	t.pending.Busy += max(now.Sub(tk.start), 0)
	due := t.pending.Requests >= max(SyncEvery, lim.Rate/SyncShare) || t.pending.Busy >= SyncBusy
	if t.hot() {
		due = t.hotDue(lim)
	}
	due = due || t.takesBack()
	if t.syncing || t.failed || !due {
		return
	}
	l.share(ctx, tk.tenant, t, lim)
}

// end ends a request of window w: it no longer runs.
func (t *tenant) end(w int64) {
	if w >= t.window {
		t.pending.Running--
		return
	}
	if back := t.window - 1 - w; back < int64(len(t.past)) {
		t.past[back].Running = max(t.past[back].Running-1, 0)
	}
	t.late[w]--
}

// takesBack reports whether the tenant's unshared usage takes back what
// a share counted. A request shared as it started ended, or gave its count
// back. Every instance counts it until this one shares that. A quiet
// tenant's request is counted and ended between two shares: it never is.
func (t *tenant) takesBack() bool {
	if t.pending.Requests < 0 || t.pending.Running < 0 {
		return true
	}
	for _, n := range t.late {
		if n < 0 {
			return true
		}
	}
	return false
}

// hot reports whether the tenant neared a limit in the last HotSpan
// windows. Its usage is then shared on each request, or each
// HotShare-th of its limit.
func (t *tenant) hot() bool { return t.window <= t.hotUntil }

// hotDue reports whether a hot tenant's unshared usage is due.
func (t *tenant) hotDue(lim Limits) bool {
	return t.pending.Requests >= max(1, lim.Rate/HotShare) || t.pending.Busy >= max(time.Nanosecond, lim.busy()/HotShare)
}

// share adds the tenant's unshared usage to the Store, and learns every
// instance's. It is called with l.mu held, and releases it meanwhile.
func (l *Limiter) share(ctx context.Context, name string, t *tenant, lim Limits) {
	maps.DeleteFunc(t.late, func(_ int64, n int) bool { return n == 0 })
	add, late, w := t.pending, t.late, t.window
	t.pending, t.sharing, t.syncing, t.read, t.late = Usage{}, add, true, true, map[int64]int{}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, shareTimeout)
	total, err := l.store.Add(ctx, name, w, add, late)
	cancel()
	l.mu.Lock()
	t.syncing = false
	switch {
	case t.window != w:
		// The window is over: what it counted no longer matters.
	case err != nil:
		// The share may have landed, its answer lost. So what adds is
		// sent again: twice, a count is over, the safe side for a limit.
		// What takes back is dropped: twice, a count would be under.
		t.pending, t.sharing, t.failed = t.pending.plus(add.adds()), Usage{}, true
		for v, n := range late {
			t.late[v] += max(n, 0)
		}
		l.o.Logger.WarnContext(ctx, "sharing a tenant's usage failed", "tenant", name, "error", err.Error())
	default:
		t.known, t.sharing = total[0], Usage{}
		t.learn(total[1:])
		t.heat(lim)
	}
}

// learn takes what every instance shared of past windows, last first.
// Each window keeps the most handler time it is known to hold. This
// instance's unshared time is in none of them.
func (t *tenant) learn(past []Usage) {
	past = past[:min(len(past), ConcurrencySpan-1)]
	for len(t.past) < len(past) {
		t.past = append(t.past, Usage{})
	}
	for i, u := range past {
		t.past[i] = Usage{Requests: u.Requests, Busy: max(t.past[i].Busy, u.Busy), Running: u.Running}
	}
}

// heat keeps the tenant hot for HotSpan windows on if it is near a limit.
func (t *tenant) heat(lim Limits) {
	if t.used().near(lim) {
		t.hotUntil = t.window + HotSpan
	}
}

// tenant returns name's state for window w, which starts afresh each
// window. A tenant near a limit stays hot for HotSpan windows.
func (l *Limiter) tenant(name string, w int64, lim Limits) *tenant {
	t, ok := l.tenants[name]
	if !ok {
		if len(l.tenants) >= maxTenants {
			l.forget(w)
		}
		t = &tenant{window: w, late: map[int64]int{}}
		l.tenants[name] = t
	}
	// A wall clock stepped back leaves the tenant in its window.
	if t.window < w {
		t.heat(lim)
		t.past = append([]Usage{t.used()}, t.past...)
		for range min(w-t.window-1, ConcurrencySpan) {
			t.past = append([]Usage{{}}, t.past...)
		}
		t.past = t.past[:min(len(t.past), ConcurrencySpan-1)]
		// What runs unshared, or was taken back unshared, is shared late.
		t.late[t.window] += t.pending.Running
		// Windows that left the span count no longer.
		maps.DeleteFunc(t.late, func(v int64, n int) bool { return n == 0 || v < w-ConcurrencySpan })
		t.window, t.known, t.sharing, t.pending, t.failed, t.read = w, Usage{}, Usage{}, Usage{}, false, false
	}
	return t
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// forget drops forgetBatch tenants that no sync holds. The cold go
// first, then those with handler time in the span, the hot last. Else a
// flood that paused would get SyncEvery through again. Within each, the
// oldest window goes first.
func (l *Limiter) forget(w int64) {
	type candidate struct {
		name   string
		rank   int
		window int64
	}
	var cs []candidate
	for name, t := range l.tenants {
		if t.syncing {
			continue
		}
		rank := 0
		switch {
		case t.hotUntil >= w:
			rank = 2
		case t.limited(w):
			rank = 1
		}
		cs = append(cs, candidate{name, rank, t.window})
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.window, b.window))
	})
	for _, c := range cs[:min(len(cs), forgetBatch)] {
		delete(l.tenants, c.name)
	}
}

// limited reports whether the tenant's state still limits it in window
// w. It does if hot, or with handler time in the span.
func (t *tenant) limited(w int64) bool {
	if t.hotUntil >= w {
		return true
	}
	if t.window <= w-ConcurrencySpan {
		return false
	}
	return t.recentBusy() > 0 || t.used().Running > 0 || slices.ContainsFunc(t.past, func(u Usage) bool { return u.Running > 0 })
}
