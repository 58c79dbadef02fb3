package charge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TimeLayout is how a charge's creation time is written, in its row and
// in the API: milliseconds, the precision records store.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// The charges table holds one item per charge, and one per refund
// (table_refunds.go). Items are keyed by tenant and id, so a read is
// scoped to the caller's tenant.
const (
	AttrTenant = "tenant"
	AttrID     = "id"
)

// TableInput returns the CreateTable request for a charges table.
func TableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrTenant), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrID), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrTransitionShard), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrAttemptDeadline), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrTenant), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrID), KeyType: types.KeyTypeRange},
		},
		// Sparse: only a charge with a capture or cancel in flight has
		// the index's keys, so the sweeper reads those alone.
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(IndexTransitions),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrTransitionShard), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrAttemptDeadline), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
	}
}

// RowsAPI is the part of *dynamodb.Client the charges table is used
// with. A refund's hold, and a refund that failed later, are the writes
// outside a record's transaction.
type RowsAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ RowsAPI = (*dynamodb.Client)(nil)

// Rows is the charges table: the one place that knows its items.
type Rows struct {
	db        RowsAPI
	tableName *string // the SDK only reads it: one for every request
}

// NewRows returns the charges table named table.
func NewRows(db RowsAPI, table string) (*Rows, error) {
	if db == nil || table == "" {
		return nil, errors.New("charge: the charges table needs a client and a name")
	}
	return &Rows{db: db, tableName: aws.String(table)}, nil
}

// Get reads tenant's charge id with a strongly consistent read; another
// tenant's charge is not found.
func (r *Rows) Get(ctx context.Context, tenant, id string) (Charge, bool, error) {
	return getRow(ctx, r, tenant, id, rowCharge)
}

// getRow reads tenant's item id with a strongly consistent read, as
// decode reads it.
func getRow[T any](ctx context.Context, r *Rows, tenant, id string, decode func(map[string]types.AttributeValue) (T, error)) (T, bool, error) {
	var zero T
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      r.tableName,
		Key:            rowKey(tenant, id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return zero, false, fmt.Errorf("charge: get: %w", dynamostore.AsUnavailable(err))
	}
	if len(out.Item) == 0 {
		return zero, false, nil
	}
	v, err := decode(out.Item)
	if err != nil {
		return zero, false, fmt.Errorf("charge: stored row: %w", err)
	}
	return v, true, nil
}

func rowKey(tenant, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrTenant: &types.AttributeValueMemberS{Value: tenant}, AttrID: &types.AttributeValueMemberS{Value: id}}
}

// Insert is the write of c's row, only if no row has its id. It is part of
// the transaction that settles the command (dynamostore.Store.Commit).
func (r *Rows) Insert(c Charge) types.TransactWriteItem {
	// A struct of strings and an integer always marshals.
	item, _ := attributevalue.MarshalMap(row{
		Tenant: c.Tenant, ID: c.ID, Amount: c.Money.Amount, Currency: c.Money.Currency, Status: c.Status, AmountAuthorized: c.AmountAuthorized,
		ProviderReference: c.ProviderReference, ProviderChargeID: c.ProviderChargeID,
		IdempotencyKey: string(c.IdempotencyKey), CreatedAt: c.CreatedAt.UTC().Format(TimeLayout), Description: c.Description,
	})
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                r.tableName,
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": AttrID},
	}}
}

// row is a charge as its item holds it.
type row struct {
	Tenant            string `dynamodbav:"tenant"`
	ID                string `dynamodbav:"id"`
	Amount            int64  `dynamodbav:"amount"`
	Currency          string `dynamodbav:"currency"`
	Status            string `dynamodbav:"status"`
	ProviderReference string `dynamodbav:"provider_reference"`
	ProviderChargeID  string `dynamodbav:"provider_charge_id"`
	IdempotencyKey    string `dynamodbav:"idempotency_key"`
	CreatedAt         string `dynamodbav:"created_at"`
	Description       string `dynamodbav:"description,omitempty"`
	// AmountRefunded is what settled refunds returned; RefundClaimed adds
	// the holds of refunds still in flight.
	AmountRefunded int64 `dynamodbav:"amount_refunded,omitempty"`
	RefundClaimed  int64 `dynamodbav:"refund_claimed,omitempty"`
	// AmountAuthorized is set for a charge created to capture later.
	AmountAuthorized int64 `dynamodbav:"amount_authorized,omitempty"`
	// A capture or cancel in flight (table_moves.go).
	TransitionAmount  int64  `dynamodbav:"transition_amount,omitempty"`
	AttemptDeadline   int64  `dynamodbav:"attempt_deadline,omitempty"`
	TransitionShard   string `dynamodbav:"transition_shard,omitempty"`
	TransitionWaited  bool   `dynamodbav:"transition_waited,omitempty"`
	TransitionAttempt string `dynamodbav:"transition_attempt,omitempty"`
}

func rowCharge(item map[string]types.AttributeValue) (Charge, error) {
	var w row
	if err := attributevalue.UnmarshalMap(item, &w); err != nil {
		return Charge{}, err
	}
	created, err := time.Parse(TimeLayout, w.CreatedAt)
	if err != nil {
		return Charge{}, err
	}
	return Charge{
		ID: w.ID, Tenant: w.Tenant, Money: Money{Amount: w.Amount, Currency: w.Currency},
		Description: w.Description, ProviderReference: w.ProviderReference,
		ProviderChargeID: w.ProviderChargeID, IdempotencyKey: CommandID(w.IdempotencyKey), CreatedAt: created,
		Status: w.Status, AmountRefunded: w.AmountRefunded, refundClaimed: w.RefundClaimed, AmountAuthorized: w.AmountAuthorized,
		transition: pending{
			amount: w.TransitionAmount, deadline: time.UnixMilli(w.AttemptDeadline), waited: w.TransitionWaited, attempt: w.TransitionAttempt,
		},
	}, nil
}

func number(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func str(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }
