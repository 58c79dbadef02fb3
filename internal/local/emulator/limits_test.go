package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/chargeonce/chargeonce/internal/local/provision"
)

// DynamoDB's answers to an over-long key.
const (
	hashKeyTooLong  = "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of2048 bytes"
	rangeKeyTooLong = "One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
)

// sized is tag followed by two-byte characters (and one "a" if needed) up
// to n bytes of UTF-8: a limit counts bytes, not characters.
func sized(tag string, n int) string {
	pad := n - len(tag)
	return tag + strings.Repeat("é", pad/2) + strings.Repeat("a", pad%2)
}

// answer is err's code and message, "" for nil.
func answer(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode() + ": " + api.ErrorMessage()
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// keyCall is one call that takes a key, made with key on table; ok is the
// error code it answers for a new key within the limits ("" for success).
type keyCall struct {
	name string
	ok   string
	call func(ctx context.Context, db *dynamodb.Client, table string, key item) error
}

// withAttrs is key with a value attribute v added.
func withAttrs(key item) item {
	it := item{"v": s("x")}
	for k, v := range key {
		it[k] = v
	}
	return it
}

// keyCalls are the calls that take a key. Most succeed with a new key of
// any size up to the limits: a condition on it holds for an absent item.
var keyCalls = []keyCall{
	{"GetItem", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key})
		return err
	}},
	{"PutItem", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table), Item: withAttrs(key), ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		return err
	}},
	{"UpdateItem", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET v = :v"),
			ExpressionAttributeValues: item{":v": s("x")},
		})
		return err
	}},
	// A condition that fails on an absent item: an over-long key must be
	// refused before any condition is checked, as DynamoDB validates first.
	{"UpdateItem with a failing condition", "ConditionalCheckFailedException", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET v = :v"),
			ConditionExpression: aws.String("attribute_exists(pk)"), ExpressionAttributeValues: item{":v": s("x")},
		})
		return err
	}},
	{"DeleteItem", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(table), Key: key, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		return err
	}},
	{"Query", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		expr, values := "pk = :pk", item{":pk": key["pk"]}
		if sk, ok := key["sk"]; ok {
			expr, values[":sk"] = expr+" AND sk = :sk", sk
		}
		_, err := db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(table), KeyConditionExpression: aws.String(expr), ExpressionAttributeValues: values,
		})
		return err
	}},
	{"Query with a sort key range", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		expr, values := "pk = :pk", item{":pk": key["pk"]}
		if sk, ok := key["sk"]; ok {
			lo := s("0") // below every key the test makes, of sk's type
			if _, binary := sk.(*types.AttributeValueMemberB); binary {
				lo = &types.AttributeValueMemberB{Value: []byte{0}}
			}
			expr, values[":lo"], values[":sk"] = expr+" AND sk BETWEEN :lo AND :sk", lo, sk
		}
		_, err := db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(table), KeyConditionExpression: aws.String(expr), ExpressionAttributeValues: values,
		})
		return err
	}},
	{"BatchGetItem", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{table: {Keys: []item{key}}},
		})
		return err
	}},
	{"BatchWriteItem put", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{table: {{PutRequest: &types.PutRequest{Item: withAttrs(key)}}}},
		})
		return err
	}},
	{"BatchWriteItem delete", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{table: {{DeleteRequest: &types.DeleteRequest{Key: key}}}},
		})
		return err
	}},
	{"TransactWriteItems put", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		return transact(ctx, db, put(table, withAttrs(key), "attribute_not_exists(pk)"))
	}},
	{"TransactWriteItems put with a failing condition", canceled, func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		return transact(ctx, db, put(table, withAttrs(key), "attribute_exists(pk)"))
	}},
	{"TransactWriteItems update", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		return transact(ctx, db, update(table, key, "SET v = :s", "attribute_not_exists(pk)"))
	}},
	{"TransactWriteItems delete", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		return transact(ctx, db, del(table, key, "attribute_not_exists(pk)"))
	}},
	{"TransactWriteItems condition check", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		return transact(ctx, db, check(table, key, "attribute_not_exists(pk)"))
	}},
	{"TransactGetItems", "", func(ctx context.Context, db *dynamodb.Client, table string, key item) error {
		_, err := db.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: []types.TransactGetItem{
			{Get: &types.Get{TableName: aws.String(table), Key: key}},
		}})
		return err
	}},
}

func transact(ctx context.Context, db *dynamodb.Client, items ...types.TransactWriteItem) error {
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	return err
}

