package idem_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestDecodeReadsTheItemsOfItsTable: an item as a Scan or a stream
// hands it over reads as the record Get returns, expired too; an item of
// another store's is unreadable and named by its key's hash alone.
func TestDecodeReadsTheItemsOfItsTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *dynamostore.Options) { o.KeyPrefix = "idem#" })
	k := key(t, "acme")
	l, err := e.store.Begin(t.Context(), k, fpA, []byte(`{"amount":1500}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Commit(t.Context(), l.Lease, resp); err != nil {
		t.Fatal(err)
	}
	want, err := e.store.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	item := rawItem(t, e, map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "idem#" + k.String()}})
	e.clock.Advance(48 * time.Hour)
	got, err := e.store.Decode(item)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != k || got.Status != idem.StatusSucceeded || string(got.Intent) != `{"amount":1500}` ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || got.Response.Status != resp.Status {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	other, err := dynamostore.New(e.db, e.table, func(o *dynamostore.Options) { o.KeyPrefix = "other#" })
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Decode(item)
	if !errors.Is(err, idem.ErrUnreadableRecord) || strings.Contains(err.Error(), k.ClientKey()) {
		t.Errorf("another store's item: %v, want ErrUnreadableRecord without the key", err)
	}
}

func rawItem(t *testing.T, e *env, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("item: %v, %v", out, err)
	}
	return out.Item
}
