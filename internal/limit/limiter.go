package limit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
}

func (u Usage) plus(v Usage) Usage { return Usage{u.Requests + v.Requests, u.Busy + v.Busy} }

// most is the larger of u and v, field by field.
func (u Usage) most(v Usage) Usage { return Usage{max(u.Requests, v.Requests), max(u.Busy, v.Busy)} }

// near reports whether u is past half the rate: every request's count is
// then shared at once. Half is not near: a tenant at half of a rate of 2
// would otherwise pay two shares a charge. The concurrency's half is
// weighed over the span, by heat.
func (u Usage) near(l Limits) bool { return 2*u.Requests > l.Rate }

// Store holds the counts every instance shares, and the operators'
// overrides. *Table is the one the functions use.
type Store interface {
	// Add adds u to tenant's usage of the window. It returns every
	// instance's usage of the window and some before it. They come last
	// first, as the store holds them.
	Add(ctx context.Context, tenant string, window int64, u Usage) ([]Usage, error)
	// Read returns what Add would, adding nothing. A span of windows
	// may reach past what Add returns.
	Read(ctx context.Context, tenant string, window int64) ([]Usage, error)
	// Overrides returns every override, by tenant.
	Overrides(ctx context.Context) (map[string]Limits, error)
	// TakeWait takes one of most waits on what on names, in the window
	// that starts at start and lasts span. false: all are taken.
	TakeWait(ctx context.Context, tenant, on string, start time.Time, span time.Duration, most int) (bool, error)
}

// Window is the span a rate counts over.
const Window = time.Second

// An instance shares a quiet tenant's usage past SyncEvery requests, or a
// SyncShare-th of the rate if more, or past SyncBusy of handler time.
// Each instance's unshared part is what a tenant may exceed a limit by.
// Lambda gives an instance one request at a time: at most a window of
// handler time a window. So SyncBusy is half a window, whatever the
// concurrency, or slow requests would never be shared. Once the tenant
// nears a limit, each request counted is shared as it ends, or each
// HotShare-th of its rate if more. Handler time is shared each HotShare-th
// of the concurrency's; the rest goes with the next window's share. So a
// tenant's count takes at most about HotShare writes a second, however
// high its limit. Each instance adds a read a window.
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

// callTimeout bounds each table call on a request's path, on its own.
// The limits fail open. A table that hangs must not spend the request's
// deadline, nor hold a charge's answer. It is many times a call's usual
// latency of a few milliseconds. Once one call times out, the request
// calls the table only for its last share: a hanging table costs it two.
const callTimeout = 50 * time.Millisecond

// maxFailures is how many syncs of a tenant may fail in a window. A table
// throttling a few writes still learns the fleet's counts. One that fails
// them all costs only this many requests a call each second.
const maxFailures = 3

// readTimeout bounds a read of the overrides. No request waits for one,
// and a cold connection or a long list is slower than a share. Lambda may
// freeze a read between requests. Its bound may then fail it, tried again
// after retryAfter.
const readTimeout = time.Second

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
	// Clock reads the wall clock, and the time elapsed since some
	// instant, which no step of the wall clock moves. Default:
	// ClockOf(time.Now).
	Clock func() (wall time.Time, elapsed time.Duration)
	// Logger receives the failures to read or write the table.
	Logger *slog.Logger
	// WaitSpan is the window MaxWaiters counts over: the longest a
	// request waits for another's work. Default DefaultWaitSpan.
	WaitSpan time.Duration
	// callTimeout is callTimeout, but for tests on a slow emulator.
	callTimeout time.Duration
}

// Limiter holds each tenant to its limits. Each instance counts what its
// own requests use of the current second. A tenant that uses more than a
// little is shared through the Store, so the limits hold across
// instances. It is safe for concurrent use.
type Limiter struct {
	store     Store
	o         Options
	clock     *steady
	overrides *overrides

	mu      sync.Mutex
	tenants map[string]*tenant
}

