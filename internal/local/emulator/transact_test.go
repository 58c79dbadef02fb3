package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/local/emulator"
	"github.com/chargeonce/chargeonce/internal/local/provision"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// side is one private emulator and a client for it that retries nothing:
// an error the emulator answered is what the test sees.
type side struct {
	url string
	db  *dynamodb.Client
}

// startSides starts one emulator per env (added to the environment it
// inherits), concurrently since each takes seconds; they are stopped when
// the test ends.
func startSides(t *testing.T, envs ...[]string) []side {
	t.Helper()
	sides := make([]side, len(envs))
	var wg sync.WaitGroup
	for i, env := range envs {
		wg.Go(func() {
			// emulator.py is what is under test, whatever EMULATOR says.
			e, err := emulator.Start(testkit.RepoRoot(), 0, append([]string{emulator.EnvKind + "=moto"}, env...)...)
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() {
				if err := e.Stop(); err != nil {
					t.Error(err)
				}
			})
			sides[i].url = e.URL()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	cfg, err := awsenv.Config(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sides {
		db := awsenv.New(cfg, awsenv.Emulator(sides[i].url)).DynamoDB
		sides[i].db = dynamodb.New(db.Options(), func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} })
	}
	return sides
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

type item = map[string]types.AttributeValue

// hk and rk are keys in the hash-only table and the hash+range table.
func hk(pk string) item     { return item{"pk": s(pk)} }
func rk(pk, sk string) item { return item{"pk": s(pk), "sk": s(sk)} }

// The four actions; cond is a condition expression or "".
func put(table string, it item, cond string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: it, ConditionExpression: optional(cond)}}
}

// update runs expr, which may use :one (1) and :s ("set").
func update(table string, key item, expr, cond string) types.TransactWriteItem {
	values := map[string]types.AttributeValue{}
	for name, v := range map[string]types.AttributeValue{":one": n("1"), ":s": s("set")} {
		if strings.Contains(expr+" "+cond, name) {
			values[name] = v
		}
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table), Key: key, UpdateExpression: aws.String(expr), ConditionExpression: optional(cond),
		ExpressionAttributeValues: values,
	}}
}

func del(table string, key item, cond string) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(table), Key: key, ConditionExpression: optional(cond)}}
}

