package idem_test

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestSweepPassesOverAnotherPrefixsStuckLease: KeyPrefix exists "to
// tell the records apart from the table's other items", and the scan path
// of StuckLeases filters on it (begins_with), and so must the index path: the
// sparse stuck-lease index holds every IN_FLIGHT record of the table,
// another store's (another prefix) too. Yielding such an item
// as an error ("stuck lease without the key prefix") made Sweep abandon
// the shard: a stuck lease of this store listed after the other store's
// (the index is ordered by lease end) is never recovered while the other
// one stays stuck.
func TestSweepPassesOverAnotherPrefixsStuckLease(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Now().Truncate(time.Millisecond))
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, idem.TableInput("shared"))
	open := func(prefix string) *idem.Store {
		s, err := idem.New(db, table, func(o *idem.Options) { o.KeyPrefix, o.Clock, o.Shards = prefix, clock.Now, 1 })
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	orders, invoices := open("orders#"), open("invoices#")

	// invoices' attempt died first, then orders'.
	if _, err := invoices.Begin(ctx, idemtest.UniqueKey(t, "acme"), fpA, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	mine := idemtest.UniqueKey(t, "acme")
	if _, err := orders.Begin(ctx, mine, fpA, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour) // both leases ran out long ago

	swept, err := idem.Sweep(ctx, orders, idem.ReleaseLocalEffect, func(o *idem.SweepOptions) { o.Clock = clock.Now })
	t.Logf("orders' sweep: %+v, %v", swept, err)
	rec, gerr := orders.Get(ctx, mine)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if rec.Status != idem.StatusReleased {
		t.Fatalf("orders' own stuck lease after its sweep: %s, want RELEASED (another prefix's stuck record blocked the shard)", rec.Status)
	}
}
