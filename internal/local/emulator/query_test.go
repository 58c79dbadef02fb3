package emulator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/local/emulator"
	"github.com/chargeonce/chargeonce/internal/local/provision"
)

// TestIndexedQueriesMatchMoto makes the same random writes on an emulator
// whose queries read the partition they name (the default) and on one that
// reads the whole table as moto does (EMULATOR_INDEXED_QUERIES=0), and
// requires the same answers to every query, page by page: of the table and
// of a sparse global index, an index without a sort key, a local index and
// a hash-only table's index, with key conditions, filters, projections,
// both orders and small pages. The writes move items into, within and out
// of the indexes by PutItem, UpdateItem, DeleteItem, BatchWriteItem and
// TransactWriteItems, some of which fail and must leave the indexes as
// they were.
func TestIndexedQueriesMatchMoto(t *testing.T) {
	t.Parallel()
	sides := startSides(t, []string{emulator.EnvIndexedQueries + "=0"}, []string{emulator.EnvIndexedQueries + "=1"})
	moto, indexed := sides[0], sides[1]
	ctx := context.Background()
	for _, sd := range sides {
		createQueryTables(t, sd.db)
	}
	// A query against the indexes before any write, so the indexed side
	// builds them empty and files every write after.
	queries := queryBattery()
	for _, q := range queries {
		compareQuery(t, "before any write", moto, indexed, q)
	}

	rng := rand.New(rand.NewPCG(34, 1))
	for i := range 150 {
		op := randomWrite(rng)
		wantErr, gotErr := op.run(ctx, moto.db), op.run(ctx, indexed.db)
		if want, got := describe(wantErr), describe(gotErr); got != want {
			t.Fatalf("write %d (%s): answer\n got %s\nwant %s", i, op.name, got, want)
		}
		// Every query after some writes; a few random ones after the rest.
		if i%25 == 24 {
			for _, q := range queries {
				compareQuery(t, fmt.Sprintf("after write %d (%s)", i, op.name), moto, indexed, q)
			}
			continue
		}
		for range 3 {
			compareQuery(t, fmt.Sprintf("after write %d (%s)", i, op.name), moto, indexed, queries[rng.IntN(len(queries))])
		}
	}
}

// The tables: qr (pk, sk) with a sparse index on (shard, exp) projecting
// keys and v, an index on v alone and a local index on (pk, exp); qh (pk)
// with the same sparse index.
const (
	rangeTable = "qr"
	hashTable  = "qh"
)

func createQueryTables(t *testing.T, db *dynamodb.Client) {
	t.Helper()
	attr := func(name string, at types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: at}
	}
	key := func(name string, kt types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(name), KeyType: kt}
	}
	sparse := types.GlobalSecondaryIndex{
		IndexName: aws.String("sparse"),
		KeySchema: []types.KeySchemaElement{key("shard", types.KeyTypeHash), key("exp", types.KeyTypeRange)},
		Projection: &types.Projection{
			ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"v"},
		},
	}
	for _, in := range []*dynamodb.CreateTableInput{
		{
			TableName: aws.String(rangeTable),
			AttributeDefinitions: []types.AttributeDefinition{
				attr("pk", types.ScalarAttributeTypeS), attr("sk", types.ScalarAttributeTypeS),
				attr("shard", types.ScalarAttributeTypeN), attr("exp", types.ScalarAttributeTypeN), attr("v", types.ScalarAttributeTypeS),
			},
			KeySchema: []types.KeySchemaElement{key("pk", types.KeyTypeHash), key("sk", types.KeyTypeRange)},
			GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{sparse, {
				IndexName:  aws.String("byv"),
				KeySchema:  []types.KeySchemaElement{key("v", types.KeyTypeHash)},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
			}},
			LocalSecondaryIndexes: []types.LocalSecondaryIndex{{
				IndexName:  aws.String("local"),
				KeySchema:  []types.KeySchemaElement{key("pk", types.KeyTypeHash), key("exp", types.KeyTypeRange)},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
			}},
		},
		{
			TableName: aws.String(hashTable),
			AttributeDefinitions: []types.AttributeDefinition{
				attr("pk", types.ScalarAttributeTypeS), attr("shard", types.ScalarAttributeTypeN), attr("exp", types.ScalarAttributeTypeN),
			},
			KeySchema:              []types.KeySchemaElement{key("pk", types.KeyTypeHash)},
			GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{sparse},
		},
	} {
		in.BillingMode = types.BillingModePayPerRequest
		if _, err := provision.CreateTable(context.Background(), db, in); err != nil {
			t.Fatal(err)
		}
	}
}

