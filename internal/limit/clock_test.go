package limit

import (
	"testing"
	"time"
)

// TestSteadyMeetsTheClockAgainAfterAStepBack: after a step back, steady
// stands still an instant, then runs a twentieth slow until it meets the
// clock. So its seconds line up with the fleet's again.
func TestSteadyMeetsTheClockAgainAfterAStepBack(t *testing.T) {
	t.Parallel()
	wall := time.Unix(1_000_000, 0)
	s := &steady{clock: func() time.Time { return wall }}
	s.now()
	wall = wall.Add(-time.Second) // a step back
	if got := s.now(); !got.Equal(wall.Add(time.Second)) {
		t.Fatalf("just after a step back of 1 s: %v, want it stood still at %v", got, wall.Add(time.Second))
	}
	wall = wall.Add(10 * time.Second)
	if got, want := s.now(), wall.Add(500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("10 s after: %v, want %v: half a second caught up", got, want)
	}
	wall = wall.Add(20 * time.Second)
	if got := s.now(); !got.Equal(wall) {
		t.Fatalf("30 s after: %v, want the clock's %v", got, wall)
	}
	wall = wall.Add(-50 * time.Millisecond) // read out of order
	if got := s.now(); !got.Equal(wall.Add(50 * time.Millisecond)) {
		t.Fatalf("a reading 50 ms back: %v, want the last instant", got)
	}
	wall = wall.Add(60 * time.Millisecond)
	if got := s.now(); !got.Equal(wall) {
		t.Fatalf("10 ms past the last reading: %v, want the clock's %v", got, wall)
	}
}
