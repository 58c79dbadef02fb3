package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/testkit"
)

// tableLayout is what the meter needs to know of a table: the role it
// reports the table's usage under ("idempotency", "charges"), its primary
// key attributes, and the key attributes of its one (sparse, keys-only)
// global secondary index, if any.
type tableLayout struct {
	role       string
	key, index []string
}

// use is what a sequence of DynamoDB calls cost, by DynamoDB's published
// rules for on-demand and provisioned capacity:
//
//   - a write costs 1 WCU per started KB of the larger of the item before
//     and after it (at least 1); a conditional write that fails still costs
//     that for the existing item; a write inside TransactWriteItems costs
//     double;
//   - a write that adds an item to a global secondary index or removes it
//     costs 1 WCU there (2 if it moves it), counted apart;
//   - a strongly consistent GetItem costs 1 RCU per started 4 KB.
//
// Item sizes follow DynamoDB's size rules (see testkit.ItemSize). Written counts the
// item writes DynamoDB applied, so a failed conditional write counts none.
type use struct {
	Written      int
	WCU, IndexWC int
	RCU          int
	MaxItemBytes int // the largest item any call touched
}

func (u use) plus(v use) use {
	return use{
		Written: u.Written + v.Written, WCU: u.WCU + v.WCU, IndexWC: u.IndexWC + v.IndexWC, RCU: u.RCU + v.RCU,
		MaxItemBytes: max(u.MaxItemBytes, v.MaxItemBytes),
	}
}

// usage is the use of all tables together, and of each by its role.
type usage struct {
	use
	Tables map[string]use
}

func (u *usage) add(role string, v use) {
	u.use = u.use.plus(v)
	if u.Tables == nil {
		u.Tables = map[string]use{}
	}
	u.Tables[role] = u.Tables[role].plus(v)
}

// meter prices every DynamoDB call made through a client it is installed
// on, by reading the items a call touches (through its own client) just
// before and just after it. Calls must not run concurrently with other
// writes to the same items: the round-trip test runs one request at a time.
type meter struct {
	db     *dynamodb.Client
	tables map[string]tableLayout

	mu   sync.Mutex
	used usage
	errs []error
}

// target is one item a call reads or writes.
type target struct {
	table string
	key   map[string]types.AttributeValue
	write bool
	trans bool
}

// Option installs the meter on a DynamoDB client.
func (m *meter) Option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("CapacityMeter",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					targets, err := m.targets(in.Parameters)
					if err != nil {
						m.fail(fmt.Errorf("meter: %s: %w", awsmiddleware.GetOperationName(ctx), err))
						return next.HandleInitialize(ctx, in)
					}
					before := m.read(ctx, targets)
					out, md, callErr := next.HandleInitialize(ctx, in)
					after := before
					if callErr == nil {
						after = m.read(ctx, targets)
					}
					m.account(targets, before, after, callErr == nil)
					return out, md, callErr
				}), middleware.After)
		})
	}
}

// Snapshot returns the usage so far, and any error metering it, and resets
// both.
func (m *meter) Snapshot() (usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.used, errors.Join(m.errs...)
	m.used, m.errs = usage{}, nil
	return u, err
}

func (m *meter) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs = append(m.errs, err)
}

func (m *meter) targets(params any) ([]target, error) {
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		return []target{{table: aws.ToString(in.TableName), key: in.Key}}, nil
	case *dynamodb.PutItemInput:
		key, err := m.keyOf(aws.ToString(in.TableName), in.Item)
		return []target{{table: aws.ToString(in.TableName), key: key, write: true}}, err
	case *dynamodb.UpdateItemInput:
		return []target{{table: aws.ToString(in.TableName), key: in.Key, write: true}}, nil
	case *dynamodb.DeleteItemInput:
		return []target{{table: aws.ToString(in.TableName), key: in.Key, write: true}}, nil
	case *dynamodb.QueryInput:
		// Not priced: the only Query of the paths measured is the read of
		// the tenants' limits when the charge function is built.
		return nil, nil
	case *dynamodb.TransactWriteItemsInput:
		var ts []target
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				key, err := m.keyOf(aws.ToString(it.Put.TableName), it.Put.Item)
				if err != nil {
					return nil, err
				}
				ts = append(ts, target{table: aws.ToString(it.Put.TableName), key: key, write: true, trans: true})
			case it.Update != nil:
				ts = append(ts, target{table: aws.ToString(it.Update.TableName), key: it.Update.Key, write: true, trans: true})
			case it.Delete != nil:
				ts = append(ts, target{table: aws.ToString(it.Delete.TableName), key: it.Delete.Key, write: true, trans: true})
			default:
				return nil, errors.New("only Put, Update and Delete are metered in a transaction")
			}
		}
		return ts, nil
	default:
		return nil, fmt.Errorf("%T is not metered", params)
	}
}

func (m *meter) keyOf(table string, item map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	layout, ok := m.tables[table]
	if !ok {
		return nil, fmt.Errorf("unknown table %s", table)
	}
	key := make(map[string]types.AttributeValue, len(layout.key))
	for _, name := range layout.key {
		key[name] = item[name]
	}
	return key, nil
}

// read returns the current item of each target (nil where there is none).
func (m *meter) read(ctx context.Context, ts []target) []map[string]types.AttributeValue {
	items := make([]map[string]types.AttributeValue, len(ts))
	for i, t := range ts {
		out, err := m.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.table), Key: t.key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			m.fail(fmt.Errorf("meter: read %s: %w", t.table, err))
			continue
		}
		items[i] = out.Item
	}
	return items
}

func (m *meter) account(ts []target, before, after []map[string]types.AttributeValue, applied bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, t := range ts {
		layout := m.tables[t.table]
		size := max(testkit.ItemSize(before[i]), testkit.ItemSize(after[i]))
		u := use{MaxItemBytes: size}
		switch {
		case !t.write:
			u.RCU = max(1, ceilDiv(size, 4096))
		case t.trans:
			u.WCU = 2 * max(1, ceilDiv(size, 1024))
		default:
			u.WCU = max(1, ceilDiv(size, 1024))
		}
		if t.write && applied {
			u.Written = 1
			u.IndexWC = indexWrites(layout.index, before[i], after[i])
		}
		m.used.add(layout.role, u)
	}
}

// indexWrites is the number of index entries a write that took an item from
// before to after put or removed in a keys-only index on the attributes
// index.
func indexWrites(index []string, before, after map[string]types.AttributeValue) int {
	if len(index) == 0 {
		return 0
	}
	b, inBefore := indexKey(index, before)
	a, inAfter := indexKey(index, after)
	switch {
	case inBefore && inAfter && a != b:
		return 2
	case inBefore != inAfter:
		return 1
	}
	return 0
}

func indexKey(index []string, item map[string]types.AttributeValue) (string, bool) {
	parts := make([]string, len(index))
	for i, name := range index {
		v, ok := item[name]
		if !ok {
			return "", false
		}
		parts[i] = scalar(v)
	}
	return strings.Join(parts, "\x00"), true
}

// scalar renders a key attribute's value with its type.
func scalar(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberB:
		return "B" + string(v.Value)
	}
	return fmt.Sprintf("%T", v)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