// check is a ConditionCheck that asks for the item (ALL_OLD) when it fails.
func check(table string, key item, cond string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(table), Key: key, ConditionExpression: aws.String(cond),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

func optional(cond string) *string {
	if cond == "" {
		return nil
	}
	return aws.String(cond)
}

// step is one TransactWriteItems and the error code moto answers it with
// ("" for success).
type step struct {
	items []types.TransactWriteItem
	want  string
}

const (
	canceled   = "TransactionCanceledException"
	validation = "ValidationException"
)

// scenarios are transactions on a hash-only table h and a hash+range table
// r, seeded by seed, run in order.
var scenarios = []struct {
	name  string
	steps func(h, r string) []step
}{
	{"success", func(h, r string) []step {
		return []step{{items: []types.TransactWriteItem{
			put(h, item{"pk": s("h3"), "v": s("new")}, "attribute_not_exists(pk)"),
			update(h, hk("h1"), "ADD n :one", "attribute_exists(pk)"),
			del(r, rk("r1", "b"), ""),
			put(r, item{"pk": s("r3"), "sk": s("a")}, ""),
			check(r, rk("r2", "a"), "attribute_exists(pk)"),
		}}}
	}},
	{"condition fails on the first action", func(h, r string) []step {
		return []step{{want: canceled, items: []types.TransactWriteItem{
			check(h, hk("h1"), "attribute_not_exists(pk)"),
			put(h, item{"pk": s("h3")}, ""),
			update(h, hk("h2"), "ADD n :one", ""),
			del(r, rk("r1", "a"), ""),
			put(r, item{"pk": s("r3"), "sk": s("a")}, ""),
		}}}
	}},
	{"condition fails on the last action", func(h, r string) []step {
		return []step{{want: canceled, items: []types.TransactWriteItem{
			put(h, item{"pk": s("h3")}, ""),
			update(h, hk("h1"), "ADD n :one SET v = :s", ""),
			del(h, hk("h2"), "attribute_exists(pk)"),
			update(r, rk("r1", "a"), "SET v = :s", ""),
			put(r, item{"pk": s("r4"), "sk": s("x")}, ""),
			del(r, rk("r2", "a"), ""),
			update(h, hk("h9"), "SET v = :s", "attribute_exists(pk)"),
		}}}
	}},
	{"several conditions fail, with the old items", func(h, r string) []step {
		return []step{{want: canceled, items: []types.TransactWriteItem{
			put(h, item{"pk": s("h3")}, ""),
			check(h, hk("h1"), "attribute_not_exists(pk)"),
			check(r, rk("r1", "a"), "attribute_not_exists(n)"),
			check(r, rk("r9", "z"), "attribute_exists(pk)"),
			del(r, rk("r2", "a"), ""),
		}}}
	}},
	{"duplicate item in one transaction", func(h, r string) []step {
		return []step{
			{want: validation, items: []types.TransactWriteItem{
				put(h, item{"pk": s("h3")}, ""),
				update(h, hk("h3"), "ADD n :one", ""),
			}},
			{want: validation, items: []types.TransactWriteItem{
				update(r, rk("r1", "a"), "ADD n :one", ""),
				del(h, hk("h1"), ""),
				del(r, rk("r1", "a"), ""),
			}},
		}
	}},
	{"missing table", func(h, r string) []step {
		return []step{
			{want: "ResourceNotFoundException", items: []types.TransactWriteItem{
				put(h, item{"pk": s("h3")}, ""),
				put("no-such-table", item{"pk": s("x")}, ""),
			}},
			{want: canceled, items: []types.TransactWriteItem{
				put(h, item{"pk": s("h3")}, ""),
				del(r, rk("r1", "a"), ""),
				del("no-such-table", hk("x"), ""),
			}},
			{want: canceled, items: []types.TransactWriteItem{
				update(h, hk("h1"), "ADD n :one", ""),
				check("no-such-table", hk("x"), "attribute_exists(pk)"),
			}},
		}
	}},
	{"missing items and keys", func(h, r string) []step {
		return []step{
			{items: []types.TransactWriteItem{ // an update creates a missing item
				update(h, hk("h8"), "SET v = :s", ""),
				update(r, rk("r8", "a"), "ADD n :one", ""),
				del(h, hk("h9"), ""),
			}},
			{want: canceled, items: []types.TransactWriteItem{
				put(h, item{"pk": s("h3")}, ""),
				update(r, rk("r9", "a"), "SET v = :s", "attribute_exists(pk)"),
			}},
			{want: validation, items: []types.TransactWriteItem{
				put(h, item{"pk": s("h3")}, ""),
				del(r, hk("r1"), ""), // no sort key
			}},
			{want: canceled, items: []types.TransactWriteItem{
				put(h, item{"pk": s("h3")}, ""),
				put(r, item{"pk": s("r1"), "v": s("no sort key")}, ""),
			}},
		}
	}},
}

// seed creates the tables h (pk) and r (pk, sk), with a stream of new and
// old images if streams, and writes the same few items to them.
func seed(t *testing.T, db *dynamodb.Client, h, r string, streams bool) {
	t.Helper()
	ctx := context.Background()
	var spec *types.StreamSpecification
	if streams {
		spec = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages}
	}
	attr := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
	}
	key := func(name string, kt types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(name), KeyType: kt}
	}
	for _, in := range []*dynamodb.CreateTableInput{
		{TableName: aws.String(h), AttributeDefinitions: []types.AttributeDefinition{attr("pk")},
			KeySchema: []types.KeySchemaElement{key("pk", types.KeyTypeHash)}},
		{TableName: aws.String(r), AttributeDefinitions: []types.AttributeDefinition{attr("pk"), attr("sk")},
			KeySchema: []types.KeySchemaElement{key("pk", types.KeyTypeHash), key("sk", types.KeyTypeRange)}},
	} {
		in.BillingMode = types.BillingModePayPerRequest
		in.StreamSpecification = spec
		if _, err := provision.CreateTable(ctx, db, in); err != nil {
			t.Fatal(err)
		}
	}
	for table, items := range map[string][]item{
		h: {{"pk": s("h1"), "n": n("1"), "v": s("one")}, {"pk": s("h2"), "n": n("2")}},
		r: {{"pk": s("r1"), "sk": s("a"), "n": n("1")}, {"pk": s("r1"), "sk": s("b")}, {"pk": s("r2"), "sk": s("a")}},
	} {
		for _, it := range items {
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFastTransactionsMatchMoto runs the same transactions on an emulator
// whose transactions snapshot the items they name (the default) and on one
// that copies whole tables as moto does (EMULATOR_FAST_TRANSACTIONS=0), and
// requires identical answers, cancellation reasons, table contents and
// stream records after every transaction. A transaction that succeeded is
// sent again with its token, and must change nothing on either side.
func TestFastTransactionsMatchMoto(t *testing.T) {
	t.Parallel()
	sides := startSides(t, []string{emulator.EnvFastTransactions + "=0"}, []string{emulator.EnvFastTransactions + "=1"})
	moto, fast := sides[0], sides[1]
	for i, sc := range scenarios {
		for _, streams := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/streams=%t", sc.name, streams), func(t *testing.T) {
				h, r := fmt.Sprintf("h%d-%t", i, streams), fmt.Sprintf("r%d-%t", i, streams)
				seed(t, moto.db, h, r, streams)
				seed(t, fast.db, h, r, streams)
				for j, st := range sc.steps(h, r) {
					in := &dynamodb.TransactWriteItemsInput{
						TransactItems: st.items,
						// Unique in each emulator's 10-minute window.
						ClientRequestToken: aws.String(fmt.Sprintf("step-%d-%t-%d", i, streams, j)),
					}
					_, wantErr := moto.db.TransactWriteItems(context.Background(), in)
					_, gotErr := fast.db.TransactWriteItems(context.Background(), in)
					if code := errorCode(wantErr); code != st.want {
						t.Fatalf("step %d: moto answered %s, the scenario expects %q", j, describe(wantErr), st.want)
					}
					if want, got := describe(wantErr), describe(gotErr); got != want {
						t.Errorf("step %d: answer\n got %s\nwant %s", j, got, want)
					}
					for _, table := range []string{h, r} {
						if want, got := contents(t, moto, table), contents(t, fast, table); !slices.Equal(got, want) {
							t.Errorf("step %d: %s holds\n got %q\nwant %q", j, table, got, want)
						}
						if !streams {
							continue
						}
						if want, got := streamRecords(t, moto, table), streamRecords(t, fast, table); !slices.Equal(got, want) {
							t.Errorf("step %d: %s's stream\n got %q\nwant %q", j, table, got, want)
						}
					}
					if st.want == "" {
						resend(t, j, in, streams, h, r, moto, fast)
					}
				}
			})
		}
	}
}