// bk is a key in the table b, whose keys are binary: tag followed by
// zeros up to pk and sk bytes.
func bk(tag string, pk, sk int) item {
	key := func(n int) types.AttributeValue {
		v := make([]byte, n)
		copy(v, tag)
		return &types.AttributeValueMemberB{Value: v}
	}
	return item{"pk": key(pk), "sk": key(sk)}
}

// TestKeySizeLimits holds every call that takes a key to DynamoDB's limits:
// a partition key of 2,048 bytes and a sort key of 1,024 bytes are taken,
// one byte more is refused with DynamoDB's ValidationException. A string
// counts its UTF-8 bytes, a binary its raw bytes.
func TestKeySizeLimits(t *testing.T) {
	t.Parallel()
	sd := startSides(t, nil)[0]
	seed(t, sd.db, "h", "r", false)
	binary := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeB}
	}
	if _, err := provision.CreateTable(t.Context(), sd.db, &dynamodb.CreateTableInput{
		TableName: aws.String("b"), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{binary("pk"), binary("sk")},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
	}); err != nil {
		t.Fatal(err)
	}
	for i, kc := range keyCalls {
		t.Run(kc.name, func(t *testing.T) {
			tag := fmt.Sprintf("%02d", i)
			for _, c := range []struct {
				what      string
				table     string
				at, above item // a key at the limit, and one a byte longer
				refusal   string
			}{
				{"partition key", "h", hk(sized(tag, 2048)), hk(sized(tag, 2049)), hashKeyTooLong},
				{"partition key with a sort key", "r", rk(sized(tag, 2048), "a"), rk(sized(tag, 2049), "a"), hashKeyTooLong},
				{"sort key", "r", rk(tag, sized(tag, 1024)), rk(tag, sized(tag, 1025)), rangeKeyTooLong},
				{"binary partition key", "b", bk(tag, 2048, 1), bk(tag, 2049, 1), hashKeyTooLong},
				{"binary sort key", "b", bk(tag, 2, 1024), bk(tag, 2, 1025), rangeKeyTooLong},
			} {
				if got := errorCode(kc.call(t.Context(), sd.db, c.table, c.at)); got != kc.ok {
					t.Errorf("%s at the limit: answered %q, want %q", c.what, got, kc.ok)
				}
				want := validation + ": " + c.refusal
				if got := answer(kc.call(t.Context(), sd.db, c.table, c.above)); got != want {
					t.Errorf("%s a byte over the limit: answered %q, want %q", c.what, got, want)
				}
			}
		})
	}
}

// TestExpressionSizeLimit holds each kind of expression to DynamoDB's 4 KB,
// counted on the expression as sent, spaces included.
func TestExpressionSizeLimit(t *testing.T) {
	t.Parallel()
	sd := startSides(t, nil)[0]
	seed(t, sd.db, "h", "r", false)
	padded := func(expr string, n int) *string { return aws.String(expr + strings.Repeat(" ", n-len(expr))) }
	for _, c := range []struct {
		name string
		call func(ctx context.Context, n int) error
	}{
		{"ConditionExpression", func(ctx context.Context, n int) error {
			_, err := sd.db.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String("h"), Item: item{"pk": s("c")}, ConditionExpression: padded("attribute_not_exists(v)", n),
			})
			return err
		}},
		{"UpdateExpression", func(ctx context.Context, n int) error {
			_, err := sd.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String("h"), Key: hk("u"), UpdateExpression: padded("SET v = :v", n),
				ExpressionAttributeValues: item{":v": s("x")},
			})
			return err
		}},
		{"KeyConditionExpression", func(ctx context.Context, n int) error {
			_, err := sd.db.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String("h"), KeyConditionExpression: padded("pk = :pk", n),
				ExpressionAttributeValues: item{":pk": s("h1")},
			})
			return err
		}},
		{"FilterExpression", func(ctx context.Context, n int) error {
			_, err := sd.db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("h"), FilterExpression: padded("attribute_exists(v)", n)})
			return err
		}},
		{"ProjectionExpression", func(ctx context.Context, n int) error {
			_, err := sd.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("h"), Key: hk("h1"), ProjectionExpression: padded("v", n)})
			return err
		}},
	} {
		if got := answer(c.call(t.Context(), 4096)); got != "" {
			t.Errorf("%s of 4,096 bytes: answered %q, want success", c.name, got)
		}
		want := "ValidationException: Invalid " + c.name + ": Expression size has exceeded the maximum allowed size; expression size: 4097"
		if got := answer(c.call(t.Context(), 4097)); got != want {
			t.Errorf("%s of 4,097 bytes: answered %q, want %q", c.name, got, want)
		}
	}
}

