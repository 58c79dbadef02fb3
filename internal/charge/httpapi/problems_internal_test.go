package httpapi

import (
	"testing"
	"time"
)

// TestRetryAfterIsNeverShortOfTheWait: a client that waits Retry-After
// must find the wait over. A limiter's wait ends at a second's start, so
// it often is whole seconds and a fraction of a millisecond.
func TestRetryAfterIsNeverShortOfTheWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 999_600_000, time.UTC)
	for wait, want := range map[time.Duration]int{
		9*time.Second + 400*time.Microsecond: 10,
		9 * time.Second:                      9,
		time.Nanosecond:                      1,
		0:                                    1,
		-time.Second:                         1,
		29*time.Second + time.Nanosecond:     30,
		time.Hour:                            30,
	} {
		if got := retryAfter(now, now.Add(wait)); got != want {
			t.Errorf("a wait of %v: Retry-After %d, want %d", wait, got, want)
		}
	}
}