// tenant is what an instance knows of one tenant's current window.
type tenant struct {
	window int64
	// known is the window's usage by every instance, as of this
	// instance's last sync. sharing is what a sync under way adds to it.
	// pending is what this instance used since. lost is what failed
	// shares carried since: they may have landed, so only this instance
	// counts it. own is what every share of the window carried, failed
	// or not. A failed share may never have landed: the fleet's count
	// then misses it, but this instance still counts it.
	known, sharing, pending, lost, own Usage
	// past holds the handler time of the windows before this one, last
	// first, up to ConcurrencySpan-1 of them. A sync learns what every
	// instance shared in them, so a fleet's concurrency holds.
	past []time.Duration
	// running is how many of this instance's requests run, and started
	// the sum of the time elapsed as each began. They are never shared: a
	// count sent to the table may be lost, and then never end.
	running int
	started time.Duration
	// due paces the tenant's requests on this instance, a token bucket
	// kept as the time its next request is due at its rate (GCRA). It
	// may start a second's worth at once; a flood past that gets its rate
	// spread evenly, not all at each second's start.
	due time.Time
	// last is the latest instant the tenant was seen at.
	last time.Time
	// hotUntil is the last window the tenant is hot in: it neared a
	// limit, so every request is shared.
	hotUntil int64
	syncing  bool
	// read: a sync of this window learnt every instance's usage.
	read bool
	// readTo is the last window a read of the store's earlier windows
	// returned. A span that straddles two of the store's items needs both.
	readTo int64
	// readFailed is the last window such a read failed in. It is tried
	// once a window: a throttled table must not spend every share on it.
	readFailed int64
	// failures counts the window's failed syncs. Past maxFailures the next
	// window tries again, so a failing table costs few requests a call.
	failures int
}

// used is the window's usage as far as this instance knows: at least its
// own.
func (t *tenant) used() Usage {
	return t.known.plus(t.lost).most(t.own).plus(t.sharing).plus(t.pending)
}

// recentBusy is the handler time of the last ConcurrencySpan windows, this
// one included, as far as this instance knows.
func (t *tenant) recentBusy() time.Duration {
	busy := t.used().Busy
	for _, b := range t.past {
		busy += b
	}
	return busy
}

// inFlight is the handler time of this instance's requests still running,
// as of the time elapsed. What they commit counts before it lands.
func (t *tenant) inFlight(elapsed time.Duration) time.Duration {
	return max(time.Duration(t.running)*elapsed-t.started, 0)
}

// underConcurrency is when the handler time this instance knows of falls
// under the concurrency, as the oldest windows leave the span. running is
// the requests' time so far: it lands in this window at best. It is asked
// only once over: the answer is a later window's start.
func (t *tenant) underConcurrency(lim Limits, running time.Duration) time.Time {
	windows := append([]time.Duration{t.used().Busy + running}, t.past...) // last first
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
	// t holds the request's running count, even once the tenant is
	// forgotten.
	t      *tenant
	window int64
	// began is the time elapsed as it was admitted.
	began time.Duration
	// hung: one of its table calls timed out. Only its last share calls
	// the table again. skipped: a share due meanwhile was not sent, so
	// the last share is due, however little it carries, if anything.
	hung, skipped bool
	// givenBack: the request no longer counts against the rate.
	givenBack bool
	// waiting: await counted paid, the handler time from began to the
	// end of the request's wait, ahead of its end.
	waiting bool
	paid    time.Duration
}

// Refusal is why a request was refused.
type Refusal struct {
	// Limit names the limit reached: "rate" or "concurrency".
	Limit  string
	Limits Limits
	// RetryAfter is how long until the limit admits a request again,
	// as far as this instance knows. A rate refusal also waits for a
	// concurrency known over. It is real time: the limiter's own may run
	// slow.
	RetryAfter time.Duration
	// ConcurrencyToo: a rate refusal's concurrency is known over too, so
	// RetryAfter waits for both.
	ConcurrencyToo bool
}

// New returns a Limiter that shares counts through store and reads the
// overrides from it, a first time now, for readTimeout at most. A read
// that fails leaves the defaults, and is tried again on a request a
// little later.
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
		o.Clock = ClockOf(time.Now)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WaitSpan <= 0 {
		o.WaitSpan = DefaultWaitSpan
	}
	if o.callTimeout <= 0 {
		o.callTimeout = callTimeout
	}
	l := &Limiter{store: store, o: o, clock: &steady{clock: o.Clock}, tenants: map[string]*tenant{}}
	// The first read is under way as the overrides are built.
	l.overrides = &overrides{store: store, defaults: o.Defaults, maxAge: o.MaxAge, clock: l.clock.now, logger: o.Logger, reading: true}
	l.overrides.read(ctx)
	return l, nil
}

