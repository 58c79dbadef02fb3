package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// batchWriter is the part of *dynamodb.Client cleanup uses.
type batchWriter interface {
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// cleanup deletes the idempotency records and charge rows of the given
// keys of tenant. The emulator's transactions slow down as its tables grow,
// so a run that leaves its items behind slows the next one down.
func cleanup(ctx context.Context, db batchWriter, idemTable, chargesTable, tenant string, keys []string) error {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	pending := map[string][]types.WriteRequest{}
	for _, k := range keys {
		key, err := idem.NewKey(tenant, charge.Operation, k)
		if err != nil {
			return err
		}
		pending[idemTable] = append(pending[idemTable], types.WriteRequest{DeleteRequest: &types.DeleteRequest{
			Key: map[string]types.AttributeValue{idem.AttrPK: s(key.String())},
		}})
		pending[chargesTable] = append(pending[chargesTable], types.WriteRequest{DeleteRequest: &types.DeleteRequest{
			Key: map[string]types.AttributeValue{charge.AttrTenant: s(tenant), charge.AttrID: s(charge.ChargeID(key))},
		}})
	}
	for {
		batch, n := map[string][]types.WriteRequest{}, 0
		for t, rs := range pending {
			take := min(25-n, len(rs))
			if take > 0 {
				batch[t], pending[t], n = rs[:take], rs[take:], n+take
			}
		}
		if n == 0 {
			return nil
		}
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: batch})
		if err != nil {
			return fmt.Errorf("clean up: %w", err)
		}
		for t, rs := range out.UnprocessedItems {
			pending[t] = append(pending[t], rs...)
		}
	}
}
