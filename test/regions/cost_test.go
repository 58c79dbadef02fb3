package regions_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestWhatAFirstChargeCosts measures a first charge in one Region (today's
// code: no routes, no ledger) and in the chosen design, on the emulator:
// the DynamoDB calls it makes, and its median time, with the tables of
// every Region answering at once or after a round trip to another Region.
// One Region must make exactly today's calls: a PutItem and a
// TransactWriteItems. docs/regions.md publishes the figures.
func TestWhatAFirstChargeCosts(t *testing.T) {
	const n = 40
	for _, c := range []struct {
		name  string
		d     design
		delay time.Duration
		want  map[string]float64 // calls per charge, by operation and table
	}{
		{"one Region", naive, 0, map[string]float64{"PutItem own": 1, "TransactWriteItems own": 1}},
		// The tenant's first request ever reads and writes its home; the
		// route is read once in these 40 charges' lease.
		{"two Regions", chosen, 0, map[string]float64{"GetItem own": 1, "PutItem strong": (n + 1.0) / n, "PutItem own": 1, "TransactWriteItems own": 1, "GetItem strong": 2.0 / n}},
		{"two Regions, 20 ms to the strong tables", chosen, 20 * time.Millisecond, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, 2, c.d)
			h := newHistory(t, t, w, &stats{})
			r := w.regions[0]
			tenant := h.tenants[0] // homed in r
			strongDelay.Store(int64(c.delay))
			defer strongDelay.Store(0)
			r.link.mu.Lock()
			r.link.calls = nil
			r.link.mu.Unlock()
			var took []time.Duration
			for i := range n {
				w.clock.Advance(10 * time.Millisecond)
				key, _ := idem.NewKey(tenant, charge.ChargeOperation, fmt.Sprintf("first-%d", i))
				start := time.Now()
				resp, err := h.stacks[r.name].handler.Handle(t.Context(), testkit.PostCharge(tenant, key.ClientKey(), `{"amount":500,"currency":"EUR","source":"tok_visa"}`))
				took = append(took, time.Since(start))
				if err != nil || resp.StatusCode != http.StatusCreated {
					t.Fatalf("first charge %d: %d %s, %v", i, resp.StatusCode, resp.Body, err)
				}
			}
			r.link.mu.Lock()
			calls := maps.Clone(r.link.calls)
			r.link.mu.Unlock()
			var per []string
			for _, k := range slices.Sorted(maps.Keys(calls)) {
				per = append(per, fmt.Sprintf("%s %.3g", k, float64(calls[k])/n))
				if c.want != nil && float64(calls[k])/n != c.want[k] {
					t.Errorf("%s: %.3g a charge, want %.3g", k, float64(calls[k])/n, c.want[k])
				}
			}
			for k := range c.want {
				if calls[k] == 0 {
					t.Errorf("%s: none, want %.3g a charge", k, c.want[k])
				}
			}
			slices.Sort(took)
			t.Logf("%s: %d first charges; DynamoDB calls a charge: %s; p50 %s, p90 %s",
				c.name, n, strings.Join(per, ", "), took[n/2].Round(10*time.Microsecond), took[n*9/10].Round(10*time.Microsecond))
		})
	}
}
