package app_test

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// marked is a deployment's record of acme's key, IN_FLIGHT and marked
// queued until until, and the store that wrote it.
type marked struct {
	d     *testkit.Deployment
	store *dynamostore.Store
	clock *testkit.Clock
	key   idem.Key
	until time.Time
}

func newMarked(t *testing.T) *marked {
	t.Helper()
	m := &marked{d: testkit.Deploy(t), clock: testkit.NewClock(time.Now())}
	var err error
	if m.store, err = dynamostore.New(testkit.Clients(t).DynamoDB, m.d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = m.clock.Now }); err != nil {
		t.Fatal(err)
	}
	if m.key, err = idem.NewKey("acme", charge.ChargeOperation, "order-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.store.Begin(t.Context(), m.key, idem.FingerprintOf([]byte("{}")), nil); err != nil {
		t.Fatal(err)
	}
	m.until = m.clock.Now().Add(time.Hour).Truncate(time.Millisecond)
	if ok, err := m.store.MarkQueued(t.Context(), m.key, m.until); !ok || err != nil {
		t.Fatalf("MarkQueued: %v %v", ok, err)
	}
	return m
}

// stillMarked reports whether the record's mark stands: a new one is
// refused while it does. A new one taken is removed again.
func (m *marked) stillMarked(t *testing.T) bool {
	t.Helper()
	probe := m.until.Add(time.Minute)
	ok, err := m.store.MarkQueued(t.Context(), m.key, probe)
	if err == nil && ok {
		err = m.store.UnmarkQueued(t.Context(), m.key, probe)
	}
	if err != nil {
		t.Fatal(err)
	}
	return !ok
}

// deps are a function's Deps on the test's endpoints and m's clock,
// logging and measuring nothing.
func (m *marked) deps(t *testing.T) app.Deps {
	return app.Deps{Clients: testkit.Clients(t), Clock: m.clock.Now, Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}
}

// in is region's Regions, acme homed in r1, on a routes table and a
// ledger of its own.
func in(t *testing.T, region string) app.Regions {
	t.Helper()
	tables := [2]string{testkit.TempTable(t, regions.TableInput("routes")), testkit.TempTable(t, regions.TableInput("ledger"))}
	return app.Regions{Region: region, Home: "r1", Homes: map[string]string{}, RoutesTable: tables[0], LedgerTable: tables[1]}
}

// TestAReconcilerLeavesTheMarksOfTenantsItDoesNotServe: a mark is a
// write to a tenant's record. The reconcile function of a Region that does
// not serve the tenant handles its message but leaves the mark, which ends
// by itself. The serving Region's removes it.
func TestAReconcilerLeavesTheMarksOfTenantsItDoesNotServe(t *testing.T) {
	t.Parallel()
	m := newMarked(t)
	msg := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: "m1",
		Body:      fmt.Sprintf(`{"key":%q,"queued_until":%d}`, m.key.String(), m.until.UnixMilli()),
	}}}
	rg := in(t, "r2")
	for _, region := range []string{"r2", "r1"} {
		c := m.d.Reconcile()
		c.Regions = rg
		c.Regions.Region = region
		h, err := app.ReconcileHandler(c, m.deps(t))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.Handle(t.Context(), msg)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%s: Handle: %+v %v", region, resp, err)
		}
		if got, want := m.stillMarked(t), region == "r2"; got != want {
			t.Errorf("after %s's reconciler, the mark stands: %v, want %v", region, got, want)
		}
	}
}

// TestASweeperThatCannotReadItsFenceMarksNothing: a sweeper whose routes
// cannot be read does not know whom it serves. It writes no mark, and
// sends nothing; the next run finds the key again.
func TestASweeperThatCannotReadItsFenceMarksNothing(t *testing.T) {
	t.Parallel()
	m := newMarked(t)
	if err := m.store.UnmarkQueued(t.Context(), m.key, m.until); err != nil {
		t.Fatal(err)
	}
	m.clock.Advance(time.Hour) // the lease has run out: the key is stuck
	c := m.d.Sweeper()
	c.Regions = in(t, "r1")
	c.Regions.RoutesTable = testkit.UniqueName("no-such-routes")
	s, err := app.SweeperHandler(c, m.deps(t))
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := s.Run(t.Context())
	if sum.Queued != 0 {
		t.Errorf("the sweeper queued %d keys without its fence: %+v", sum.Queued, sum)
	}
	if ok, err := m.store.MarkQueued(t.Context(), m.key, m.clock.Now().Add(time.Hour)); !ok || err != nil {
		t.Errorf("the record was marked without the fence: MarkQueued %v %v", ok, err)
	}
}

