package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// afterRefusedPut is a DynamoDB client that runs hook once, after a
// PutItem refused by its condition: a write landing between the
// heir's read of a claim and its own write.
type afterRefusedPut struct {
	dynamostore.DynamoDBAPI
	hook func()
}

func (d *afterRefusedPut) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := d.DynamoDBAPI.PutItem(ctx, in, optFns...)
	var ccf *types.ConditionalCheckFailedException
	if hook := d.hook; hook != nil && errors.As(err, &ccf) {
		d.hook = nil
		hook()
	}
	return out, err
}

// TestAnHeirKeepsAnEndClearedSinceItReadTheClaim: b inherits a's live
// claim, which carries a release's end. Between b's read and its write,
// a's lease clears its end. The heir must write only itself: writing
// back the claim it read would restore the end, and the claim would
// end with a release that no longer stands.
func TestAnHeirKeepsAnEndClearedSinceItReadTheClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := &afterRefusedPut{DynamoDBAPI: dynamotest.Client(t)}
	ledger, err := dynamostore.NewLedger(db, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")), func(o *dynamostore.LedgerOptions) {
		o.Yields = func(_ idem.Key, region string) bool { return region == "a" }
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if _, err := ledger.Claim(ctx, k, idem.Claim{Region: "a", CreatedAt: created, Until: created.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Release(ctx, k, "a", created, created.Add(time.Hour), "tok"); err != nil {
		t.Fatal(err)
	}
	db.hook = func() {
		if err := ledger.Release(ctx, k, "a", created, time.Time{}, "tok"); err != nil {
			t.Errorf("a's clear: %v", err)
		}
	}
	later := created.Add(time.Minute)
	if _, err := ledger.Claim(ctx, k, idem.Claim{Region: "b", CreatedAt: later, Until: later.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c, err := ledger.Claim(ctx, k, idem.Claim{Region: "b", CreatedAt: later, Until: later.Add(2 * time.Hour)})
	if err != nil || c.Heir != "b" || !c.ReleasedUntil.IsZero() {
		t.Fatalf("the inherited claim: %+v, %v; want b its heir, with no release's end", c, err)
	}
}
