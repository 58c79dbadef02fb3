package regions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Route is where the tenants of one home Region are served.
type Route struct {
	// Home is the Region the tenants are homed in; ServedBy serves them,
	// from Since on. Epoch counts the moves.
	Home, ServedBy string
	Epoch          int64
	Since          time.Time
	// Pending are the Regions that served the tenants before, not
	// yet drained. Their records, and rows written before Since, may
	// still change there.
	Pending []string
	// Read is the table's clock at the read, from its answer's Date
	// header, to the second; zero without one.
	Read time.Time
}

// DynamoDBAPI is the part of *dynamodb.Client the routes table uses.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

var _ DynamoDBAPI = (*dynamodb.Client)(nil)

// Routes is the routes table, a global table in multi-Region strong
// consistency. Every Region reads the latest route. A move is one
// conditional write.
type Routes struct {
	db    DynamoDBAPI
	table *string
}

// The routes table's attributes: pk holds "home#" and the home Region, or
// "tenant#" and a tenant, whose item holds its home.
const (
	attrPK       = "pk"
	attrHome     = "home"
	attrServedBy = "served_by"
	attrEpoch    = "epoch"
	attrSince    = "since"
	attrPending  = "pending"
)

// ErrMoved: the route changed since it was read; read it again.
var ErrMoved = errors.New("regions: the route moved meanwhile")

// NewRoutes returns the routes table named table.
func NewRoutes(db DynamoDBAPI, table string) (*Routes, error) {
	if db == nil || table == "" {
		return nil, errors.New("regions: a routes table needs a client and a name")
	}
	return &Routes{db: db, table: aws.String(table)}, nil
}

// TableInput is the CreateTable request of a routes table or a Ledger.
// Both have a string partition key, on demand.
func TableInput(name string) *dynamodb.CreateTableInput { return dynamostore.LedgerTableInput(name) }

// Route reads home's route, strongly consistently. A home no move has
// touched is served by itself.
func (r *Routes) Route(ctx context.Context, home string) (Route, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: r.table, Key: key(home), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Route{}, fmt.Errorf("regions: route of %s: %w", home, dynamostore.AsUnavailable(err))
	}
	read, _ := awsmiddleware.GetServerTime(out.ResultMetadata)
	if len(out.Item) == 0 {
		return Route{Home: home, ServedBy: home, Read: read}, nil
	}
	rt, err := decode(home, out.Item)
	rt.Read = read
	return rt, err
}

// Home is tenant's home Region, as the routes table holds it. The table
// is the one truth every Region's stack obeys, whatever its configuration.
// A tenant it homes nowhere yet is homed in configured, in a conditional
// write: the first stack to ask decides.
func (r *Routes) Home(ctx context.Context, tenant, configured string) (string, error) {
	k := tenantKey(tenant)
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: r.table, Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return "", fmt.Errorf("regions: home of %s: %w", tenant, dynamostore.AsUnavailable(err))
	}
	if len(out.Item) > 0 {
		return homeOf(tenant, out.Item)
	}
	item := tenantKey(tenant)
	item[attrHome] = &types.AttributeValueMemberS{Value: configured}
	_, err = r.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           r.table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames:            map[string]string{"#pk": attrPK},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		// Another stack homed the tenant meanwhile; or this write, its
		// answer lost, was retried.
		return homeOf(tenant, ccf.Item)
	}
	if err != nil {
		return "", fmt.Errorf("regions: home of %s: %w", tenant, dynamostore.AsUnavailable(err))
	}
	return configured, nil
}

func homeOf(tenant string, item map[string]types.AttributeValue) (string, error) {
	home, ok := item[attrHome].(*types.AttributeValueMemberS)
	if !ok || home.Value == "" {
		return "", fmt.Errorf("regions: home of %s: an item without %s", tenant, attrHome)
	}
	return home.Value, nil
}

func tenantKey(tenant string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: "tenant#" + tenant}}
}

