package limit

import (
	"sync"
	"time"
)

// catchUp: steady runs a catchUp-th slower than the clock while ahead of
// it. A window then lasts at most 1.06 s of real time.
const catchUp = 20

// jitter is how far back a reading may be and still be taken as read out
// of order, not as a step: time then waits for the clock.
const jitter = Window / 10

// steady is the limiter's time: the clock's, except that it never goes
// back. A wall clock stepped back would re-enter seconds already counted
// and shared, or hold a tenant in one second as long as the step. So a
// step back stands time still an instant. steady then runs slower than
// the clock until it meets it again: the fleet's seconds line up again.
type steady struct {
	clock func() time.Time

	mu   sync.Mutex
	wall time.Time // the latest reading of the clock
	at   time.Time // steady's last instant
}

// now returns steady's instant. It reads the clock under its lock, so
// readings come in order. It strips the monotonic reading: a step back is
// then seen, and handled alike with every clock.
func (s *steady) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	wall := s.clock().Round(0)
	if s.at.IsZero() {
		s.wall, s.at = wall, wall
		return wall
	}
	back := s.wall.Sub(wall)
	if back > 0 && back < jitter {
		return s.at
	}
	elapsed := max(-back, 0)
	s.wall = wall
	at := s.at.Add(elapsed)
	if ahead := at.Sub(wall); ahead > 0 {
		at = at.Add(-min(ahead, elapsed/catchUp))
	}
	s.at = at
	return at
}
