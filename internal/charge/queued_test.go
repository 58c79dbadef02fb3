package charge_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// movesTable is a charges table of the test's own, its rows, and a clock
// to the millisecond, as a row keeps time.
func movesTable(t *testing.T) (string, *charge.Rows, *testkit.Clock) {
	t.Helper()
	table := testkit.TempTable(t, charge.TableInput(testkit.UniqueName("charges")))
	rows, err := charge.NewRows(testkit.Clients(t).DynamoDB, table)
	if err != nil {
		t.Fatal(err)
	}
	return table, rows, testkit.NewClock(time.Now().Truncate(time.Millisecond))
}

// TestAMoveIsMarkedQueuedOnceWhileItsMessageIsInFlight: a charge with a
// move in flight takes one mark at a time, until it ends or its own
// unmark; a charge with no move in flight takes none.
func TestAMoveIsMarkedQueuedOnceWhileItsMessageIsInFlight(t *testing.T) {
	t.Parallel()
	db := testkit.Clients(t).DynamoDB
	table, rows, clock := movesTable(t)
	q := charge.QueuedMoves{Rows: rows, Clock: clock.Now}
	put := func(id, status string) idem.Key {
		t.Helper()
		if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			charge.AttrTenant: &types.AttributeValueMemberS{Value: "acme"}, charge.AttrID: &types.AttributeValueMemberS{Value: id},
			"status": &types.AttributeValueMemberS{Value: status},
		}}); err != nil {
			t.Fatal(err)
		}
		k, err := idem.NewKey("acme", charge.TransitionOperation, id)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	mark := func(k idem.Key, until time.Time, want bool) {
		t.Helper()
		if got, err := q.MarkQueued(t.Context(), k, until); err != nil || got != want {
			t.Fatalf("MarkQueued = %t, %v; want %t", got, err, want)
		}
	}
	unmark := func(k idem.Key, until time.Time) {
		t.Helper()
		if err := q.UnmarkQueued(t.Context(), k, until); err != nil {
			t.Fatal(err)
		}
	}

	k := put("ch_capturing", charge.StatusCapturing)
	first := clock.Now().Add(time.Minute)
	mark(k, first, true)
	mark(k, clock.Now().Add(time.Hour), false)
	clock.Advance(time.Minute)
	second := clock.Now().Add(time.Minute)
	mark(k, second, true) // the first mark ended
	unmark(k, first)      // not the live mark: left alone
	mark(k, clock.Now().Add(time.Minute), false)
	unmark(k, second)
	mark(k, clock.Now().Add(time.Minute), true)

	mark(put("ch_canceling", charge.StatusCanceling), clock.Now().Add(time.Minute), true)
	for _, status := range []string{charge.StatusRequiresCapture, charge.StatusSucceeded, charge.StatusCanceled} {
		mark(put("ch_"+status, status), clock.Now().Add(time.Minute), false)
	}
	absent, err := idem.NewKey("acme", charge.TransitionOperation, "ch_absent")
	if err != nil {
		t.Fatal(err)
	}
	mark(absent, clock.Now().Add(time.Minute), false)
	if got, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		charge.AttrTenant: &types.AttributeValueMemberS{Value: "acme"}, charge.AttrID: &types.AttributeValueMemberS{Value: "ch_absent"},
	}}); err != nil || len(got.Item) != 0 {
		t.Fatalf("a mark created a row: %v, %v", got.Item, err)
	}
}

// TestAMoveOlderThanAPendingFailoverIsLeftAsItIs: a row created before
// this Region began to serve, while the old one is not drained, may have
// changed there. Its mark is neither made, renewed nor removed here.
func TestAMoveOlderThanAPendingFailoverIsLeftAsItIs(t *testing.T) {
	t.Parallel()
	db := testkit.Clients(t).DynamoDB
	table, rows, clock := movesTable(t)
	row := map[string]types.AttributeValue{
		charge.AttrTenant: &types.AttributeValueMemberS{Value: "acme"}, charge.AttrID: &types.AttributeValueMemberS{Value: "ch_old"},
		"status":     &types.AttributeValueMemberS{Value: charge.StatusCapturing},
		"created_at": &types.AttributeValueMemberS{Value: clock.Now().UTC().Format(charge.TimeLayout)},
	}
	if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: row}); err != nil {
		t.Fatal(err)
	}
	k, _ := idem.NewKey("acme", charge.TransitionOperation, "ch_old")
	until := clock.Now().Add(time.Minute)
	if ok, err := (charge.QueuedMoves{Rows: rows, Clock: clock.Now}).MarkQueued(t.Context(), k, until); !ok || err != nil {
		t.Fatalf("MarkQueued in one Region = %t, %v", ok, err)
	}
	since := clock.Now().Add(time.Millisecond)
	q := charge.QueuedMoves{Rows: rows, Clock: clock.Now, Unreplicated: func(idem.Key) time.Time { return since }}
	if err := q.RenewQueued(t.Context(), k, until, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := q.UnmarkQueued(t.Context(), k, until); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{charge.AttrTenant: row[charge.AttrTenant], charge.AttrID: row[charge.AttrID]}})
	if _, renewed := got.Item[charge.AttrQueuedRenewed]; err != nil || got.Item[charge.AttrQueuedUntil] == nil || renewed {
		t.Fatalf("the old row's mark was renewed or removed: %v, %v", got.Item, err)
	}
	clock.Advance(time.Hour) // the mark has ended
	if ok, err := q.MarkQueued(t.Context(), k, clock.Now().Add(time.Minute)); ok || err != nil {
		t.Fatalf("MarkQueued of the old row = %t, %v; want refused", ok, err)
	}
}