// resend sends a transaction that succeeded again, with its token, as the
// SDK does when it lost the answer. As DynamoDB documents, each side
// answers success and changes no item and writes no stream record.
func resend(t *testing.T, j int, in *dynamodb.TransactWriteItemsInput, streams bool, h, r string, sides ...side) {
	t.Helper()
	state := func(sd side) []string {
		var all []string
		for _, table := range []string{h, r} {
			all = append(all, contents(t, sd, table)...)
			if streams {
				all = append(all, streamRecords(t, sd, table)...)
			}
		}
		return all
	}
	for _, sd := range sides {
		before := state(sd)
		if _, err := sd.db.TransactWriteItems(context.Background(), in); err != nil {
			t.Errorf("step %d sent again: %s", j, describe(err))
		}
		if after := state(sd); !slices.Equal(after, before) {
			t.Errorf("step %d sent again changed the tables or streams\n got %q\nwant %q", j, after, before)
		}
	}
}

// errorCode is the error's API error code, "" for nil.
func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// describe renders an answer: its code, its message and, for a cancelled
// transaction, every cancellation reason with its item.
func describe(err error) string {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return errorCode(err)
	}
	text := api.ErrorCode() + ": " + api.ErrorMessage()
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		for _, r := range tc.CancellationReasons {
			text += fmt.Sprintf("\n  [%s %q %s]", aws.ToString(r.Code), aws.ToString(r.Message), render(r.Item))
		}
	}
	return text
}

