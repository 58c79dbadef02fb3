package limit

import (
	"sync"
	"time"
)

// catchUp: steady runs a catchUp-th slower than the clock while ahead of
// it. A window then lasts at most 1.06 s of real time.
const catchUp = 20

// jitter is how far back a reading may be and still be taken as read out
// of order, not as a step. The time elapsed then never goes back with it:
// a clock measured by the wall would count the same time twice.
const jitter = Window / 10

// ClockOf returns a limiter's clock that reads now, a clock like time.Now.
// Its readings' monotonic parts measure the time elapsed: no step of the
// wall clock moves them. A reading without one, as a test's clock gives,
// measures it by the wall. A nil now is time.Now.
func ClockOf(now func() time.Time) func() (time.Time, time.Duration) {
	if now == nil {
		now = time.Now
	}
	first := now()
	return func() (time.Time, time.Duration) {
		t := now()
		return t.Round(0), t.Sub(first)
	}
}

// steady is the limiter's time: the clock's, except that it never goes
// back. A wall clock stepped back would re-enter seconds already counted
// and shared, or hold a tenant in one second as long as the step. So
// steady keeps the time elapsed through a step back. It then runs slower
// than the clock until it meets it again: the fleet's seconds line up
// again. A step forward takes steady to the clock at once. So a step back
// undone, or a clock flapping, leaves steady no further ahead.
type steady struct {
	// clock reads the wall clock, and the time elapsed since some instant.
	clock func() (time.Time, time.Duration)

	mu      sync.Mutex
	wall    time.Time     // the wall clock's latest reading in order
	read    time.Time     // and its latest, in order or not
	elapsed time.Duration // the time elapsed, as of wall
	since   time.Duration // the time elapsed it counted, which never goes back
	at      time.Time     // steady's last instant
}

// now returns steady's instant.
func (s *steady) now() time.Time {
	at, _ := s.instant()
	return at
}

// instant returns steady's instant, and the time elapsed it counted.
// Durations are measured by the latter: a step forward is not time a
// request ran. It reads the clock under its lock, so readings come in
// order.
func (s *steady) instant() (time.Time, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wall, elapsed := s.clock()
	s.read = wall
	if s.at.IsZero() {
		s.wall, s.elapsed, s.at = wall, elapsed, wall
		return wall, s.since
	}
	passed := max(elapsed-s.elapsed, 0)
	if back := s.wall.Sub(wall); back > 0 && back < jitter {
		// Read out of order, or a small step back: the time elapsed still
		// counts, and steady still advances.
		s.elapsed += passed
	} else {
		s.wall, s.elapsed = wall, elapsed
	}
	s.since += passed
	at := s.at.Add(passed)
	if ahead := at.Sub(wall); ahead > 0 {
		at = at.Add(-min(ahead, passed/catchUp))
	} else {
		at = wall
	}
	s.at = at
	return at, s.since
}

// real returns how long steady takes to advance d, in real time. While
// ahead of the clock, steady runs a catchUp-th slow: a Retry-After in its
// time would be short.
func (s *steady) real(d time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	ahead := max(s.at.Sub(s.read), 0)
	return d + min(ahead, d/(catchUp-1))
}
