package lambdaidem

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestRetryAtIsNeverShortOfTheWait: a client that waits Retry-After must
// find the wait over, so a fraction of a second rounds up.
func TestRetryAtIsNeverShortOfTheWait(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for wait, want := range map[time.Duration]string{
		0: "1", 400 * time.Millisecond: "1", time.Second: "1",
		9*time.Second + 400*time.Microsecond: "10", 29*time.Second + time.Nanosecond: "30",
	} {
		p := retryAt(idem.Response{Headers: map[string]string{}}, now, now.Add(wait))
		if got := p.Headers["Retry-After"]; got != want {
			t.Errorf("a wait of %s: Retry-After %s, want %s", wait, got, want)
		}
	}
}