// TestASweeperMarksNoRecordOfARegionNotDrained: r1 leased acme's key and
// failed over to r2, not drained. A mark is a write over an item r1 may
// have committed unreplicated, so r2's sweeper leaves it until r1 drains.
func TestASweeperMarksNoRecordOfARegionNotDrained(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	rg := in(t, "r2")
	db := testkit.Clients(t).DynamoDB
	ledger, err := dynamostore.NewLedger(db, rg.LedgerTable)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := dynamostore.New(db, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock, o.Region, o.Ledger = clock.Now, "r1", ledger })
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1")
	if _, err := r1.Begin(ctx, key, idem.FingerprintOf([]byte("{}")), nil); err != nil {
		t.Fatal(err)
	}
	// Once r1 is drained, its record is r2's to recover.
	item := map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: key.String()}}
	markedOnceDrained(t, d, rg, clock, "r1's record", d.IdempotencyTable, item, "qu")
}

// markedOnceDrained fails acme over to r2, and waits an hour: past the
// fence, r1's lease or move is stuck. It runs r2's sweeper (d's, in rg on
// clock) before r1 is drained and after. Only the second run may mark
// what, the item under key in table: its attribute mark is then set, and
// one key queued.
func markedOnceDrained(t *testing.T, d *testkit.Deployment, rg app.Regions, clock *testkit.Clock, what, table string, key map[string]types.AttributeValue, mark string) {
	t.Helper()
	drain := failOver(t, rg, clock)
	clock.Advance(time.Hour)
	c := d.Sweeper()
	c.Regions = rg
	s, err := app.SweeperHandler(c, app.Deps{Clients: testkit.Clients(t), Clock: clock.Now, Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sweep := func() (bool, int) {
		t.Helper()
		sum, err := s.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out, err := testkit.Clients(t).DynamoDB.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		_, marked := out.Item[mark]
		return marked, sum.Queued
	}
	if marked, queued := sweep(); marked || queued != 0 {
		t.Errorf("r2 marked %s (%t) before r1 was drained: %d keys queued", what, marked, queued)
	}
	drain()
	clock.Advance(regions.DefaultLease)
	if marked, queued := sweep(); !marked || queued != 1 {
		t.Errorf("r2 did not mark %s once r1 was drained (%t, %d queued)", what, marked, queued)
	}
}

// failOver moves acme's home r1 to r2, on rg's routes, at clock's now.
// drain marks r1 drained.
func failOver(t *testing.T, rg app.Regions, clock *testkit.Clock) (drain func()) {
	t.Helper()
	routes, err := regions.NewRoutes(testkit.Clients(t).DynamoDB, rg.RoutesTable)
	if err != nil {
		t.Fatal(err)
	}
	route, _ := routes.Route(t.Context(), "r1")
	if _, err := routes.Move(t.Context(), route, "r2", clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		route, _ := routes.Route(t.Context(), "r1")
		if _, err := routes.Drained(t.Context(), route, "r1"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestASweeperMarksNoChargeRowOfARegionNotDrained: r1 began acme's
// capture, then failed over to r2, not drained. The row may have changed
// in r1 since. A mark over it could be lost to last writer wins, so r2's
// sweeper leaves it until r1 drains.
func TestASweeperMarksNoChargeRowOfARegionNotDrained(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	rg := in(t, "r2")
	db := testkit.Clients(t).DynamoDB
	row := map[string]types.AttributeValue{
		charge.AttrTenant: &types.AttributeValueMemberS{Value: "acme"}, charge.AttrID: &types.AttributeValueMemberS{Value: "ch_1"},
	}
	item := map[string]types.AttributeValue{
		"status":                   &types.AttributeValueMemberS{Value: charge.StatusCapturing},
		"created_at":               &types.AttributeValueMemberS{Value: clock.Now().UTC().Format(charge.TimeLayout)},
		charge.AttrTransitionShard: &types.AttributeValueMemberS{Value: "0"},
		charge.AttrAttemptDeadline: &types.AttributeValueMemberN{Value: fmt.Sprint(clock.Now().UnixMilli())},
	}
	maps.Copy(item, row)
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.ChargesTable), Item: item}); err != nil {
		t.Fatal(err)
	}
	markedOnceDrained(t, d, rg, clock, "r1's row", d.ChargesTable, row, charge.AttrQueuedUntil)
}