// sizedItem is an item in table h of exactly size bytes by DynamoDB's
// sizing: pk (2 + its bytes), a binary b counted by its raw bytes (1 + 16),
// a number (1 + 3 for 4 significant digits), a map of one string
// (1 + 3 + 1 + 1 + 1), and the string v that fills the rest (1 + its bytes).
func sizedItem(pk string, size int) item {
	fixed := 2 + len(pk) + 17 + 4 + 7 + 1
	return item{
		"pk": s(pk), "b": &types.AttributeValueMemberB{Value: make([]byte, 16)}, "n": n("1234"),
		"m": &types.AttributeValueMemberM{Value: item{"k": s("x")}}, "v": s(strings.Repeat("x", size-fixed)),
	}
}

// TestItemSizeLimit holds an item to DynamoDB's 400 KB by DynamoDB's
// sizing rules: 409,600 bytes are stored, one more is refused, on every
// write that carries a whole item and on an update that grows one.
func TestItemSizeLimit(t *testing.T) {
	t.Parallel()
	sd := startSides(t, nil)[0]
	seed(t, sd.db, "h", "r", false)
	const tooLarge = "ValidationException: Item size has exceeded the maximum allowed size"
	writes := []struct {
		name  string
		write func(ctx context.Context, it item) error
	}{
		{"PutItem", func(ctx context.Context, it item) error {
			_, err := sd.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("h"), Item: it})
			return err
		}},
		{"BatchWriteItem", func(ctx context.Context, it item) error {
			_, err := sd.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
				RequestItems: map[string][]types.WriteRequest{"h": {{PutRequest: &types.PutRequest{Item: it}}}},
			})
			return err
		}},
		{"TransactWriteItems", func(ctx context.Context, it item) error {
			return transact(ctx, sd.db, put("h", it, ""))
		}},
	}
	for i, w := range writes {
		if got := answer(w.write(t.Context(), sizedItem(fmt.Sprintf("%02d", i), 409_600))); got != "" {
			t.Errorf("%s of 409,600 bytes: answered %q, want success", w.name, got)
		}
		if got := answer(w.write(t.Context(), sizedItem(fmt.Sprintf("%02d", i), 409_601))); got != tooLarge {
			t.Errorf("%s of 409,601 bytes: answered %q, want %q", w.name, got, tooLarge)
		}
	}

	// A list counts 3 bytes, and 1 for each element: pk "l" (2 + 1) and v
	// (1 + 3) with 136,530 numbers 1 (1 + 2 each) and a string of tail
	// bytes (1 + tail) come to 409,598 + tail bytes.
	list := func(tail int) item {
		elems := make([]types.AttributeValue, 136_530, 136_531)
		for i := range elems {
			elems[i] = n("1")
		}
		return item{"pk": s("l"), "v": &types.AttributeValueMemberL{Value: append(elems, s(strings.Repeat("x", tail)))}}
	}
	if got := answer(writes[0].write(t.Context(), list(2))); got != "" {
		t.Errorf("a list of 409,600 bytes: answered %q, want success", got)
	}
	if got := answer(writes[0].write(t.Context(), list(3))); got != tooLarge {
		t.Errorf("a list of 409,601 bytes: answered %q, want %q", got, tooLarge)
	}
	// A number counts a byte for two significant digits, plus one: 20,479
	// numbers of 38 digits come to 409,580 bytes.
	numbers := make([]string, 20_479)
	for i := range numbers {
		numbers[i] = fmt.Sprintf("1%037d", i)
	}
	if got := answer(writes[0].write(t.Context(), item{"pk": s("n"), "v": &types.AttributeValueMemberNS{Value: numbers}})); got != "" {
		t.Errorf("a set of 20,479 numbers of 38 digits: answered %q, want success", got)
	}

	// An update that grows an item of 409,590 bytes by w (1 + 9) to its
	// limit is applied; one that grows it a byte further is refused.
	grow := func(ctx context.Context, pk, value string) error {
		_, err := sd.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String("h"), Key: hk(pk), UpdateExpression: aws.String("SET w = :w"),
			ExpressionAttributeValues: item{":w": s(value)},
		})
		return err
	}
	for _, pk := range []string{"g1", "g2"} {
		if _, err := sd.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String("h"), Item: sizedItem(pk, 409_590)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := answer(grow(t.Context(), "g1", strings.Repeat("x", 9))); got != "" {
		t.Errorf("UpdateItem to 409,600 bytes: answered %q, want success", got)
	}
	const updateTooLarge = "ValidationException: Item size to update has exceeded the maximum allowed size"
	if got := answer(grow(t.Context(), "g2", strings.Repeat("x", 10))); got != updateTooLarge {
		t.Errorf("UpdateItem to 409,601 bytes: answered %q, want %q", got, updateTooLarge)
	}

	// A refused write changes nothing, though moto applies an update's
	// actions, and a batch's puts, one at a time.
	_, err := sd.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName: aws.String("h"), Key: hk("g2"), UpdateExpression: aws.String("SET n = :n, m.k = :n, w = :w"),
		ExpressionAttributeValues: item{":n": n("9"), ":w": s(strings.Repeat("x", 10))},
	})
	if got := answer(err); got != updateTooLarge {
		t.Errorf("UpdateItem of three actions to 409,601 bytes: answered %q, want %q", got, updateTooLarge)
	}
	_, err = sd.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName: aws.String("h"), Key: hk("g3"), UpdateExpression: aws.String("SET n = :n, w = :w"),
		ExpressionAttributeValues: item{":n": n("9"), ":w": s(strings.Repeat("x", 409_600))},
	})
	if got := answer(err); got != updateTooLarge {
		t.Errorf("UpdateItem of a new item of 409,614 bytes: answered %q, want %q", got, updateTooLarge)
	}
	_, err = sd.db.BatchWriteItem(t.Context(), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"h": {
		{PutRequest: &types.PutRequest{Item: item{"pk": s("g4")}}},
		{PutRequest: &types.PutRequest{Item: sizedItem("g5", 409_601)}},
	}}})
	if got := answer(err); got != tooLarge {
		t.Errorf("BatchWriteItem of a put of 409,601 bytes after another: answered %q, want %q", got, tooLarge)
	}
	want := map[string]string{"g2": render(sizedItem("g2", 409_590)), "g3": "{}", "g4": "{}"}
	for pk, want := range want {
		out, err := sd.db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String("h"), Key: hk(pk), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if got := render(out.Item); got != want {
			t.Errorf("after the refused writes, %s holds %s, want %s", pk, got, want)
		}
	}
}

