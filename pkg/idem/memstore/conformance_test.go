// The conformance test as a store's own tests run it (idemtest), here
// memstore's: copy this file beside a store of your own and build that
// store in newSubject. For the DynamoDB store, Row writes to a real table
// and RowExists reads it back with GetItem.

package memstore_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// newSubject gives each subtest a store of its own, built with the
// suite's options (its clock, its lease), so
// subtests run in parallel and move time apart. Row and RowExists let the
// suite check that Commit writes a business row with the record, and that
// a lease taken over writes none: the row's condition makes a second
// write of it fail, as it would on DynamoDB.
func newSubject(t *testing.T, o idemtest.Options) idemtest.Subject {
	s := memstore.New(func(m *memstore.Options) {
		m.Clock, m.Retention, m.ReleaseRetention, m.DefaultLease, m.Shards = o.Clock, o.Retention, o.ReleaseRetention, o.DefaultLease, o.Shards
	})
	return idemtest.Subject{
		Store: s,
		Row: func(id string) types.TransactWriteItem {
			return types.TransactWriteItem{Put: &types.Put{
				TableName:           aws.String("rows"),
				Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
				ConditionExpression: aws.String("attribute_not_exists(id)"),
			}}
		},
		RowExists: func(t *testing.T, id string) bool {
			return s.Has("rows", map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}})
		},
	}
}

// TestConformance runs every check of the contract on the store: run it
// with the race detector (go test -race) too, since one check claims a key
// from 32 goroutines at once.
func TestConformance(t *testing.T) {
	idemtest.RunConformance(t, newSubject)
}

// TestRegionConformance runs the suite of stores in several Regions: a
// Store of its own per Region, Replica for records replicated at once.
func TestRegionConformance(t *testing.T) {
	idemtest.RunRegionConformance(t,
		func(_ *testing.T, yields func(idem.Key, string) bool) idem.Ledger { return memstore.NewLedger(yields) },
		func(_ *testing.T, o idemtest.Options, ledger idem.Ledger) idemtest.Regions {
			opts := func(region string) func(*memstore.Options) {
				return func(m *memstore.Options) {
					m.Clock, m.Retention, m.DefaultLease, m.Region, m.Ledger = o.Clock, o.Retention, o.DefaultLease, region, ledger
				}
			}
			return idemtest.Regions{
				Store:   func(region string) idem.Backend { return memstore.New(opts(region)) },
				Replica: func(of idem.Backend, region string) idem.Backend { return of.(*memstore.Store).Replica(region) },
			}
		})
}
