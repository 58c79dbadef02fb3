package dynamostore_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestConformance runs the conformance suite against the DynamoDB store
// in each table layout: every store of a layout on one table of its own,
// the business rows in that table too.
func TestConformance(t *testing.T) {
	t.Parallel()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	layouts := []struct {
		name string
		opts func(*dynamostore.Options)
		row  func(id string) map[string]types.AttributeValue // a business row's primary key
	}{
		{"partition key", func(*dynamostore.Options) {}, func(id string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{dynamostore.AttrPK: s("row-" + id)}
		}},
		{"static partition key, key in the sort key", func(o *dynamostore.Options) {
			o.KeyAttribute, o.SortKeyAttribute, o.PartitionKeyValue = "PK", "SK", "IDEMPOTENCY"
			o.TTLAttribute, o.StuckLeaseIndex = "ttl", "sweep"
		}, func(id string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"PK": s("rows"), "SK": s(id)}
		}},
		{"key in the partition key, a constant sort key, no index", func(o *dynamostore.Options) {
			o.KeyAttribute, o.SortKeyAttribute, o.KeyPrefix, o.ScanStuckLeases = "id", "kind", "idem#", true
		}, func(id string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"id": s("row-" + id), "kind": s("row")}
		}},
	}
	db := dynamotest.Client(t)
	for _, lt := range layouts {
		t.Run(lt.name, func(t *testing.T) {
			t.Parallel()
			probe, err := dynamostore.New(db, "conformance", lt.opts)
			if err != nil {
				t.Fatal(err)
			}
			def := probe.TableInput()
			table := dynamotest.Table(t, def)
			absent := map[string]string{"#pk": aws.ToString(def.KeySchema[0].AttributeName)}
			idemtest.RunConformance(t, func(t *testing.T, o idemtest.Options) idemtest.Subject {
				st, err := dynamostore.New(db, table, lt.opts, func(d *dynamostore.Options) {
					d.Clock, d.Retention, d.ReleaseRetention, d.DefaultLease, d.Shards = o.Clock, o.Retention, o.ReleaseRetention, o.DefaultLease, o.Shards
				})
				if err != nil {
					t.Fatal(err)
				}
				return idemtest.Subject{
					Store: st,
					Row: func(id string) types.TransactWriteItem {
						return types.TransactWriteItem{Put: &types.Put{
							TableName:                aws.String(table),
							Item:                     lt.row(id),
							ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
							ExpressionAttributeNames: absent,
						}}
					},
					RowExists: func(t *testing.T, id string) bool {
						out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{
							TableName: aws.String(table), Key: lt.row(id), ConsistentRead: aws.Bool(true),
						})
						if err != nil {
							t.Fatal(err)
						}
						return len(out.Item) > 0
					},
				}
			})
		})
	}
}

// TestRegionConformance runs the suite of stores in several Regions on
// DynamoDB: a table per Region (nothing replicates between them), a store
// of another Region on the same table for records replicated at once, and
// a ledger table.
func TestRegionConformance(t *testing.T) {
	t.Parallel()
	db := dynamotest.Client(t)
	idemtest.RunRegionConformance(t,
		func(t *testing.T, yields func(idem.Key, string) bool) idem.Ledger {
			l, err := dynamostore.NewLedger(db, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")), func(o *dynamostore.LedgerOptions) { o.Yields = yields })
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		func(t *testing.T, o idemtest.Options, ledger idem.Ledger) idemtest.Regions {
			tables := map[idem.Backend]string{}
			store := func(table, region string) idem.Backend {
				st, err := dynamostore.New(db, table, func(d *dynamostore.Options) {
					d.Clock, d.Retention, d.DefaultLease, d.Region, d.Ledger = o.Clock, o.Retention, o.DefaultLease, region, ledger
				})
				if err != nil {
					t.Fatal(err)
				}
				tables[st] = table
				return st
			}
			return idemtest.Regions{
				Store: func(region string) idem.Backend {
					return store(dynamotest.Table(t, dynamostore.TableInput("regions")), region)
				},
				Replica: func(of idem.Backend, region string) idem.Backend { return store(tables[of], region) },
			}
		})
}