// Admit admits a request of tenant, or says which limit refuses it. An
// admitted request counts against the rate until Done says otherwise. A
// hot tenant's first request of a window here reads every instance's
// usage first. Lambda may send an instance one request in many seconds.
func (l *Limiter) Admit(ctx context.Context, name string) (*Ticket, *Refusal) {
	lim := l.overrides.limits(ctx, name)
	now, elapsed := l.clock.instant()
	l.mu.Lock()
	defer l.mu.Unlock()
	t, now := l.tenant(name, now, lim)
	w := t.window
	sync := t.hot() && !t.syncing && t.failures < maxFailures && (!t.read || t.hotDue(lim))
	// The request counts against the rate from here, and a sync shares
	// it. Lambda may send this instance no other before it ends.
	t.pending.Requests++
	hung := sync && l.share(ctx, name, t, lim, true)
	next := time.Unix(w+1, 0).Sub(now)
	// The bucket's depth: a second's worth of requests less the one asked.
	depth := Window - lim.interval()
	// What ended leaves the span in time; what runs may not: at least the
	// next window. A rate refusal waits for it too, or its retry is
	// refused again.
	var concurrency time.Duration
	if t.recentBusy()+t.inFlight(elapsed) >= ConcurrencySpan*lim.busy() {
		concurrency = max(t.underConcurrency(lim, t.inFlight(elapsed)).Sub(now), next)
	}
	refuse := func(limit string, wait time.Duration) (*Ticket, *Refusal) {
		// The next share takes the count back. One that outlived w took
		// it into w: it stays there, a window's count over by one.
		if t.window == w {
			t.pending.Requests--
		}
		return nil, &Refusal{Limit: limit, Limits: lim, RetryAfter: l.clock.real(wait), ConcurrencyToo: limit == "rate" && concurrency > 0}
	}
	switch {
	case t.used().Requests > lim.Rate:
		// The second is spent everywhere: the bucket empties, or what it
		// earned meanwhile would burst at the next second's start. It never
		// empties past that start: an earlier refusal's Retry-After holds.
		t.due = later(t.due, earlier(now.Add(Window), nextSecondDue(w, lim)))
		return refuse("rate", max(next, t.due.Add(-depth).Sub(now), concurrency))
	case now.Before(t.due.Add(-depth)):
		return refuse("rate", max(t.due.Add(-depth).Sub(now), concurrency))
	case concurrency > 0:
		return refuse("concurrency", concurrency)
	}
	t.due = later(t.due, now).Add(lim.interval())
	t.running++
	t.started += elapsed
	return &Ticket{tenant: name, t: t, window: w, began: elapsed, hung: hung}, nil
}

// Done ends an admitted request. counted says whether it stays counted
// against the rate: a count comes back only while its own second lasts.
// One a granted Wait gave back stays given back, unless Retake took it again.
// Its handler time counts either way, measured by the time elapsed. When
// the tenant's unshared usage is due, Done adds it to the Store. It is
// the request's last share: it goes out even after a call timed out.
func (l *Limiter) Done(ctx context.Context, tk *Ticket, counted bool) {
	lim := l.overrides.cached(tk.tenant)
	now, elapsed := l.clock.instant()
	l.mu.Lock()
	defer l.mu.Unlock()
	tk.t.running--
	tk.t.started -= tk.began
	t, _ := l.tenant(tk.tenant, now, lim)
	if !counted {
		t.giveBack(tk, lim)
	}
	t.pending.Busy += max(elapsed-tk.began-tk.paid, 0)
	due := t.pending.Requests >= max(SyncEvery, lim.Rate/SyncShare) || t.pending.Busy >= SyncBusy
	if t.hot() {
		due = t.hotDue(lim)
	}
	l.shareFor(ctx, tk, t, lim, due, true)
}

// await counts tk's wait against the concurrency, once per request. back:
// tk's count is given back now, as Done does for a request not counted.
// A request that waits for another's key gives it back as it starts
// waiting: its wait may outlast its second. It is given back once. wait
// is the longest the request may wait. Its handler time so far and wait
// count at once, shared with the fleet at once. So the concurrency bounds
// how many of a tenant's requests wait at once, fleet-wide: a retry
// storm's twins hold no instance another tenant needs. Done counts only
// the time run past that. A wait that ends early stays counted in full:
// only its own tenant pays. Its instance also counts it as running: under
// Lambda, that instance serves nothing else meanwhile.
func (l *Limiter) await(ctx context.Context, tk *Ticket, wait time.Duration, back bool) {
	l.recount(ctx, tk, func(t *tenant, _ time.Time, elapsed time.Duration, lim Limits) bool {
		if back {
			t.giveBack(tk, lim)
		}
		if tk.waiting {
			return false
		}
		tk.waiting, tk.paid = true, max(elapsed-tk.began, 0)+max(wait, 0)
		t.pending.Busy += tk.paid
		return true
	})
}

