package limit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// The limits table's attributes. A tenant's counts of SharedSpan seconds
// are the item ("count#<tenant>", "<its first unix second>"); an override
// is ("override", "<tenant>"). Tenants hold no '#', so the two never meet.
// Each second of an item has its own attributes, i seconds after the
// first: "requests<i>" and "busy_ms<i>". The waits on one thing in flight
// in a window are ("wait#<tenant>#<its hash>", "<the window's first unix
// ms>"), counted in "waiters".
const (
	AttrPK        = "pk"
	AttrSK        = "sk"
	AttrRequests  = "requests"
	AttrBusyMs    = "busy_ms"
	AttrWaiters   = "waiters"
	AttrExpiresAt = "expires_at"

	overridePK  = "override"
	countPrefix = "count#"
	waitPrefix  = "wait#"
)

// SharedSpan is how many seconds one item of the table counts. A share
// returns the seconds of its item up to its own. At twice the
// ConcurrencySpan, one item holds a whole span more than half the time.
const SharedSpan = 2 * ConcurrencySpan

// countRetention is how long a second's count is kept; TTL deletes it
// after.
const countRetention = time.Hour

// TableInput returns the CreateTable request for a limits table.
func TableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrSK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrSK), KeyType: types.KeyTypeRange},
		},
	}
}

// TTLInput enables TTL on a limits table, which deletes old counts.
func TTLInput(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(AttrExpiresAt),
			Enabled:       aws.Bool(true),
		},
	}
}

// API is the part of *dynamodb.Client a Table uses. The functions update
// and get counts and query overrides; an operator's tool puts and deletes
// them.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Table is the limits table: the counts every instance shares, and the
// operators' overrides.
type Table struct {
	db        API
	tableName *string // the SDK only reads it: one for every request
}

var _ Store = (*Table)(nil)

// NewTable returns the limits table named table.
func NewTable(db API, table string) (*Table, error) {
	if db == nil || table == "" {
		return nil, errors.New("limit: the limits table needs a client and a name")
	}
	return &Table{db: db, tableName: aws.String(table)}, nil
}

// oneAttempt makes a call on a request's path one attempt. The SDK
// retries a throttled call after up to a second: past callTimeout, it
// would pass for a table that hangs. A failed share is never resent.
func oneAttempt(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// Add adds u to tenant's count of window, in one UpdateItem. It returns
// every instance's counts of window and the item's seconds before it.
// They come last first.
func (t *Table) Add(ctx context.Context, tenant string, window int64, u Usage) ([]Usage, error) {
	first := window - window%SharedSpan
	at := strconv.FormatInt(window-first, 10)
	names := map[string]string{"#r": AttrRequests + at, "#b": AttrBusyMs + at, "#e": AttrExpiresAt}
	values := map[string]types.AttributeValue{
		":r": n(int64(u.Requests)), ":b": n(u.Busy.Milliseconds()),
		":e": n(first + SharedSpan + int64(countRetention/time.Second)),
	}
	out, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 t.tableName,
		Key:                       countKey(tenant, window),
		UpdateExpression:          aws.String("ADD #r :r, #b :b SET #e = :e"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew, // all: the seconds before this one too
	}, oneAttempt)
	if err != nil {
		return nil, fmt.Errorf("limit: add to %s's count: %w", tenant, dynamostore.AsUnavailable(err))
	}
	return seconds(tenant, window, out.Attributes)
}

// Read returns every instance's counts of window and its item's seconds
// before it, last first, in one consistent GetItem. A share straddling two
// items reads the earlier one so.
func (t *Table) Read(ctx context.Context, tenant string, window int64) ([]Usage, error) {
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      t.tableName,
		Key:            countKey(tenant, window),
		ConsistentRead: aws.Bool(true), // a share may have landed just before
	}, oneAttempt)
	if err != nil {
		return nil, fmt.Errorf("limit: read %s's count: %w", tenant, dynamostore.AsUnavailable(err))
	}
	return seconds(tenant, window, out.Item)
}

// waitRetention is how long a window's waits are kept after it ends; TTL
// deletes them after.
const waitRetention = time.Minute

// TakeWait takes one of most waits on what on names, in the window that
// starts at start and lasts span. It is one conditional UpdateItem. It
// reports false if the window's waits are all taken.
func (t *Table) TakeWait(ctx context.Context, tenant, on string, start time.Time, span time.Duration, most int) (bool, error) {
	_, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: t.tableName,
		Key: map[string]types.AttributeValue{
			AttrPK: s(waitPrefix + tenant + "#" + on), AttrSK: s(strconv.FormatInt(start.UnixMilli(), 10)),
		},
		UpdateExpression:          aws.String("ADD #w :one SET #e = :e"),
		ConditionExpression:       aws.String("attribute_not_exists(#w) OR #w < :most"),
		ExpressionAttributeNames:  map[string]string{"#w": AttrWaiters, "#e": AttrExpiresAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":most": n(int64(most)), ":e": n(start.Add(span + waitRetention).Unix())},
	}, oneAttempt)
	if _, full := errors.AsType[*types.ConditionalCheckFailedException](err); full {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("limit: take a wait of %s: %w", tenant, dynamostore.AsUnavailable(err))
	}
	return true, nil
}

// countKey is the key of the item that counts tenant's window.
func countKey(tenant string, window int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: s(countPrefix + tenant), AttrSK: s(strconv.FormatInt(window-window%SharedSpan, 10))}
}

// seconds decodes an item's counts of window and its seconds before it,
// last first.
func seconds(tenant string, window int64, item map[string]types.AttributeValue) ([]Usage, error) {
	first := window - window%SharedSpan
	used := make([]Usage, window-first+1)
	for i := range used {
		at := strconv.FormatInt(window-first-int64(i), 10)
		var c struct {
			Requests int   `dynamodbav:"r"`
			BusyMs   int64 `dynamodbav:"b"`
		}
		// A second no instance has shared has none of its attributes: zero.
		slot := map[string]types.AttributeValue{"r": item[AttrRequests+at], "b": item[AttrBusyMs+at]}
		maps.DeleteFunc(slot, func(_ string, v types.AttributeValue) bool { return v == nil })
		if err := attributevalue.UnmarshalMap(slot, &c); err != nil {
			return nil, fmt.Errorf("limit: %s's count: %w", tenant, err)
		}
		used[i] = Usage{Requests: c.Requests, Busy: time.Duration(c.BusyMs) * time.Millisecond}
	}
	return used, nil
}

// override is an override as its item holds it.
type override struct {
	Tenant      string `dynamodbav:"sk"`
	Rate        int    `dynamodbav:"rate,omitempty"`
	Concurrency int    `dynamodbav:"concurrency,omitempty"`
}

// Overrides returns every override, by tenant, a page at a time.
func (t *Table) Overrides(ctx context.Context) (map[string]Limits, error) {
	p := dynamodb.NewQueryPaginator(t.db, &dynamodb.QueryInput{
		TableName:                 t.tableName,
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(overridePK)},
	})
	out := map[string]Limits{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("limit: read the overrides: %w", dynamostore.AsUnavailable(err))
		}
		for _, item := range page.Items {
			if tenant, l := decodeOverride(item); tenant != "" {
				out[tenant] = l
			}
		}
	}
	return out, nil
}

// decodeOverride reads an override item. A number past an int, written by
// hand, is held to the maximum; one that is no number sets nothing. One
// bad item must not cost every other tenant its override.
func decodeOverride(item map[string]types.AttributeValue) (string, Limits) {
	num := func(name string, most int) int {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		f, err := strconv.ParseFloat(v.Value, 64)
		if err != nil || f < 0 {
			return 0
		}
		return int(min(f, float64(most)))
	}
	tenant, _ := item["sk"].(*types.AttributeValueMemberS)
	if tenant == nil {
		return "", Limits{}
	}
	return tenant.Value, Limits{Rate: num("rate", MaxRate), Concurrency: num("concurrency", MaxConcurrency)}
}

// SetOverride sets tenant's override; a zero field keeps the default.
func (t *Table) SetOverride(ctx context.Context, tenant string, l Limits) error {
	if err := idem.CheckTenant(tenant); err != nil {
		return fmt.Errorf("limit: %w", err)
	}
	if err := l.CheckOverride(); err != nil {
		return err
	}
	item, err := attributevalue.MarshalMap(override{Tenant: tenant, Rate: l.Rate, Concurrency: l.Concurrency})
	if err != nil {
		return fmt.Errorf("limit: %w", err)
	}
	item[AttrPK] = s(overridePK)
	if _, err := t.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: t.tableName, Item: item}); err != nil {
		return fmt.Errorf("limit: set %s's override: %w", tenant, dynamostore.AsUnavailable(err))
	}
	return nil
}

// DeleteOverride removes tenant's override: the defaults apply again.
func (t *Table) DeleteOverride(ctx context.Context, tenant string) error {
	_, err := t.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: t.tableName,
		Key:       map[string]types.AttributeValue{AttrPK: s(overridePK), AttrSK: s(tenant)},
	})
	if err != nil {
		return fmt.Errorf("limit: delete %s's override: %w", tenant, dynamostore.AsUnavailable(err))
	}
	return nil
}
