package limit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestFastRequestsOfAHotTenantDoNotCountAsRunningLong: a hot tenant's
// first request of a second on an instance is shared as running. A fast
// one ends in under 200 ms, so its end is not shared until that instance
// next shares the tenant. Spread over a fleet, every other instance counts
// it as running meanwhile, from its second's start. A tenant at half its
// rate, running half a request at once against 40, must not be refused
// for its concurrency.
func TestFastRequestsOfAHotTenantDoNotCountAsRunningLong(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	store := newShared()
	const instances, seconds = 63, 60 // the AWS estimate's instances
	fleet := fleetOf(t, store, clock, instances)
	// One second of a flood over the fleet makes the tenant hot on each
	// instance, for HotSpan.
	flood(t, fleet, clock, "steady", 1, 100*time.Millisecond, always)
	clock.Advance(limit.Window)
	// Then 50 requests a second, of 10 ms each, each to the next instance
	// in turn. The flood's handler time leaves the span in ten seconds:
	// count the refusals after that, while the tenant is hot.
	refusals := map[string]int{}
	for i := range seconds * 50 {
		l := fleet[i%instances]
		tk, refused := l.Admit(t.Context(), "steady")
		if refused != nil {
			if i >= 12*50 {
				refusals[refused.Limit]++
			}
			clock.Advance(20 * time.Millisecond)
			continue
		}
		clock.Advance(10 * time.Millisecond)
		l.Done(t.Context(), tk, true)
		clock.Advance(10 * time.Millisecond)
	}
	if len(refusals) > 0 {
		t.Fatalf("50 requests a second of 10 ms (0.5 at once), against 100 and 40, over %d instances: %v of the %d of seconds 12 to 60 refused", instances, refusals, (seconds-12)*50)
	}
}

// TestAWallClockSteppedBackDoesNotPanic: the limiter's windows come from
// the wall clock, which NTP may step back. A request admitted just after
// a second's start and ended after a step back of a few milliseconds must
// end, not panic: Done runs after the charge, so a panic loses its answer.
func TestAWallClockSteppedBackDoesNotPanic(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start.Add(time.Second + time.Millisecond))
	l := newLimiter(t, newShared(), clock, limit.Limits{})
	tk, refused := l.Admit(t.Context(), "acme")
	if refused != nil {
		t.Fatalf("refused %+v", refused)
	}
	clock.Advance(-5 * time.Millisecond) // a step back across the second
	l.Done(t.Context(), tk, true)
}

// hooked is a Store that runs during an Add, while the limiter waits
// for it, what another request of the instance does meanwhile.
type hooked struct {
	*sharedCounts
	during func()
}

func (h *hooked) Add(ctx context.Context, tenant string, window int64, u limit.Usage, late map[int64]int) ([]limit.Usage, error) {
	if f := h.during; f != nil {
		h.during = nil
		f()
	}
	return h.sharedCounts.Add(ctx, tenant, window, u, late)
}

// TestARefusalWhoseShareOutlivedItsSecondIsTakenBackFromIt: a hot
// tenant's first request of a second is shared as it starts. When that
// share outlasts the second, and the request is then refused, its count
// must be taken back from its own second, not from the next one's. Once
// every request has ended and been shared, no second counts one running.
func TestARefusalWhoseShareOutlivedItsSecondIsTakenBackFromIt(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	store := &hooked{sharedCounts: newShared()}
	l := newLimiter(t, store, clock, limit.Limits{Rate: 10, Concurrency: 100})
	admitted(t, l, "acme", 10) // near the rate: hot
	setClock(clock, start.Add(time.Second+900*time.Millisecond))
	store.during = func() {
		// The share is slow: the next second starts, and the instance
		// admits that second's whole rate meanwhile.
		setClock(clock, start.Add(2*time.Second))
		if got := admitted(t, l, "acme", 10); got != 10 {
			t.Errorf("the next second admitted %d, want 10", got)
		}
	}
	if tk, refused := l.Admit(t.Context(), "acme"); refused == nil {
		l.Done(t.Context(), tk, true)
		t.Fatal("admitted past the rate")
	}
	setClock(clock, start.Add(3*time.Second))
	tk, refused := l.Admit(t.Context(), "acme") // shares what is late
	if refused != nil {
		t.Fatalf("refused %+v", refused)
	}
	l.Done(t.Context(), tk, true)
	store.mu.Lock()
	defer store.mu.Unlock()
	for _, second := range []string{"09:00:01", "09:00:02"} {
		if c := store.counts["acme@"+second]; c.Running != 0 {
			t.Errorf("second %s: %+v, want none running: its requests have ended", second, c)
		}
	}
}

// hung is a Store that stops answering once hang is set, as an
// unreachable table does: each call waits for its context.
type hung struct {
	*sharedCounts
	hang bool
}

