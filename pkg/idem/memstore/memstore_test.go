package memstore_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

func TestConformance(t *testing.T) {
	idemtest.RunConformance(t, func(t *testing.T, optFns ...func(*idem.Options)) idemtest.Subject {
		s := memstore.New(optFns...)
		return idemtest.Subject{
			Store: s,
			Row: func(id string) types.TransactWriteItem {
				return types.TransactWriteItem{Put: &types.Put{
					TableName: aws.String("rows"),
					Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
				}}
			},
			RowExists: func(t *testing.T, id string) bool {
				for _, w := range s.Writes() {
					if v, ok := w.Put.Item["id"].(*types.AttributeValueMemberS); ok && v.Value == id {
						return true
					}
				}
				return false
			},
		}
	})
}
