package dynamostore_test

import (
	"fmt"
	"maps"
	"slices"
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

// TestExistingTableLayout: with another key attribute and a key prefix,
// records live beside a table's other items, and TableInput follows.
func TestExistingTableLayout(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	db := dynamotest.Client(t)
	opts := func(o *dynamostore.Options) {
		o.KeyAttribute, o.KeyPrefix, o.Shards, o.Clock = "id", "idem#", 1, clock.Now
	}
	probe, err := dynamostore.New(db, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(probe.TableInput().KeySchema[0].AttributeName); got != dynamostore.AttrPK {
		t.Fatalf("default key attribute %q, want %q", got, dynamostore.AttrPK)
	}
	def, err := dynamostore.New(db, "orders", opts)
	if err != nil {
		t.Fatal(err)
	}
	table := dynamotest.Table(t, def.TableInput())
	s, err := dynamostore.New(db, table, opts)
	if err != nil {
		t.Fatal(err)
	}
	k := dynamotest.Key(t, "acme")
	stuck := dynamotest.Begin(t, s, k, fpA)
	done := dynamotest.Begin(t, s, dynamotest.Key(t, "acme"), fpA)
	if err := s.Commit(ctx, done, resp); err != nil {
		t.Fatal(err)
	}
	wantReplay(t, s, done.Key, resp)
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "idem#" + done.Key.String()}},
	})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("the record under id = idem#<key>: %v, %v", out, err)
	}
	if listed := stuckKeys(t, s, clock.Now().Add(time.Hour)); len(listed) != 1 || listed[0] != stuck.Key {
		t.Fatalf("stuck leases %v, want [%v]", listed, stuck.Key)
	}
	clock.Advance(time.Hour)
	if _, err := s.TakeOver(ctx, k); err != nil {
		t.Fatal(err)
	}
}

// itemNames returns the sorted attribute names of the item under key.
func itemNames(t *testing.T, db *dynamodb.Client, table string, key map[string]types.AttributeValue) []string {
	ctx := t.Context()
	t.Helper()
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(out.Item))
}

// TestSortKeyLayouts: in a table with a sort key, the record's key goes in
// the partition key (the sort key a constant) or, under a static partition
// key, in the sort key; the TTL attribute is the one named; the records'
// other attributes are doc.go's, and the stuck-lease index, named as the
// options say, lists the in-flight ones.
func TestSortKeyLayouts(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	cases := []struct {
		name   string
		opts   func(*dynamostore.Options)
		pk, sk string
		// itemKey is the primary key the record of k must have.
		itemKey func(k idem.Key) map[string]types.AttributeValue
	}{
		{"key in the partition key", func(o *dynamostore.Options) {
			o.KeyAttribute, o.SortKeyAttribute, o.TTLAttribute, o.StuckLeaseIndex = "id", "kind", "ttl", "in-flight"
		}, "id", "kind", func(k idem.Key) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"id": s(k.String()), "kind": s(dynamostore.DefaultSortKeyValue)}
		}},
		{"key in the sort key", func(o *dynamostore.Options) {
			o.KeyAttribute, o.SortKeyAttribute, o.PartitionKeyValue, o.KeyPrefix = "PK", "SK", "IDEMPOTENCY", "cmd#"
			o.TTLAttribute, o.StuckLeaseIndex = "ttl", "in-flight"
		}, "PK", "SK", func(k idem.Key) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"PK": s("IDEMPOTENCY"), "SK": s("cmd#" + k.String())}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clock := idemtest.NewClock(time.Now())
			db := dynamotest.Client(t)
			opts := func(o *dynamostore.Options) { c.opts(o); o.Shards, o.Clock = 1, clock.Now }
			table := dynamotest.Table(t, newStore(t, db, "layout", opts).TableInput())
			st := newStore(t, db, table, opts)
			stuck := dynamotest.Begin(t, st, dynamotest.Key(t, "acme"), fpA)
			done := dynamotest.Begin(t, st, dynamotest.Key(t, "acme"), fpA)
			if err := st.Commit(ctx, done, resp); err != nil {
				t.Fatal(err)
			}
			wantReplay(t, st, done.Key, resp)
			with := func(names ...string) []string { return slices.Sorted(slices.Values(append(names, c.pk, c.sk))) }
			if got, want := itemNames(t, db, table, c.itemKey(stuck.Key)), with("st", "fp", "ct", "tok", "in", "lease_shard", "lease_expires_at", "ad"); !slices.Equal(got, want) {
				t.Errorf("in-flight record's attributes %v, want %v", got, want)
			}
			if got, want := itemNames(t, db, table, c.itemKey(done.Key)), with("st", "fp", "ct", "tok", "in", "ttl", "rs", "rh", "rb"); !slices.Equal(got, want) {
				t.Errorf("settled record's attributes %v, want %v", got, want)
			}
			if listed := stuckKeys(t, st, clock.Now().Add(time.Hour)); len(listed) != 1 || listed[0] != stuck.Key {
				t.Fatalf("stuck leases %v, want [%v]", listed, stuck.Key)
			}
			clock.Advance(time.Hour)
			if _, err := st.TakeOver(ctx, stuck.Key); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTableInputFollowsTheOptions: the table a store describes has the