// Move serves home's tenants from to, starting fence after now. By then
// every lease read before now has ended. now is the table's clock at
// from's read if that is later: an operator's slow clock must not start
// the move early. The Region that served them joins Pending. It fails
// with ErrMoved if the route changed since from was read.
func (r *Routes) Move(ctx context.Context, from Route, to string, now time.Time, fence time.Duration) (Route, error) {
	next := from
	next.ServedBy, next.Epoch, next.Since, next.Read = to, from.Epoch+1, later(now, from.Read).Add(fence), time.Time{}
	if from.ServedBy != to && !slices.Contains(from.Pending, from.ServedBy) {
		next.Pending = append(slices.Clone(from.Pending), from.ServedBy)
	}
	next.Pending = slices.DeleteFunc(next.Pending, func(p string) bool { return p == to })
	return next, r.put(ctx, from, next)
}

// Drained removes region from home's Pending: its writes have all
// replicated (or the operator wrote them off). It fails with ErrMoved if
// the route changed since from was read.
func (r *Routes) Drained(ctx context.Context, from Route, region string) (Route, error) {
	next := from
	next.Epoch++
	next.Pending = slices.DeleteFunc(slices.Clone(from.Pending), func(p string) bool { return p == region })
	return next, r.put(ctx, from, next)
}

// put writes next over from, conditioned on from's epoch.
func (r *Routes) put(ctx context.Context, from, next Route) error {
	item := key(next.Home)
	item[attrServedBy] = &types.AttributeValueMemberS{Value: next.ServedBy}
	item[attrEpoch] = number(next.Epoch)
	item[attrSince] = number(next.Since.UnixMilli())
	if len(next.Pending) > 0 {
		item[attrPending] = &types.AttributeValueMemberSS{Value: next.Pending}
	}
	in := &dynamodb.PutItemInput{
		TableName:                 r.table,
		Item:                      item,
		ConditionExpression:       aws.String("#epoch = :epoch"),
		ExpressionAttributeNames:  map[string]string{"#epoch": attrEpoch},
		ExpressionAttributeValues: map[string]types.AttributeValue{":epoch": number(from.Epoch)},
	}
	if from.Epoch == 0 {
		// No move yet: the item is not there.
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = aws.String("attribute_not_exists(#pk)"), map[string]string{"#pk": attrPK}, nil
	}
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err := r.db.PutItem(ctx, in)
	if ccf, failed := errors.AsType[*types.ConditionalCheckFailedException](err); failed {
		// A retry of this write, its answer lost, finds the write itself.
		if stored, derr := decode(next.Home, ccf.Item); derr == nil && sameMove(stored, next) {
			return nil
		}
		return fmt.Errorf("regions: move %s: %w", next.Home, ErrMoved)
	}
	if err != nil {
		return fmt.Errorf("regions: move %s: %w", next.Home, dynamostore.AsUnavailable(err))
	}
	return nil
}

// sameMove reports whether stored is the write of next: an epoch is
// written once, so its since and Regions name the write. Pending is a set.
func sameMove(stored, next Route) bool {
	a, b := slices.Sorted(slices.Values(stored.Pending)), slices.Sorted(slices.Values(next.Pending))
	return stored.Epoch == next.Epoch && stored.ServedBy == next.ServedBy && stored.Since.UnixMilli() == next.Since.UnixMilli() && slices.Equal(a, b)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func key(home string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: "home#" + home}}
}

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func decode(home string, item map[string]types.AttributeValue) (Route, error) {
	rt := Route{Home: home}
	served, ok := item[attrServedBy].(*types.AttributeValueMemberS)
	if !ok {
		return Route{}, fmt.Errorf("regions: route of %s has no %s", home, attrServedBy)
	}
	rt.ServedBy = served.Value
	epoch, err1 := numberOf(item, attrEpoch)
	since, err2 := numberOf(item, attrSince)
	if err := errors.Join(err1, err2); err != nil {
		return Route{}, fmt.Errorf("regions: route of %s: %w", home, err)
	}
	rt.Epoch, rt.Since = epoch, time.UnixMilli(since)
	if p, ok := item[attrPending].(*types.AttributeValueMemberSS); ok {
		rt.Pending = p.Value
	}
	return rt, nil
}

func numberOf(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("no number %s", name)
	}
	return strconv.ParseInt(v.Value, 10, 64)
}