// queryBattery is every query the test compares.
func queryBattery() []*dynamodb.QueryInput {
	q := func(table, index, cond string, values item, mod func(*dynamodb.QueryInput)) *dynamodb.QueryInput {
		in := &dynamodb.QueryInput{
			TableName: aws.String(table), KeyConditionExpression: aws.String(cond),
			ExpressionAttributeValues: values, Limit: aws.Int32(2),
		}
		if index != "" {
			in.IndexName = aws.String(index)
		}
		if mod != nil {
			mod(in)
		}
		return in
	}
	backwards := func(in *dynamodb.QueryInput) { in.ScanIndexForward = aws.Bool(false) }
	onlyX := func(in *dynamodb.QueryInput) {
		in.FilterExpression = aws.String("v = :x")
		in.ExpressionAttributeValues[":x"] = s("x")
	}
	unlimited := func(in *dynamodb.QueryInput) { in.Limit = nil }
	var out []*dynamodb.QueryInput
	for _, p := range []string{"p0", "p1", "p2", "p9"} {
		out = append(out,
			q(rangeTable, "", "pk = :p", item{":p": s(p)}, nil),
			q(rangeTable, "local", "pk = :p AND exp BETWEEN :lo AND :hi", item{":p": s(p), ":lo": n("2"), ":hi": n("7")}, nil),
			q(hashTable, "", "pk = :p", item{":p": s(p)}, nil),
		)
	}
	out = append(out,
		q(rangeTable, "", "pk = :p AND sk > :s", item{":p": s("p1"), ":s": s("b")}, backwards),
		q(rangeTable, "", "pk = :p AND begins_with(sk, :s)", item{":p": s("p0"), ":s": s("c")}, unlimited),
	)
	for _, shard := range []string{"0", "1", "2"} {
		out = append(out,
			q(rangeTable, "sparse", "shard = :sh", item{":sh": n(shard)}, nil),
			q(rangeTable, "sparse", "shard = :sh AND exp < :e", item{":sh": n(shard), ":e": n("5")}, backwards),
			q(rangeTable, "sparse", "shard = :sh AND exp >= :e", item{":sh": n(shard), ":e": n("3")}, onlyX),
			q(hashTable, "sparse", "shard = :sh AND exp < :e", item{":sh": n(shard), ":e": n("6")}, nil),
			q(hashTable, "sparse", "shard = :sh", item{":sh": n(shard)}, func(in *dynamodb.QueryInput) {
				backwards(in)
				in.ProjectionExpression = aws.String("pk, exp")
			}),
		)
	}
	for _, v := range []string{"x", "y"} {
		out = append(out, q(rangeTable, "byv", "v = :v", item{":v": s(v)}, nil))
	}
	return out
}

// compareQuery runs in on both sides, a page at a time, and fails the test
// unless every page is the same.
func compareQuery(t *testing.T, when string, moto, indexed side, in *dynamodb.QueryInput) {
	t.Helper()
	want, got := queryPages(t, moto.db, in), queryPages(t, indexed.db, in)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: query %s %s %q %v:\n got %q\nwant %q", when, aws.ToString(in.TableName), aws.ToString(in.IndexName),
			aws.ToString(in.KeyConditionExpression), render(in.ExpressionAttributeValues), got, want)
	}
}

// queryPages renders every page of in's answers: its items, counts and
// last evaluated key, or the error that ended it.
func queryPages(t *testing.T, db *dynamodb.Client, in *dynamodb.QueryInput) []string {
	t.Helper()
	var pages []string
	p := dynamodb.NewQueryPaginator(db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			return append(pages, describe(err))
		}
		items := make([]string, len(page.Items))
		for i, it := range page.Items {
			items[i] = render(it)
		}
		pages = append(pages, fmt.Sprintf("%d/%d %s next %s", page.Count, page.ScannedCount,
			strings.Join(items, " "), render(page.LastEvaluatedKey)))
	}
	return pages
}