// key schema, the index and the TTL attribute its options name, and no
// index when StuckLeases scans.
func TestTableInputFollowsTheOptions(t *testing.T) {
	t.Parallel()
	db := dynamodb.New(dynamodb.Options{}) // never called
	describe := func(in *dynamodb.CreateTableInput) string {
		var b strings.Builder
		for _, k := range in.KeySchema {
			fmt.Fprintf(&b, "%s %s, ", aws.ToString(k.AttributeName), k.KeyType)
		}
		for _, d := range in.AttributeDefinitions {
			fmt.Fprintf(&b, "%s:%s ", aws.ToString(d.AttributeName), d.AttributeType)
		}
		for _, g := range in.GlobalSecondaryIndexes {
			fmt.Fprintf(&b, "index %s", aws.ToString(g.IndexName))
		}
		return b.String()
	}
	cases := []struct {
		name      string
		opts      func(*dynamostore.Options)
		want, ttl string
	}{
		{"defaults", func(*dynamostore.Options) {}, "pk HASH, pk:S lease_shard:N lease_expires_at:N index stuck-leases", dynamostore.AttrExpiresAt},
		{"sort key", func(o *dynamostore.Options) {
			o.KeyAttribute, o.SortKeyAttribute, o.PartitionKeyValue, o.TTLAttribute, o.StuckLeaseIndex = "PK", "SK", "IDEMPOTENCY", "ttl", "gsi1"
		}, "PK HASH, SK RANGE, PK:S SK:S lease_shard:N lease_expires_at:N index gsi1", "ttl"},
		{"no index", func(o *dynamostore.Options) { o.ScanStuckLeases = true }, "pk HASH, pk:S ", dynamostore.AttrExpiresAt},
		{"an index of the table's", func(o *dynamostore.Options) {
			o.StuckLeaseIndex, o.LeaseShardAttribute, o.LeaseExpiresAtAttribute = "GSI2", "GSI2PK", "GSI2SK"
		}, "pk HASH, pk:S GSI2PK:N GSI2SK:N index GSI2", dynamostore.AttrExpiresAt},
	}
	for _, c := range cases {
		st := newStore(t, db, "t", c.opts)
		if got := describe(st.TableInput()); got != c.want {
			t.Errorf("%s: TableInput %q, want %q", c.name, got, c.want)
		}
		if got := aws.ToString(st.TTLInput().TimeToLiveSpecification.AttributeName); got != c.ttl {
			t.Errorf("%s: TTLInput on %q, want %q", c.name, got, c.ttl)
		}
	}
	if got, want := describe(dynamostore.TableInput("t")), describe(newStore(t, db, "t").TableInput()); got != want {
		t.Errorf("dynamostore.TableInput %q, a default store's %q", got, want)
	}
}

