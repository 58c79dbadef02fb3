package idem_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestSecondCommitWithOtherWritesIsRefused: "A second Commit with other
// arguments gets ErrLeaseLost", and the business writes are arguments. The
// stores recognised their own commit by token, status and response alone,
// so a second Commit of the lease with the same response and other writes
// returned nil though none of its writes was applied.
func TestSecondCommitWithOtherWritesIsRefused(t *testing.T) {
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	run := func(t *testing.T, s idem.RecoveryBackend, r rows, exists func(id string) bool) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, b.Lease, resp, r.insert("first")); err != nil {
			t.Fatal(err)
		}
		err = s.Commit(ctx, b.Lease, resp, r.insert("second"))
		t.Logf("second Commit with other writes: %v; its row there: %v", err, exists("second"))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("a second Commit with other writes: %v, want ErrLeaseLost (its row there: %v)", err, exists("second"))
		}
	}
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		s, r := memstore.New(), rows{table: "rows"}
		s.DeclareKey(r.table, "id")
		run(t, s, r, func(id string) bool { return s.Has(r.table, r.key(id)) })
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		db := dynamotest.Client(t)
		s, err := idem.New(db, dynamotest.Table(t, idem.TableInput("commit2")))
		if err != nil {
			t.Fatal(err)
		}
		r := rows{table: dynamotest.Table(t, &dynamodb.CreateTableInput{
			TableName:            aws.String("rows"),
			BillingMode:          types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		})}
		run(t, s, r, func(id string) bool {
			out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: r.key(id), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			return len(out.Item) > 0
		})
	})
}