// Retake counts tk against the rate again, if its count was given back. A
// request that waited, then took its key over, does new work after all.
// It is not refused: it holds the key, and a refusal would release it for
// the next twin to take. A hot tenant's count is shared at once, as its
// give-back was: the work may take seconds.
func (l *Limiter) Retake(ctx context.Context, tk *Ticket) {
	l.recount(ctx, tk, func(t *tenant, now time.Time, _ time.Duration, lim Limits) bool {
		if !tk.givenBack {
			return false
		}
		tk.givenBack, tk.window = false, t.window
		t.pending.Requests++
		// Twins may take their second past the rate, never the next.
		t.due = later(t.due, earlier(later(t.due, now).Add(lim.interval()), nextSecondDue(t.window, lim)))
		return t.hot()
	})
}

// nextSecondDue is the latest due time that admits a request as window w
// ends. A bucket emptied in w never holds past it.
func nextSecondDue(w int64, lim Limits) time.Time {
	return time.Unix(w+1, 0).Add(Window - lim.interval())
}

// recount changes tk's count in its tenant's state, as of now and the
// time elapsed. It shares the tenant's usage if change says it is due.
func (l *Limiter) recount(ctx context.Context, tk *Ticket, change func(t *tenant, now time.Time, elapsed time.Duration, lim Limits) (due bool)) {
	lim := l.overrides.cached(tk.tenant)
	now, elapsed := l.clock.instant()
	l.mu.Lock()
	defer l.mu.Unlock()
	t, now := l.tenant(tk.tenant, now, lim)
	l.shareFor(ctx, tk, t, lim, change(t, now, elapsed, lim), false)
}

// shareFor shares t's unshared usage on tk's path, if due. A count given
// back that a share counted is always due: the fleet counts it until this
// instance shares again. After a call of tk's timed out, only its last
// share goes out. A middle one skipped stays pending, and makes it due.
func (l *Limiter) shareFor(ctx context.Context, tk *Ticket, t *tenant, lim Limits, due, last bool) {
	// A skipped share's seconds may be gone: then nothing is left to send.
	due = due || t.pending.Requests < 0 || (last && tk.skipped && t.pending != Usage{})
	if t.syncing || t.failures >= maxFailures || !due {
		return
	}
	if tk.hung && !last {
		tk.skipped = true
		return
	}
	tk.hung = l.share(ctx, tk.tenant, t, lim, !tk.hung) || tk.hung
}

