package limit_test

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

func TestShedderShedsForAWhileAfterEachThrottle(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(start)
	s := limit.NewShedder(0, clock.Now)
	if _, shed := s.Shedding(); shed {
		t.Fatal("sheds before any throttle")
	}
	s.Throttled()
	clock.Advance(2 * time.Second)
	if left, shed := s.Shedding(); !shed || left != limit.DefaultShedFor-2*time.Second {
		t.Fatalf("2 s after a throttle: %v, %t; want %v left", left, shed, limit.DefaultShedFor-2*time.Second)
	}
	s.Throttled() // a new throttle extends it
	clock.Advance(limit.DefaultShedFor - time.Millisecond)
	if _, shed := s.Shedding(); !shed {
		t.Fatal("stopped shedding before DefaultShedFor after the last throttle")
	}
	clock.Advance(time.Millisecond)
	if _, shed := s.Shedding(); shed {
		t.Fatal("still shedding DefaultShedFor after the last throttle")
	}
}
