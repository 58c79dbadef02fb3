package dynamostore_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
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
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now().Truncate(time.Millisecond))
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, dynamostore.TableInput("shared"))
	open := func(prefix string) *dynamostore.Store {
		s, err := dynamostore.New(db, table, func(o *dynamostore.Options) { o.KeyPrefix, o.Clock, o.Shards = prefix, clock.Now, 1 })
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

	swept, err := idem.Sweep(ctx, orders, idem.ReleaseLocalEffect)
	t.Logf("orders' sweep: %+v, %v", swept, err)
	rec, gerr := orders.Get(ctx, mine)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if rec.Status != idem.StatusReleased {
		t.Fatalf("orders' own stuck lease after its sweep: %s, want RELEASED (another prefix's stuck record blocked the shard)", rec.Status)
	}
}

// TestSweepPassesOverAnUnreadableStuckRecord: an item of this store's
// prefix in the stuck-lease index that does not decode (a key written by
// hand, a record of another version) is skipped and counted, and the
// shard's later stuck leases are still recovered. It made Sweep abandon
// the rest of the shard, on every run.
func TestSweepPassesOverAnUnreadableStuckRecord(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now().Truncate(time.Millisecond))
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, dynamostore.TableInput("unreadable"))
	s, err := dynamostore.New(db, table, func(o *dynamostore.Options) { o.KeyPrefix, o.Clock, o.Shards = "orders#", clock.Now, 1 })
	if err != nil {
		t.Fatal(err)
	}
	const secret = "orders#not a key: secret-order-4242"
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		dynamostore.AttrPK:             &types.AttributeValueMemberS{Value: secret},
		dynamostore.AttrLeaseShard:     &types.AttributeValueMemberN{Value: "0"},
		dynamostore.AttrLeaseExpiresAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(clock.Now().UnixMilli(), 10)},
	}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	mine := idemtest.UniqueKey(t, "acme")
	if _, err := s.Begin(ctx, mine, fpA, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)

	swept, err := idem.Sweep(ctx, s, idem.ReleaseLocalEffect)
	if rec, gerr := s.Get(ctx, mine); gerr != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("the stuck lease after the unreadable one: %+v, %v; want RELEASED (sweep %+v, %v)", rec, gerr, swept, err)
	}
	if swept.Unreadable != 1 || !errors.Is(err, idem.ErrUnreadableRecord) || strings.Contains(err.Error(), "secret-order") {
		t.Fatalf("sweep %+v, %v; want 1 unreadable record, reported by its hash, not its key", swept, err)
	}
}

// TestInFlightOutlivesRetention: a command whose outcome is unknown keeps
// its record however long it stays unknown. TTL must never turn it into a
// free key (another request would then be accepted and the first one's
// charge never recorded).
func TestInFlightOutlivesRetention(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	k := dynamotest.Key(t, "acme")
	l := dynamotest.Begin(t, e.Store, k, fpA)
	e.Clock.Advance(3 * time.Hour)
	rec, err := e.Store.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusInFlight || !rec.ExpiresAt.IsZero() {
		t.Fatalf("Get three retentions later: %+v, %v", rec, err)
	}
	if _, err := e.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request three retentions later: want mismatch, got %v", err)
	}
	taken, err := e.Store.TakeOver(ctx, k)
	if err != nil {
		t.Fatalf("TakeOver three retentions later: %v", err)
	}
	if !taken.CreatedAt.Equal(l.CreatedAt) || !taken.AttemptDeadline.Equal(l.AttemptDeadline) || taken.Attempts != 1 {
		t.Fatalf("taken-over lease %+v, first lease %+v", taken, l)
	}
	if err := e.Store.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	rec, err = e.Store.Get(ctx, k)
	if err != nil || !rec.ExpiresAt.Equal(taken.RecordExpiresAt) || !rec.ExpiresAt.After(e.Clock.Now().Add(59*time.Minute)) {
		t.Fatalf("retention after the late commit: %+v, %v (now %v)", rec, err, e.Clock.Now())
	}
}

// TestReleasedKeyAfterRetention: the released key's fingerprint is kept
// until retention ends, and then the key is free for a new command.
func TestReleasedKeyAfterRetention(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	k := dynamotest.Key(t, "acme")
	l := dynamotest.Begin(t, e.Store, k, fpA)
	if err := e.Store.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(l.RecordExpiresAt.Sub(e.Clock.Now()) - time.Second)
	if _, err := e.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("just before retention ends: want mismatch, got %v", err)
	}
	e.Clock.Advance(2 * time.Second)
	next := dynamotest.Begin(t, e.Store, k, fpB)
	if next.CreatedAt.Equal(l.CreatedAt) {
		t.Fatal("a new command after retention kept the released one's CreatedAt")
	}
}

// TestDecodeReadsTheItemsOfItsTable: an item as a Scan or a stream
// hands it over reads as the record Get returns, expired too; an item of
// another store's is unreadable and named by its key's hash alone.
func TestDecodeReadsTheItemsOfItsTable(t *testing.T) {
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.KeyPrefix = "idem#" })
	k := dynamotest.Key(t, "acme")
	l, err := e.Store.Begin(t.Context(), k, fpA, []byte(`{"amount":1500}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Store.Commit(t.Context(), l.Lease, resp); err != nil {
		t.Fatal(err)
	}
	want, err := e.Store.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.DB.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: aws.String(e.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "idem#" + k.String()}},
	})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("item: %v, %v", out, err)
	}
	e.Clock.Advance(48 * time.Hour)
	got, err := e.Store.Decode(out.Item)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != k || got.Status != idem.StatusSucceeded || string(got.Intent) != `{"amount":1500}` ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || got.Response.Status != resp.Status {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	other := e.NewStore(t, func(o *dynamostore.Options) { o.KeyPrefix = "other#" })
	_, err = other.Decode(out.Item)
	if !errors.Is(err, idem.ErrUnreadableRecord) || strings.Contains(err.Error(), k.ClientKey()) {
		t.Errorf("another store's item: %v, want ErrUnreadableRecord without the key", err)
	}
}
