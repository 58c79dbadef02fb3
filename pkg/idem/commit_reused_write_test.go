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

// TestSecondCommitWithAReusedWriteIsRefused: a caller that builds its
// writes in one reused value (the same *types.Put, its Item set for the
// next row) must still have a second Commit of other writes refused. The
// stores kept a shallow copy of the first Commit's writes, which was the
// caller's own value, so the second Commit returned nil unwritten.
func TestSecondCommitWithAReusedWriteIsRefused(t *testing.T) {
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	run := func(t *testing.T, s idem.RecoveryBackend, r rows, exists func(id string) bool) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		w := r.insert("first")
		if err := s.Commit(ctx, b.Lease, resp, w); err != nil {
			t.Fatal(err)
		}
		w.Put.Item = r.insert("second").Put.Item // the same Put, for the next row
		err = s.Commit(ctx, b.Lease, resp, w)
		t.Logf("second Commit, of row %q: %v; row there: %v", "second", err, exists("second"))
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
		s, err := idem.New(db, dynamotest.Table(t, idem.TableInput("reused")))
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
