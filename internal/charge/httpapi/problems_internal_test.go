package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/limit"
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

// TestARateRefusalNamesTheConcurrencyItsRetryAfterWaitsFor (review 16):
// a rate refusal's Retry-After also waits for a concurrency known over.
// docs/contract.md: a 429 has "a detail naming the limit". Naming the
// rate alone, a Retry-After of seconds reads as a rate's wait.
func TestARateRefusalNamesTheConcurrencyItsRetryAfterWaitsFor(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	lim := limit.Limits{Rate: 10, Concurrency: 4}
	for _, c := range []struct {
		refusal    limit.Refusal
		rate, conc bool
	}{
		{limit.Refusal{Limit: "rate", Limits: lim, RetryAfter: time.Second}, true, false},
		{limit.Refusal{Limit: "rate", Limits: lim, RetryAfter: 7 * time.Second, ConcurrencyToo: true}, true, true},
		{limit.Refusal{Limit: "concurrency", Limits: lim, RetryAfter: 7 * time.Second}, false, true},
	} {
		var p struct{ Detail string }
		if err := json.Unmarshal(rateLimited("POST /charges", &c.refusal, now).Body, &p); err != nil {
			t.Fatal(err)
		}
		rate, conc := strings.Contains(p.Detail, "10 requests a second"), strings.Contains(p.Detail, "4 requests at once")
		if rate != c.rate || conc != c.conc {
			t.Errorf("refusal %+v: detail %q, want the rate named %v, the concurrency %v", c.refusal, p.Detail, c.rate, c.conc)
		}
	}
}
