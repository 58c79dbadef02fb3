package idem_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestExistingTableLayout: with another key attribute and a key prefix,
// records live beside a table's other items, and TableInput follows.
func TestExistingTableLayout(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	db := dynamotest.Client(t)
	opts := func(o *idem.Options) {
		o.KeyAttribute, o.KeyPrefix, o.Shards, o.Clock = "id", "idem#", 1, clock.Now
	}
	probe, err := idem.New(db, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(probe.TableInput().KeySchema[0].AttributeName); got != idem.AttrPK {
		t.Fatalf("default key attribute %q, want %q", got, idem.AttrPK)
	}
	def, err := idem.New(db, "orders", opts)
	if err != nil {
		t.Fatal(err)
	}
	table := dynamotest.Table(t, def.TableInput())
	s, err := idem.New(db, table, opts)
	if err != nil {
		t.Fatal(err)
	}
	k := key(t, "acme")
	stuck := begin(t, s, k, fpA)
	done := begin(t, s, key(t, "acme"), fpA)
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
	var listed []idem.Key
	for sl, err := range s.StuckLeases(ctx, 0, clock.Now().Add(time.Hour)) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, sl.Key)
	}
	if len(listed) != 1 || listed[0] != stuck.Key {
		t.Fatalf("stuck leases %v, want [%v]", listed, stuck.Key)
	}
	clock.Advance(time.Hour)
	if _, err := s.TakeOver(ctx, k); err != nil {
		t.Fatal(err)
	}
}
