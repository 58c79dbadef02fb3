package idem_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestConformance runs the conformance suite against the DynamoDB store,
// every store on one table, the business rows in that table too.
func TestConformance(t *testing.T) {
	t.Parallel()
	table := dynamotest.Table(t, idem.TableInput("conformance"))
	db := dynamotest.Client(t)
	idemtest.RunConformance(t, func(t *testing.T, optFns ...func(*idem.Options)) idemtest.Subject {
		s, err := idem.New(db, table, optFns...)
		if err != nil {
			t.Fatal(err)
		}
		return idemtest.Subject{
			Store: s,
			Row: func(id string) types.TransactWriteItem {
				return types.TransactWriteItem{Put: &types.Put{
					TableName:           aws.String(table),
					Item:                map[string]types.AttributeValue{idem.AttrPK: &types.AttributeValueMemberS{Value: "row-" + id}},
					ConditionExpression: aws.String("attribute_not_exists(pk)"),
				}}
			},
			RowExists: func(t *testing.T, id string) bool {
				out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{
					TableName:      aws.String(table),
					Key:            map[string]types.AttributeValue{idem.AttrPK: &types.AttributeValueMemberS{Value: "row-" + id}},
					ConsistentRead: aws.Bool(true),
				})
				if err != nil {
					t.Fatal(err)
				}
				return len(out.Item) > 0
			},
		}
	})
}
