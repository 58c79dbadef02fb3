package limit

import (
	"context"
	"time"
)

// MaxTenants is how many tenants an instance tracks before it forgets.
const MaxTenants = maxTenants

// CallTimeout sets how long each of a request's table calls may wait.
// An emulator on a loaded machine may answer slower than callTimeout.
// A test of what the fleet learns must not fail open there.
func CallTimeout(d time.Duration) func(*Options) {
	return func(o *Options) { o.callTimeout = d }
}

// Tracked is how many tenants l tracks.
func (l *Limiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tenants)
}

// AwaitOverrides waits for a read of the overrides under way to end.
func (l *Limiter) AwaitOverrides() {
	for {
		l.overrides.mu.Lock()
		reading := l.overrides.reading
		l.overrides.mu.Unlock()
		if !reading {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// GiveBack gives tk's count back, its wait counted, as a granted Wait does.
func (l *Limiter) GiveBack(ctx context.Context, tk *Ticket, wait time.Duration) {
	l.await(ctx, tk, wait, true)
}