func newStore(t *testing.T, db dynamostore.DynamoDBAPI, table string, optFns ...func(*dynamostore.Options)) *dynamostore.Store {
	t.Helper()
	s, err := dynamostore.New(db, table, optFns...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLayoutOptionsRefused: options that contradict each other, or name
// an attribute the record writes, are refused by New, not found out at the
// first write.
func TestLayoutOptionsRefused(t *testing.T) {
	t.Parallel()
	db := dynamodb.New(dynamodb.Options{}) // never called
	for name, opts := range map[string]func(*dynamostore.Options){
		"a static partition key without a sort key": func(o *dynamostore.Options) { o.PartitionKeyValue = "IDEMPOTENCY" },
		"a sort key value without a sort key":       func(o *dynamostore.Options) { o.SortKeyValue = "idem" },
		"both key values": func(o *dynamostore.Options) {
			o.SortKeyAttribute, o.PartitionKeyValue, o.SortKeyValue = "sk", "IDEMPOTENCY", "idem"
		},
		"an index and a scan":               func(o *dynamostore.Options) { o.StuckLeaseIndex, o.ScanStuckLeases = "gsi1", true },
		"the sort key is the partition key": func(o *dynamostore.Options) { o.SortKeyAttribute = dynamostore.AttrPK },
		"a key named as a record attribute": func(o *dynamostore.Options) { o.SortKeyAttribute = "st" },
		"the TTL named as the index's key":  func(o *dynamostore.Options) { o.TTLAttribute = dynamostore.AttrLeaseExpiresAt },
		"the index's keys named alike":      func(o *dynamostore.Options) { o.LeaseShardAttribute = dynamostore.AttrLeaseExpiresAt },
		"an index key named as the key":     func(o *dynamostore.Options) { o.LeaseExpiresAtAttribute = dynamostore.AttrPK },
		"an index key named as a record's":  func(o *dynamostore.Options) { o.LeaseShardAttribute = "attempts" },
		// A store with "idem#" would read a record of "idem#v2#" as its
		// own (the key v2#acme#op#k), list it stuck and resolve it.
		"a prefix with a # inside":   func(o *dynamostore.Options) { o.KeyPrefix = "idem#v2#" },
		"a prefix without a # after": func(o *dynamostore.Options) { o.KeyPrefix = "idem" },
		"a prefix with a space":      func(o *dynamostore.Options) { o.KeyPrefix = "my idem#" },
	} {
		if _, err := dynamostore.New(db, "t", opts); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestStuckLeasesWithoutTheIndex: on a table without the stuck-lease
// index, StuckLeases fails saying which index it queried, and with
// ScanStuckLeases it finds the stuck leases among the table's other items.
func TestStuckLeasesWithoutTheIndex(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	db := dynamotest.Client(t)
	opts := func(o *dynamostore.Options) {
		o.KeyAttribute, o.SortKeyAttribute, o.KeyPrefix, o.Shards, o.Clock = "id", "kind", "idem#", 3, clock.Now
	}
	scan := func(o *dynamostore.Options) { o.ScanStuckLeases = true }
	table := dynamotest.Table(t, newStore(t, db, "plain", opts, scan).TableInput())
	var err error
	for _, e := range newStore(t, db, table, opts).StuckLeases(ctx, 0, clock.Now()) {
		err = e
	}
	if err == nil || !strings.Contains(err.Error(), dynamostore.IndexStuckLeases) {
		t.Fatalf("StuckLeases on a table without the index: %v, want an error naming %s", err, dynamostore.IndexStuckLeases)
	}
	s := newStore(t, db, table, opts, scan)
	// The table's other items, one of them with a number where a lease would be.
	for _, item := range []map[string]types.AttributeValue{
		{"id": &types.AttributeValueMemberS{Value: "order-1"}, "kind": &types.AttributeValueMemberS{Value: dynamostore.DefaultSortKeyValue}, dynamostore.AttrLeaseExpiresAt: &types.AttributeValueMemberN{Value: "1"}},
		{"id": &types.AttributeValueMemberS{Value: "idem#x"}, "kind": &types.AttributeValueMemberS{Value: "audit"}, dynamostore.AttrLeaseExpiresAt: &types.AttributeValueMemberN{Value: "1"}},
	} {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	stuck := map[idem.Key]bool{}
	for range 6 {
		l := dynamotest.Begin(t, s, dynamotest.Key(t, "acme"), fpA)
		stuck[l.Key] = true
		clock.Advance(time.Millisecond)
	}
	done := dynamotest.Begin(t, s, dynamotest.Key(t, "acme"), fpA)
	if err := s.Commit(ctx, done, resp); err != nil {
		t.Fatal(err)
	}
	listed := map[idem.Key]bool{}
	for shard := range s.Shards() {
		var last time.Time
		for sl, err := range s.StuckLeases(ctx, shard, clock.Now().Add(time.Hour)) {
			if err != nil {
				t.Fatal(err)
			}
			if sl.LeaseExpiresAt.Before(last) {
				t.Errorf("shard %d not oldest first", shard)
			}
			last, listed[sl.Key] = sl.LeaseExpiresAt, true
		}
	}
	if !maps.Equal(listed, stuck) {
		t.Fatalf("stuck leases %v, want %v", listed, stuck)
	}
}

// stuckKeys lists the keys of shard 0's leases that ran out before before.
func stuckKeys(t *testing.T, s *dynamostore.Store, before time.Time) []idem.Key {
	ctx := t.Context()
	t.Helper()
	var keys []idem.Key
	for sl, err := range s.StuckLeases(ctx, 0, before) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, sl.Key)
	}
	return keys
}

// TestIndexInputAddsTheIndexToAnExistingTable: a table made without the
// stuck-lease index gets it from IndexInput, under the names the options
// give, and the commands already in flight are found there.
func TestIndexInputAddsTheIndexToAnExistingTable(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	db := dynamotest.Client(t)
	opts := func(o *dynamostore.Options) {
		o.KeyAttribute, o.SortKeyAttribute, o.KeyPrefix, o.Shards, o.Clock = "PK", "SK", "idem#", 1, clock.Now
		o.StuckLeaseIndex, o.LeaseShardAttribute, o.LeaseExpiresAtAttribute = "GSI2", "GSI2PK", "GSI2SK"
	}
	noIndex := func(o *dynamostore.Options) {
		o.StuckLeaseIndex, o.ScanStuckLeases = "", true
	}
	table := dynamotest.Table(t, newStore(t, db, "single", opts, noIndex).TableInput())
	s := newStore(t, db, table, opts)
	stuck := dynamotest.Begin(t, s, dynamotest.Key(t, "acme"), fpA) // in flight before the index exists
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: "idem#" + stuck.Key.String()}, "SK": &types.AttributeValueMemberS{Value: dynamostore.DefaultSortKeyValue},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"GSI2PK", "GSI2SK"} {
		if _, ok := out.Item[name].(*types.AttributeValueMemberN); !ok {
			t.Fatalf("the record has no number %s: %v", name, out.Item)
		}
	}
	in, err := s.IndexInput()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateTable(ctx, in); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if keys := stuckKeys(t, s, clock.Now()); len(keys) != 1 || keys[0] != stuck.Key {
		t.Fatalf("stuck leases %v, want %v", keys, stuck.Key)
	}
	if _, err := newStore(t, db, table, opts, noIndex).IndexInput(); err == nil {
		t.Fatal("IndexInput of a store that scans: no error")
	}
}