// giveBack gives tk's count back to t. A count given back frees room only
// in the second it was counted in, while that second lasts. Given to a
// later one, it would free room that second's new work already took.
// A count that stays is never given back, nor taken again.
func (t *tenant) giveBack(tk *Ticket, lim Limits) {
	if tk.givenBack || tk.window != t.window || t.used().Requests <= 0 {
		return
	}
	tk.givenBack = true
	t.due = t.due.Add(-lim.interval())
	t.pending.Requests--
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
// instance's. It reports whether a call timed out. mayRead: the share may
// also read the earlier item. After a timeout the last share only writes:
// one call more. It is called with l.mu held, and releases it meanwhile.
func (l *Limiter) share(ctx context.Context, name string, t *tenant, lim Limits, mayRead bool) (hung bool) {
	add, w, readTo, readNow := t.pending, t.window, t.readTo, mayRead && t.readFailed != t.window
	t.pending, t.sharing, t.syncing, t.read = Usage{}, add, true, true
	l.mu.Unlock()
	var total []Usage
	hung, err := l.call(ctx, func(ctx context.Context) (err error) {
		total, err = l.store.Add(ctx, name, w, add)
		return err
	})
	// A shared tenant's span must hold the earlier item's windows too, or
	// an instance admits a second burst as a new item starts. One not yet
	// hot here would never learn it is past half. They are past, so one
	// read an item serves.
	var before []Usage
	var readErr error
	if to := w - int64(len(total)); err == nil && readNow && len(total) < ConcurrencySpan && to > readTo {
		hung, readErr = l.call(ctx, func(ctx context.Context) (err error) {
			before, err = l.store.Read(ctx, name, to)
			return err
		})
		if readErr == nil {
			readTo = to
		}
	}
	l.mu.Lock()
	t.syncing = false
	switch {
	case t.window != w:
		// The window is over: what it counted no longer matters.
	case err != nil:
		// The share may have landed, its answer lost. So it is not sent
		// again: this instance alone counts it, until the window ends. The
		// next request due shares again, and reads what the others shared.
		t.lost, t.own, t.sharing, t.read = t.lost.plus(add), t.own.plus(add), Usage{}, false
		t.failures++
		l.o.Logger.WarnContext(ctx, "sharing a tenant's usage failed", "tenant", name, "error", err.Error())
	default:
		// The table's total holds whatever a lost share landed: lost no
		// more. own still holds one that never landed.
		t.known, t.own, t.sharing, t.lost = total[0], t.own.plus(add), Usage{}, Usage{}
		t.learn(append(total[1:], before...))
		t.heat(lim)
		t.readTo = readTo
		if readErr != nil {
			// The share landed: it is no failed share. The read is tried
			// again next window.
			t.readFailed = w
			l.o.Logger.WarnContext(ctx, "reading a tenant's earlier usage failed", "tenant", name, "error", readErr.Error())
		}
	}
	return hung
}

// call makes one table call on a request's path, waiting callTimeout at
// most. timedOut: its deadline passed, so the table may hang. A call
// refused at once, as a throttled one, is no sign of that.
func (l *Limiter) call(ctx context.Context, fn func(context.Context) error) (timedOut bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, l.o.callTimeout)
	defer cancel()
	err = fn(cctx)
	return err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded), err
}

// learn takes the handler time every instance shared in past windows,
// last first. Each window keeps the most it is known to hold. This
// instance's unshared time is in none of them.
func (t *tenant) learn(past []Usage) {
	past = past[:min(len(past), ConcurrencySpan-1)]
	for len(t.past) < len(past) {
		t.past = append(t.past, 0)
	}
	for i, u := range past {
		t.past[i] = max(t.past[i], u.Busy)
	}
}

// heat keeps the tenant hot for HotSpan windows on if it is near a limit.
// The concurrency's is over the span, as the limit is: one window's burst
// far under it is no nearer.
func (t *tenant) heat(lim Limits) {
	if t.used().near(lim) || 2*t.recentBusy() > ConcurrencySpan*lim.busy() {
		t.hotUntil = t.window + HotSpan
	}
}

// tenant returns name's state at now, which starts afresh each window, and
// the instant now is taken as. A tenant near a limit stays hot for HotSpan
// windows.
func (l *Limiter) tenant(name string, now time.Time, lim Limits) (*tenant, time.Time) {
	t, ok := l.tenants[name]
	if !ok {
		if len(l.tenants) >= maxTenants {
			l.forget(now.Unix())
		}
		t = &tenant{window: now.Unix(), last: now}
		l.tenants[name] = t
	}
	// An end may read the clock before a start that takes the lock first.
	// Such a reading is taken as the last one seen.
	now = later(now, t.last)
	t.last = now
	if w := now.Unix(); t.window < w {
		t.heat(lim)
		// A tenant hot in w takes its handler time still unshared into its
		// next share. Its requests share it only each HotShare-th of the
		// concurrency: the rest would never be. A tenant gone cold shares
		// nothing for it. It goes to the next second only, so it leaves the
		// span a second late at most; later, only this instance counts it.
		var carry Usage
		if w <= t.hotUntil && w == t.window+1 {
			carry.Busy = t.pending.Busy
		}
		t.past = append([]time.Duration{t.used().Busy - carry.Busy}, t.past...)
		for range min(w-t.window-1, ConcurrencySpan) {
			t.past = append([]time.Duration{0}, t.past...)
		}
		t.past = t.past[:min(len(t.past), ConcurrencySpan-1)]
		t.window, t.known, t.sharing, t.pending, t.lost, t.own, t.failures, t.read = w, Usage{}, Usage{}, carry, Usage{}, Usage{}, 0, false
	}
	return t, now
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earlier is the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
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
// w. It does if hot, running, or with handler time in the span.
func (t *tenant) limited(w int64) bool {
	switch {
	case t.hotUntil >= w || t.running > 0:
		return true
	case t.window <= w-ConcurrencySpan:
		return false
	}
	return t.recentBusy() > 0
}
