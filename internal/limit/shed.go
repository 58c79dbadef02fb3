package limit

import (
	"sync"
	"time"
)

// DefaultShedFor is how long a Shedder sheds after the store was last
// throttled.
const DefaultShedFor = 5 * time.Second

// Shedder keeps the store's capacity for the requests that cannot wait.
// A throttled store is the sign the service is near its capacity. For a
// while after one, the requests that can wait are refused before they use
// any. It is safe for concurrent use.
type Shedder struct {
	clock   func() time.Time
	shedFor time.Duration

	mu    sync.Mutex
	until time.Time
}

// NewShedder returns a Shedder that sheds for shedFor after each throttle,
// by clock. Zero or less is DefaultShedFor; a nil clock, time.Now.
func NewShedder(shedFor time.Duration, clock func() time.Time) *Shedder {
	if shedFor <= 0 {
		shedFor = DefaultShedFor
	}
	if clock == nil {
		clock = time.Now
	}
	return &Shedder{clock: clock, shedFor: shedFor}
}

// Throttled records that the store refused a request for want of
// capacity.
func (s *Shedder) Throttled() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until = s.clock().Add(s.shedFor)
}

// Shedding reports whether the requests that can wait are shed now, and
// for how much longer.
func (s *Shedder) Shedding() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.until.Sub(s.clock())
	return left, left > 0
}
