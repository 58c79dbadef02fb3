package regions_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestAReadDuringAFailoverDoesNotDenyARefundMade: r1 charges, and it
// replicates. r1 refunds the charge, answers 201, and fails before the
// refund replicates. The tenant fails over to r2, r1 pending. A read of
// the charge in r2 must not say nothing was refunded: it knows its copy
// may be stale, as it does for a charge it cannot find.
func TestAReadDuringAFailoverDoesNotDenyARefundMade(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, 2, chosen)
	h := newHistory(t, t, w, &stats{})
	r1, r2 := w.regions[0], w.regions[1]
	tenant := h.tenants[0] // homed in r1
	resp, err := h.stacks[r1.name].handler.Handle(ctx, testkit.PostCharge(tenant, "order-1", `{"amount":500,"currency":"EUR","source":"tok_visa"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the charge in r1: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	var made struct{ ID string }
	_ = json.Unmarshal([]byte(resp.Body), &made)
	if err := w.drainAll(ctx); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(10 * time.Millisecond)
	resp, err = h.stacks[r1.name].handler.Handle(ctx, testkit.PostRefund(tenant, "refund-1", made.ID, `{"amount":500}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the refund in r1: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	r1.link.down.Store(true) // before the refund replicates
	route, err := w.routes.Route(ctx, r1.name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.routes.Move(ctx, route, r2.name, w.clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(regions.FenceDelay)
	read, err := h.stacks[r2.name].handler.Handle(ctx, testkit.GetCharge(tenant, made.ID))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Status         string
		AmountRefunded int64 `json:"amount_refunded"`
	}
	_ = json.Unmarshal([]byte(read.Body), &c)
	if read.StatusCode == http.StatusOK && c.AmountRefunded == 0 {
		t.Fatalf("r2, r1 pending, reads the charge r1 refunded in full as %d: status %q, amount_refunded %d: %s",
			read.StatusCode, c.Status, c.AmountRefunded, read.Body)
	}
}
