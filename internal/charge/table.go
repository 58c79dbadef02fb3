package charge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TimeLayout is how a charge's creation time is written, in its row and
// in the API: milliseconds, the precision records store.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// The charges table: one item per charge, keyed by tenant and id, so a
// read is always scoped to the caller's tenant.
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
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrTenant), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrID), KeyType: types.KeyTypeRange},
		},
	}
}

func attrS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// RowsAPI is the part of *dynamodb.Client the charges table is read with.
type RowsAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
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
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      r.tableName,
		Key:            map[string]types.AttributeValue{AttrTenant: attrS(tenant), AttrID: attrS(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Charge{}, false, fmt.Errorf("charge: get: %w", idem.AsUnavailable(err))
	}
	if len(out.Item) == 0 {
		return Charge{}, false, nil
	}
	c, err := rowCharge(out.Item)
	if err != nil {
		return Charge{}, false, fmt.Errorf("charge: stored row: %w", err)
	}
	return c, true, nil
}

// Insert is the write of c's row, only if no row has its id, for the
// transaction that settles the command (idem.Store.Commit).
func (r *Rows) Insert(c Charge) types.TransactWriteItem {
	strs := make(strAttrs, 0, 8)
	item := make(map[string]types.AttributeValue, 10)
	item[AttrTenant] = strs.of(c.Tenant)
	item[AttrID] = strs.of(c.ID)
	item["amount"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(c.Money.Amount, 10)}
	item["currency"] = strs.of(c.Money.Currency)
	item["status"] = statusSucceeded
	item["provider_reference"] = strs.of(c.ProviderReference)
	item["provider_charge_id"] = strs.of(c.ProviderChargeID)
	item["idempotency_key"] = strs.of(string(c.IdempotencyKey))
	item["created_at"] = strs.of(c.CreatedAt.UTC().Format(TimeLayout))
	if c.Description != "" {
		item["description"] = strs.of(c.Description)
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                r.tableName,
		Item:                     item,
		ConditionExpression:      insertCondition,
		ExpressionAttributeNames: insertNames,
	}}
}

// strAttrs hands out string attribute values from one backing array, so an
// item's strings cost one allocation, not one each. A value keeps pointing
// at its element if a later one makes the array grow.
type strAttrs []types.AttributeValueMemberS

func (a *strAttrs) of(v string) types.AttributeValue {
	*a = append(*a, types.AttributeValueMemberS{Value: v})
	return &(*a)[len(*a)-1]
}

// statusSucceeded, insertCondition and insertNames are shared by every
// write (the SDK only reads its input).
var (
	statusSucceeded types.AttributeValue = &types.AttributeValueMemberS{Value: "succeeded"}
	insertCondition                      = aws.String("attribute_not_exists(#id)")
)

// insertNames are the names of Insert's condition.
var insertNames = map[string]string{"#id": AttrID}

func rowCharge(item map[string]types.AttributeValue) (Charge, error) {
	str := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	var amount int64
	if v, ok := item["amount"].(*types.AttributeValueMemberN); ok {
		amount, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	created, err := time.Parse(TimeLayout, str("created_at"))
	if err != nil {
		return Charge{}, err
	}
	return Charge{
		ID: str(AttrID), Tenant: str(AttrTenant), Money: Money{Amount: amount, Currency: str("currency")},
		Description: str("description"), ProviderReference: str("provider_reference"),
		ProviderChargeID: str("provider_charge_id"), IdempotencyKey: CommandID(str("idempotency_key")),
		CreatedAt: created,
	}, nil
}