func (h *hung) Add(ctx context.Context, tenant string, window int64, u limit.Usage, late map[int64]int) ([]limit.Usage, error) {
	if h.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.sharedCounts.Add(ctx, tenant, window, u, late)
}

// TestAnUnreachableTableFailsOpen: docs/operations.md says the limits
// fail open while the limits table is unreachable. A hot tenant's first
// request of a second shares before it is answered. An unreachable table
// must not spend that request's deadline: the charge must still have it.
func TestAnUnreachableTableFailsOpen(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	store := &hung{sharedCounts: newShared()}
	l := newLimiter(t, store, clock, limit.Limits{Rate: 10, Concurrency: 100})
	admitted(t, l, "acme", 10) // near the rate: hot
	clock.Advance(limit.Window)
	store.hang = true
	// As Lambda's: the function's timeout, here shortened.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	tk, refused := l.Admit(ctx, "acme")
	if refused != nil {
		t.Fatalf("refused %+v", refused)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("admitted after %v, with the request's deadline spent on the table: %v", time.Since(began).Round(time.Millisecond), err)
	}
	l.Done(ctx, tk, true)
}

// TestAConcurrencyRefusalByRequestsRunningSaysHowLongTheirTimeCounts: the
// requests running already used more handler time than the span allows.
// Whether they end at once or run on, that time counts for ten seconds
// more. A refusal that says to retry within a second sends the client
// back to be refused again, up to ten times.
func TestAConcurrencyRefusalByRequestsRunningSaysHowLongTheirTimeCounts(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	l := newLimiter(t, newShared(), clock, limit.Limits{Rate: 1000, Concurrency: 2})
	var running []*limit.Ticket
	for range 8 {
		tk, refused := l.Admit(t.Context(), "acme")
		if refused != nil {
			t.Fatalf("refused %+v", refused)
		}
		running = append(running, tk)
	}
	// 3.5 s on, the 8 have used 28 s of handler time: past the 20 s.
	clock.Advance(3500 * time.Millisecond)
	_, refused := l.Admit(t.Context(), "acme")
	if refused == nil || refused.Limit != "concurrency" {
		t.Fatalf("refusal %+v, want the concurrency", refused)
	}
	// The 8 end now: the best case for the client that waits.
	for _, tk := range running {
		l.Done(t.Context(), tk, true)
	}
	// As a client honouring Retry-After: whole seconds, rounded up.
	clock.Advance(refused.RetryAfter.Truncate(time.Second) + time.Second)
	if _, again := l.Admit(t.Context(), "acme"); again != nil {
		t.Fatalf("told to retry after %v, refused again then: %+v", refused.RetryAfter, again)
	}
}

// TestARetryStormLeavesItsTenantsRateToItsOtherRequests: the contract says
// a replay gives its count back, so a client retrying one key without end
// leaves its tenant's rate to its other requests. Over a fleet, a hot
// tenant's first request of a second on an instance is shared as it
// starts. A replay's count given back waits for the instance's next share,
// which a thin spread never makes that second: the fleet counts it.
func TestARetryStormLeavesItsTenantsRateToItsOtherRequests(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	// A fleet wider than the rate, as other tenants' load keeps one (the
	// tests of the concurrency use 300 and 600).
	const instances, seconds = 150, 30
	store := newShared()
	var fleet []*limit.Limiter
	for range instances {
		// A concurrency that never refuses: the rate alone is asked.
		fleet = append(fleet, newLimiter(t, store, clock, limit.Limits{Concurrency: limit.MaxConcurrency}))
	}
	// A flood makes the tenant hot on each instance.
	flood(t, fleet, clock, "acme", 1, 100*time.Millisecond, always)
	clock.Advance(limit.Window)
	// Then, each 5 ms, a request to the next instance in turn: a replay
	// three times in four, a new charge the fourth. 150 replays and 50 new
	// charges a second, each ended 1 ms later.
	refused, asked := 0, 0
	for i := range seconds * 200 {
		l := fleet[i%instances]
		replay := i%4 != 0
		tk, refusal := l.Admit(t.Context(), "acme")
		if !replay && i >= 12*200 { // once the flood's second has left the span
			asked++
			if refusal != nil && refusal.Limit == "rate" {
				refused++
			}

		}
		clock.Advance(time.Millisecond)
		if refusal == nil {
			l.Done(t.Context(), tk, !replay)
		}
		clock.Advance(4 * time.Millisecond)
	}
	if refused > 0 {
		t.Fatalf("50 new charges a second beside a retry storm, against a rate of 100: %d of %d refused for the rate", refused, asked)
	}
}

// TestTheTenantsTrackedStayBoundedWithinASecond: maxTenants bounds the
// tenants an instance tracks. Past it, only tenants of windows gone are
// forgotten: within one second, each new tenant scans them all, twice,
// and is kept.
func TestTheTenantsTrackedStayBoundedWithinASecond(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	l := newLimiter(t, newShared(), clock, limit.Limits{})
	const extra = 200
	began := time.Now()
	for i := range limit.MaxTenants + extra {
		if i == limit.MaxTenants {
			t.Logf("the first %d tenants: %v", limit.MaxTenants, time.Since(began))
			began = time.Now()
		}
		admitted(t, l, fmt.Sprintf("tenant-%d", i), 1)
	}
	t.Logf("the next %d: %v", extra, time.Since(began))
	if n := l.Tracked(); n > limit.MaxTenants {
		t.Fatalf("%d tenants tracked, want at most %d", n, limit.MaxTenants)
	}
}

// TestAnUnreachableTableDoesNotHoldAChargesAnswer: Done runs after the
// charge, before its answer is sent. A busy tenant's fifth request of a
// second shares its count there. An unreachable table must not hold that
// answer until the function's timeout: the client would get none.
func TestAnUnreachableTableDoesNotHoldAChargesAnswer(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	store := &hung{sharedCounts: newShared(), hang: true}
	l := newLimiter(t, store, clock, limit.Limits{})
	admitted(t, l, "acme", limit.SyncEvery-1)
	// As Lambda's: the function's timeout, here shortened.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	tk, refused := l.Admit(ctx, "acme")
	if refused != nil {
		t.Fatalf("refused %+v", refused)
	}
	began := time.Now()
	l.Done(ctx, tk, true) // the charge is made; its answer waits for this
	if err := ctx.Err(); err != nil {
		t.Fatalf("the answer of a charge made waited %v for the table, past the function's deadline: %v", time.Since(began).Round(time.Millisecond), err)
	}
}

// landed is a Store whose next Add lands and then fails, as a call whose
// answer times out after DynamoDB applied it.
type landed struct {
	*sharedCounts
	once bool
}

func (s *landed) Add(ctx context.Context, tenant string, window int64, u limit.Usage, late map[int64]int) ([]limit.Usage, error) {
	out, err := s.sharedCounts.Add(ctx, tenant, window, u, late)
	if s.once {
		s.once = false
		return nil, errors.New("timed out after the write")
	}
	return out, err
}

// TestAShareThatLandedAndFailedIsNotAddedTwice: a share's answer can be
// lost after the table applied it. The limiter keeps what it sent, and
// sends it again, so the end of a request is taken from its second twice.
// The fleet then counts one of that second's requests fewer as running.
func TestAShareThatLandedAndFailedIsNotAddedTwice(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	store := &landed{sharedCounts: newShared()}
	l := newLimiter(t, store, clock, limit.Limits{Rate: 10})
	admitted(t, l, "acme", 10) // near the rate: hot
	setClock(clock, start.Add(time.Second+500*time.Millisecond))
	tk, refused := l.Admit(t.Context(), "acme") // shared as running
	if refused != nil {
		t.Fatalf("refused %+v", refused)
	}
	setClock(clock, start.Add(2*time.Second+100*time.Millisecond))
	store.once = true
	l.Done(t.Context(), tk, true) // 600 ms: shares that it ended, and fails
	setClock(clock, start.Add(3*time.Second))
	admitted(t, l, "acme", 1) // shares again what failed
	store.mu.Lock()
	defer store.mu.Unlock()
	if c := store.counts["acme@09:00:01"]; c.Running != 0 {
		t.Fatalf("second 1: %+v, want none running: its one request ended", c)
	}
}

// TestAHotTenantOutlivesManyBusyOnes: the change forgets hot tenants
// last. Tenants with handler time in the span are spared in the first
// pass too; when they alone pass the bound, the second pass forgets every
// tenant of a window gone, the hot flood with them. Its next request is
// then not shared: an instance lets SyncEvery through again.
func TestAHotTenantOutlivesManyBusyOnes(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	store := newShared()
	l := newLimiter(t, store, clock, limit.Limits{})
	admitted(t, l, "flood", limit.DefaultRate) // near the rate: hot
	clock.Advance(limit.Window)
	for i := range limit.MaxTenants - 1 {
		tk, refused := l.Admit(t.Context(), fmt.Sprintf("busy-%d", i))
		if refused != nil {
			t.Fatalf("refused %+v", refused)
		}
		clock.Advance(time.Microsecond) // handler time in the span
		l.Done(t.Context(), tk, true)
	}
	clock.Advance(limit.Window)
	admitted(t, l, "one-more", 1) // past the bound
	before, _ := store.calls()
	tk, refused := l.Admit(t.Context(), "flood")
	if refused != nil {
		t.Fatalf("refused %+v", refused)
	}
	defer l.Done(t.Context(), tk, true)
	if adds, _ := store.calls(); adds != before+1 {
		t.Fatalf("the flood's first request after %d busy tenants made %d adds as it started, want 1: it is still hot", limit.MaxTenants-1, adds-before)
	}
}
