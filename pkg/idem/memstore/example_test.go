package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// A unit test moves the store's clock instead of sleeping: a settled key
// replays until its retention ends, and names a new command after.
func ExampleNew() {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	store := memstore.New(func(o *memstore.Options) {
		o.Clock = clock.Now
		o.Retention = time.Hour
	})
	key, _ := idem.NewKey("acme", "create-charge", "order-42")
	fp, _ := idem.FingerprintJSON([]byte(`{"amount":1500}`))

	b, _ := store.Begin(ctx, key, fp, nil)
	_ = store.Commit(ctx, b.Lease, idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)})
	fmt.Println("retained until", b.Lease.RecordExpiresAt.UTC().Format(time.TimeOnly))

	again, _ := store.Begin(ctx, key, fp, nil)
	fmt.Printf("a retry: replay %d %s\n", again.Replay.Status, again.Replay.Body)

	clock.Advance(2 * time.Hour)
	later, _ := store.Begin(ctx, key, fp, nil)
	fmt.Println("after retention: a new command:", later.Lease != nil)
	// Output:
	// retained until 04:04:35
	// a retry: replay 201 {"id":"ch_1"}
	// after retention: a new command: true
}

// A business write's condition is checked as DynamoDB checks it: the
// second order row under one id fails, the failed write is named, and
// the command is not settled.
func ExampleStore_Has() {
	ctx := context.Background()
	store := memstore.New()
	order := func(id string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String("orders"),
			Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		}}
	}
	for _, client := range []string{"k-1", "k-2"} {
		key, _ := idem.NewKey("acme", "create-order", client)
		b, _ := store.Begin(ctx, key, idem.FingerprintOf([]byte(client)), nil)
		err := store.Commit(ctx, b.Lease, idem.Response{Status: 201}, order("o-42"))
		var wce *idem.WriteConditionError
		if errors.As(err, &wce) {
			rec, _ := store.Get(ctx, key)
			fmt.Printf("%s: business write %d refused, record %s\n", client, wce.Index, rec.Status)
			continue
		}
		fmt.Printf("%s: committed: %v\n", client, err)
	}
	fmt.Println("o-42 there:", store.Has("orders", map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "o-42"}}))
	// Output:
	// k-1: committed: <nil>
	// k-2: business write 0 refused, record IN_FLIGHT
	// o-42 there: true
}