// write is one random write, run the same way on each side.
type write struct {
	name string
	run  func(context.Context, *dynamodb.Client) error
}

// randomWrite picks a write among a few keys, so writes often meet.
func randomWrite(rng *rand.Rand) write {
	rangeKey := func() item { return rk(fmt.Sprintf("p%d", rng.IntN(3)), string(rune('a'+rng.IntN(5)))) }
	hashKey := func() item { return hk(fmt.Sprintf("p%d", rng.IntN(3))) }
	key := func() (string, item) {
		if rng.IntN(3) == 0 {
			return hashTable, hashKey()
		}
		return rangeTable, rangeKey()
	}
	// attrs adds random index attributes to it: each may be absent.
	attrs := func(table string, it item) item {
		if rng.IntN(3) > 0 {
			it["shard"] = n(strconv.Itoa(rng.IntN(3)))
		}
		if rng.IntN(3) > 0 {
			it["exp"] = n(strconv.Itoa(1 + rng.IntN(9)))
		}
		if table == rangeTable && rng.IntN(2) > 0 {
			it["v"] = s([]string{"x", "y"}[rng.IntN(2)])
		}
		return it
	}
	// change is an update expression that moves the item in or out of the
	// indexes, with its values.
	change := func(table string) (string, item) {
		switch rng.IntN(4) {
		case 0:
			return "REMOVE shard, exp", nil
		case 1:
			return "SET exp = :e", item{":e": n(strconv.Itoa(1 + rng.IntN(9)))}
		case 2:
			if table == rangeTable {
				return "SET v = :v REMOVE exp", item{":v": s("y")}
			}
			return "REMOVE exp", nil
		default:
			return "SET shard = :sh, exp = :e", item{":sh": n(strconv.Itoa(rng.IntN(3))), ":e": n(strconv.Itoa(1 + rng.IntN(9)))}
		}
	}
	// action is one TransactWriteItems action on a key not in used.
	action := func(used map[string]bool) types.TransactWriteItem {
		table, k := key()
		for used[table+render(k)] {
			table, k = key()
		}
		used[table+render(k)] = true
		switch rng.IntN(4) {
		case 0:
			return put(table, attrs(table, k), "")
		case 1:
			return del(table, k, "")
		case 2:
			return check(table, k, "attribute_exists(pk)")
		default:
			expr, values := change(table)
			return types.TransactWriteItem{Update: &types.Update{
				TableName: aws.String(table), Key: k, UpdateExpression: aws.String(expr), ExpressionAttributeValues: values,
			}}
		}
	}

	switch rng.IntN(6) {
	case 0, 1:
		table, k := key()
		it := attrs(table, k)
		return write{"PutItem", func(ctx context.Context, db *dynamodb.Client) error {
			_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it})
			return err
		}}
	case 2:
		table, k := key()
		expr, values := change(table)
		return write{"UpdateItem " + expr, func(ctx context.Context, db *dynamodb.Client) error {
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: k, UpdateExpression: aws.String(expr), ExpressionAttributeValues: values,
			})
			return err
		}}
	case 3:
		table, k := key()
		return write{"DeleteItem", func(ctx context.Context, db *dynamodb.Client) error {
			_, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: k})
			return err
		}}
	case 4:
		used := map[string]bool{}
		put := types.WriteRequest{PutRequest: &types.PutRequest{Item: attrs(rangeTable, rangeKey())}}
		used[render(rk(put.PutRequest.Item["pk"].(*types.AttributeValueMemberS).Value, put.PutRequest.Item["sk"].(*types.AttributeValueMemberS).Value))] = true
		gone := rangeKey()
		for used[render(gone)] {
			gone = rangeKey()
		}
		requests := []types.WriteRequest{put, {DeleteRequest: &types.DeleteRequest{Key: gone}}}
		return write{"BatchWriteItem", func(ctx context.Context, db *dynamodb.Client) error {
			_, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{rangeTable: requests}})
			return err
		}}
	default:
		used := map[string]bool{}
		actions := make([]types.TransactWriteItem, 2+rng.IntN(3))
		for i := range actions {
			actions[i] = action(used)
		}
		return write{"TransactWriteItems", func(ctx context.Context, db *dynamodb.Client) error {
			_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: actions})
			return err
		}}
	}
}
