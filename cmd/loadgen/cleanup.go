package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// batchWriter is the part of *dynamodb.Client cleanup uses.
type batchWriter interface {
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// references returns, for each key of tenant that was sent, the provider
// reference and charge id its command derived. Both derive from its
// record's creation. A key that was not sent or has no record gets "".
func references(ctx context.Context, db dynamostore.DynamoDBAPI, idemTable, tenant string, keys []string, sent []bool) (refs, ids []string, err error) {
	store, err := dynamostore.New(db, idemTable)
	if err != nil {
		return nil, nil, err
	}
	refs, ids = make([]string, len(keys)), make([]string, len(keys))
	errs := make([]error, len(keys))
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, k := range keys {
		if !sent[i] {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			rec, err := recordOf(ctx, store, tenant, k)
			switch {
			case err != nil:
				errs[i] = err
			case rec != nil:
				refs[i], ids[i] = charge.ProviderReference(rec.Key, rec.CreatedAt), charge.ChargeID(rec.Key, rec.CreatedAt)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("references: %w", err)
	}
	return refs, ids, nil
}

// recordOf reads the record of tenant's charge under the client key k. It
// returns nil if there is none.
func recordOf(ctx context.Context, store *dynamostore.Store, tenant, k string) (*idem.Record, error) {
	key, err := idem.NewKey(tenant, charge.ChargeOperation, k)
	if err != nil {
		return nil, err
	}
	rec, err := store.Get(ctx, key)
	if errors.Is(err, idem.ErrNotFound) {
		return nil, nil
	}
	return rec, err
}

// cleanup deletes the idempotency records and charge rows of the given
// keys of tenant. ids[i] names keys[i]'s row, "" for none. The emulator's
// transactions slow down as its tables grow. So a run that leaves its items
// behind slows the next one down.
func cleanup(ctx context.Context, db batchWriter, idemTable, chargesTable, tenant string, keys, ids []string) error {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	pending := map[string][]types.WriteRequest{}
	for i, k := range keys {
		key, err := idem.NewKey(tenant, charge.ChargeOperation, k)
		if err != nil {
			return err
		}
		pending[idemTable] = append(pending[idemTable], types.WriteRequest{DeleteRequest: &types.DeleteRequest{
			Key: map[string]types.AttributeValue{dynamostore.AttrPK: s(key.String())},
		}})
		if ids[i] != "" {
			pending[chargesTable] = append(pending[chargesTable], types.WriteRequest{DeleteRequest: &types.DeleteRequest{
				Key: map[string]types.AttributeValue{charge.AttrTenant: s(tenant), charge.AttrID: s(ids[i])},
			}})
		}
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