// render writes an item with its attributes in name order.
func render(it item) string {
	names := make([]string, 0, len(it))
	for name := range it {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + renderValue(it[name])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func renderValue(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return fmt.Sprintf("S%q", v.Value)
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberM:
		return "M" + render(v.Value)
	default:
		return fmt.Sprintf("%T", v) // the scenarios write no other types
	}
}

// contents is every item of table, rendered, in key order.
func contents(t *testing.T, sd side, table string) []string {
	t.Helper()
	out, err := sd.db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if out.LastEvaluatedKey != nil {
		t.Fatalf("scan %s: more than one page", table)
	}
	items := make([]string, len(out.Items))
	for i, it := range out.Items {
		items[i] = render(it)
	}
	return items
}

// streamRecords is every record of table's stream, without the fields that
// differ between two emulators (event id, time, size).
func streamRecords(t *testing.T, sd side, table string) []string {
	t.Helper()
	desc, err := sd.db.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	var stream struct {
		StreamDescription struct{ Shards []struct{ ShardId string } }
	}
	streamsCall(t, sd, "DescribeStream", map[string]any{"StreamArn": desc.Table.LatestStreamArn}, &stream)
	var records []string
	for _, shard := range stream.StreamDescription.Shards {
		var it struct{ ShardIterator string }
		streamsCall(t, sd, "GetShardIterator", map[string]any{
			"StreamArn": desc.Table.LatestStreamArn, "ShardId": shard.ShardId, "ShardIteratorType": "TRIM_HORIZON",
		}, &it)
		var got struct {
			Records []struct {
				EventName string
				Dynamodb  struct {
					Keys, NewImage, OldImage map[string]any
					SequenceNumber           string
					StreamViewType           string
				}
			}
		}
		streamsCall(t, sd, "GetRecords", map[string]any{"ShardIterator": it.ShardIterator, "Limit": 1000}, &got)
		for _, rec := range got.Records {
			b, err := json.Marshal(rec) // maps marshal in key order
			if err != nil {
				t.Fatal(err)
			}
			records = append(records, string(b))
		}
	}
	return records
}

// streamsCall makes a DynamoDB Streams call on sd's emulator, which routes
// it by its target and takes any credentials; the SDK's streams client is
// not a dependency of this module.
func streamsCall(t *testing.T, sd side, action string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, sd.url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDBStreams_20120810."+action)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("streams %s: %s %s", action, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("streams %s: %v", action, err)
	}
}

// TestClientRequestToken checks EMULATOR_HONOUR_REQUEST_TOKEN=1: a token
// repeated with the same parameters answers success and applies nothing,
// one repeated with other parameters fails, and the token of a failed
// transaction stays free.
func TestClientRequestToken(t *testing.T) {
	t.Parallel()
	sd := startSides(t, []string{emulator.EnvHonourRequestToken + "=1"})[0]
	ctx := context.Background()
	const table = "tokens"
	if _, err := provision.CreateTable(ctx, sd.db, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	// tx adds 1 to the counter, and applies the extra actions, under token.
	tx := func(token string, extra ...types.TransactWriteItem) error {
		_, err := sd.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			ClientRequestToken: aws.String(token),
			TransactItems:      append([]types.TransactWriteItem{update(table, hk("counter"), "ADD n :one", "")}, extra...),
		})
		return err
	}
	counter := func() string {
		t.Helper()
		out, err := sd.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: hk("counter"), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return render(out.Item)
	}

	for range 2 {
		if err := tx("token-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := counter(), `{n=N1 pk=S"counter"}`; got != want {
		t.Fatalf("after the same token twice: %s, want %s", got, want)
	}

	err := tx("token-1", put(table, hk("other"), ""))
	var mismatch *types.IdempotentParameterMismatchException
	if code := errorCode(err); code != "IdempotentParameterMismatchException" || !errors.As(err, &mismatch) {
		t.Fatalf("the same token with other parameters: %v (code %q), want IdempotentParameterMismatchException", err, code)
	}
	if got, want := counter(), `{n=N1 pk=S"counter"}`; got != want {
		t.Fatalf("after a mismatch: %s, want %s", got, want)
	}

	gated := check(table, hk("gate"), "attribute_exists(pk)")
	if code := errorCode(tx("token-2", gated)); code != canceled {
		t.Fatalf("a failing condition: code %q, want %s", code, canceled)
	}
	if _, err := sd.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: hk("gate")}); err != nil {
		t.Fatal(err)
	}
	if err := tx("token-2", gated); err != nil {
		t.Fatalf("the token of a failed transaction again: %v", err)
	}
	if err := tx("token-3"); err != nil {
		t.Fatal(err)
	}
	if got, want := counter(), `{n=N3 pk=S"counter"}`; got != want {
		t.Fatalf("after two more tokens: %s, want %s", got, want)
	}
}