// TestTransactionLimits holds a transaction to DynamoDB's 4 MB of items
// and 100 actions, and TransactGetItems to 100 (moto refused 26).
func TestTransactionLimits(t *testing.T) {
	t.Parallel()
	sd := startSides(t, nil)[0]
	seed(t, sd.db, "h", "r", false)

	// Eleven puts: ten items of 400,000 bytes and one that brings the
	// total to n.
	puts := func(tag string, n int) []types.TransactWriteItem {
		var items []types.TransactWriteItem
		for i := range 10 {
			items = append(items, put("h", sizedItem(fmt.Sprintf("%s%02d", tag, i), 400_000), ""))
		}
		return append(items, put("h", sizedItem(tag+"10", n-10*400_000), ""))
	}
	if got := answer(transact(t.Context(), sd.db, puts("a", 4<<20)...)); got != "" {
		t.Errorf("a transaction of 4 MB: answered %q, want success", got)
	}
	const tooLarge = "ValidationException: Collection size of items exceeded, which can also be caused by " +
		"the aggregate size of the items in the transaction exceeding the 4MB limit"
	if got := answer(transact(t.Context(), sd.db, puts("b", 4<<20+1)...)); got != tooLarge {
		t.Errorf("a transaction of 4 MB and a byte: answered %q, want %q", got, tooLarge)
	}

	checks := func(n int) []types.TransactWriteItem {
		items := make([]types.TransactWriteItem, n)
		for i := range items {
			items[i] = check("h", hk(fmt.Sprintf("c%03d", i)), "attribute_not_exists(pk)")
		}
		return items
	}
	if got := answer(transact(t.Context(), sd.db, checks(100)...)); got != "" {
		t.Errorf("TransactWriteItems of 100 actions: answered %q, want success", got)
	}
	if got := errorCode(transact(t.Context(), sd.db, checks(101)...)); got != validation {
		t.Errorf("TransactWriteItems of 101 actions: answered %q, want %s", got, validation)
	}

	gets := func(n int) error {
		items := make([]types.TransactGetItem, n)
		for i := range items {
			items[i] = types.TransactGetItem{Get: &types.Get{TableName: aws.String("h"), Key: hk(fmt.Sprintf("g%03d", i))}}
		}
		_, err := sd.db.TransactGetItems(t.Context(), &dynamodb.TransactGetItemsInput{TransactItems: items})
		return err
	}
	if got := answer(gets(100)); got != "" {
		t.Errorf("TransactGetItems of 100 gets: answered %q, want success", got)
	}
	if got := errorCode(gets(101)); got != validation {
		t.Errorf("TransactGetItems of 101 gets: answered %q, want %s", got, validation)
	}
}
