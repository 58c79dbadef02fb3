package regions_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestAFailedRegionsChargeIsNotMadeAgain is the shortest history that
// tells the designs apart. A charge is made in its tenant's Region, which
// fails before the charge's writes replicate. The client retries in the
// other Region. The naive design claims the key afresh there, under a
// new reference, and charges the card a second time. The chosen design
// finds the first Region's claim in the ledger: it answers outcome-pending,
// and once the first Region is back and drained, the retry gets the first
// answer.
func TestAFailedRegionsChargeIsNotMadeAgain(t *testing.T) {
	for _, d := range []design{naive, chosen} {
		t.Run(string(d), func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, 2, d)
			h := newHistory(t, t, w, &stats{})
			r1, r2 := w.regions[0], w.regions[1]
			tenant := h.tenants[0] // homed in r1
			key, _ := idem.NewKey(tenant, charge.ChargeOperation, "order-1")
			body := `{"amount":500,"currency":"EUR","source":"tok_visa"}`
			send := func(r *region) (int, string) {
				t.Helper()
				w.clock.Advance(10 * time.Millisecond) // no two claims in one millisecond
				resp, err := h.stacks[r.name].handler.Handle(ctx, testkit.PostCharge(tenant, key.ClientKey(), body))
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, resp.Body
			}
			status, first := send(r1)
			if status != http.StatusCreated {
				t.Fatalf("the first charge: %d %s", status, first)
			}
			r1.link.down.Store(true) // before anything replicated
			if d == chosen {
				route, err := w.routes.Route(ctx, r1.name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.routes.Move(ctx, route, r2.name, w.clock.Now(), regions.FenceDelay); err != nil {
					t.Fatal(err)
				}
				w.clock.Advance(regions.FenceDelay)
			}
			status, again := send(r2)
			in := &intent{key: key, kind: "charge"}
			made := h.effects(in, w.sim.Ledger())
			if d == naive {
				if status != http.StatusCreated || len(made) != 2 {
					t.Fatalf("naive: the retry in r2 got %d %s, the provider acted under %v; want a second charge", status, again, made)
				}
				t.Logf("naive: the retry in r2 was charged again: references %v", made)
				return
			}
			if status != http.StatusServiceUnavailable || slug(again) != httpapi.ProblemOutcomePending.Slug || len(made) != 1 {
				t.Fatalf("chosen: the retry in r2 got %d %s, the provider acted under %v; want outcome-pending and one charge", status, again, made)
			}
			r1.link.down.Store(false)
			if err := w.drainAll(ctx); err != nil {
				t.Fatal(err)
			}
			h.drainRoutes(t)
			if status, replay := send(r2); status != http.StatusCreated || replay != first {
				t.Fatalf("chosen: the retry once r1 is drained got %d %s, want the first answer %s", status, replay, first)
			}
		})
	}
}
