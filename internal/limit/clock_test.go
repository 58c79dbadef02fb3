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
	wall, elapsed := time.Unix(1_000_000, 0), time.Duration(0)
	s := &steady{clock: func() (time.Time, time.Duration) { return wall, elapsed }}
	s.now()
	wall = wall.Add(-time.Second) // a step back
	if got := s.now(); !got.Equal(wall.Add(time.Second)) {
		t.Fatalf("just after a step back of 1 s: %v, want it stood still at %v", got, wall.Add(time.Second))
	}
	wall, elapsed = wall.Add(10*time.Second), elapsed+10*time.Second
	if got, want := s.now(), wall.Add(500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("10 s after: %v, want %v: half a second caught up", got, want)
	}
	wall, elapsed = wall.Add(20*time.Second), elapsed+20*time.Second
	if got := s.now(); !got.Equal(wall) {
		t.Fatalf("30 s after: %v, want the clock's %v", got, wall)
	}
	// Read out of order: both readings 50 ms back.
	wall, elapsed = wall.Add(-50*time.Millisecond), elapsed-50*time.Millisecond
	if got := s.now(); !got.Equal(wall.Add(50 * time.Millisecond)) {
		t.Fatalf("a reading 50 ms back: %v, want the last instant", got)
	}
	wall, elapsed = wall.Add(60*time.Millisecond), elapsed+60*time.Millisecond
	if got := s.now(); !got.Equal(wall) {
		t.Fatalf("10 ms past the last reading: %v, want the clock's %v", got, wall)
	}
}

// TestSteadyMeetsTheClockWhenAStepBackIsUndone (review 8): NTP steps a
// wrong clock back 10 s, then steps it forward 10 s again, a second later.
// The clock is right again: steady, which never went back, should be at
// most where the clock is. It adds the step forward to its own time as if
// 10 s had passed, and runs 9.5 s ahead of the clock and the fleet for
// 190 s more.
func TestSteadyMeetsTheClockWhenAStepBackIsUndone(t *testing.T) {
	t.Parallel()
	wall, elapsed := time.Unix(1_000_000, 0), time.Duration(0)
	s := &steady{clock: func() (time.Time, time.Duration) { return wall, elapsed }}
	s.now()
	wall = wall.Add(-10 * time.Second) // a wrong step back
	s.now()
	wall, elapsed = wall.Add(time.Second+10*time.Second), elapsed+time.Second // a second on, undone
	if got := s.now(); got.After(wall) {
		t.Fatalf("a step back of 10 s undone: steady %v is %v ahead of the clock %v", got, got.Sub(wall), wall)
	}
}

// TestSteadyIsNotDrivenAheadByAFlappingClock (review 8): a clock that
// flaps 1 s back and forth (two time sources fighting) each 2 s. Each flap
// back adds 1 s steady runs ahead; each flap forward takes only 50 ms off.
// After 10 flaps steady is ~9.5 s ahead of both readings the clock gives:
// "what is left of the step" is at most 1 s.
func TestSteadyIsNotDrivenAheadByAFlappingClock(t *testing.T) {
	t.Parallel()
	wall, elapsed := time.Unix(1_000_000, 0), time.Duration(0)
	s := &steady{clock: func() (time.Time, time.Duration) { return wall, elapsed }}
	s.now()
	var got time.Time
	for range 10 {
		wall, elapsed = wall.Add(time.Second), elapsed+time.Second
		s.now()
		wall = wall.Add(-time.Second) // flaps back
		s.now()
		wall, elapsed = wall.Add(time.Second), elapsed+time.Second
		wall = wall.Add(time.Second) // and forward
		got = s.now()
	}
	if ahead := got.Sub(wall); ahead > time.Second {
		t.Fatalf("a clock flapping 1 s: steady runs %v ahead of it", ahead)
	}
}

// TestAStepBackUnderJitterStillCountsTheTimeElapsed (review 10): a request
// starts, runs 1 s, and NTP steps the wall clock back 1.05 s meanwhile. Its
// end reads the wall 50 ms behind its start, under jitter: taken as read
// out of order. But the monotonic reading says 1 s passed, and instant()
// is what measures handler time (Ticket.began, Done). It counts none.
func TestAStepBackUnderJitterStillCountsTheTimeElapsed(t *testing.T) {
	t.Parallel()
	wall, elapsed := time.Unix(1_000_000, 0), time.Duration(0)
	s := &steady{clock: func() (time.Time, time.Duration) { return wall, elapsed }}
	_, began := s.instant() // Admit
	wall, elapsed = wall.Add(time.Second-1050*time.Millisecond), elapsed+time.Second
	if _, ended := s.instant(); ended-began != time.Second { // Done
		t.Fatalf("a request of 1 s, the wall stepped back 1.05 s meanwhile: handler time %v, want 1s", ended-began)
	}
}

// TestASmallStepBackStretchesNoSecondPast106s: docs/operations.md says no
// second lasts more than 1.06 s. A step back of 99 ms, under jitter, must
// not stand steady still while the time elapses.
func TestASmallStepBackStretchesNoSecondPast106s(t *testing.T) {
	t.Parallel()
	wall, elapsed := time.Unix(1_000_000, 0), time.Duration(0)
	s := &steady{clock: func() (time.Time, time.Duration) { return wall, elapsed }}
	s.now()
	for elapsed < 2*time.Second {
		wall, elapsed = wall.Add(time.Millisecond), elapsed+time.Millisecond
		if elapsed == 990*time.Millisecond {
			wall = wall.Add(-99 * time.Millisecond)
		}
		if !s.now().Before(time.Unix(1_000_001, 0)) {
			break
		}
	}
	if elapsed > 1060*time.Millisecond {
		t.Fatalf("a step back of 99 ms near a second's end: the second lasted %v", elapsed)
	}
}
