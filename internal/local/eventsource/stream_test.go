package eventsource_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/local/eventsource"
	"github.com/chargeonce/chargeonce/internal/local/provision"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// streamedTable is a table of items keyed by "id", its stream on.
func streamedTable(t *testing.T) (db *dynamodb.Client, table, arn string) {
	t.Helper()
	db = testkit.Clients(t).DynamoDB
	table = testkit.TempTable(t, &dynamodb.CreateTableInput{
		TableName:            aws.String("es"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	arn, err := provision.EnableStream(t.Context(), db, audit.StreamInput(table))
	if err != nil {
		t.Fatal(err)
	}
	return db, table, arn
}

func put(t *testing.T, db *dynamodb.Client, table string, n int) {
	t.Helper()
	for i := range n {
		if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: strconv.Itoa(i)}, "n": &types.AttributeValueMemberN{Value: strconv.Itoa(i)},
			"tags": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"b": &types.AttributeValueMemberB{Value: []byte{1}}}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAStreamIsHandedOverInOrderAsLambdaDoes: each change once, in its
// shard's order, in batches, as Lambda's DynamoDB event source builds them.
// Each is stamped to the second, as DynamoDB stamps it.
func TestAStreamIsHandedOverInOrderAsLambdaDoes(t *testing.T) {
	t.Parallel()
	db, table, arn := streamedTable(t)
	put(t, db, table, 5)
	var got []events.DynamoDBEventRecord
	p, err := eventsource.NewStream(testkit.Streams(t), arn, func(ctx context.Context, ev events.DynamoDBEvent) error {
		if _, ok := lambdacontext.FromContext(ctx); !ok {
			t.Error("no Lambda context")
		}
		got = append(got, ev.Records...)
		return nil
	}, func(o *eventsource.StreamOptions) { o.BatchSize = 2 })
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := p.Poll(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 5 {
		t.Fatalf("handed over %d records, want 5", len(got))
	}
	for i, r := range got {
		c := r.Change
		if r.EventName != "INSERT" || r.EventSourceArn != arn || r.AWSRegion == "" || r.EventID == "" ||
			c.NewImage["id"].String() != strconv.Itoa(i) || c.NewImage["n"].Number() != strconv.Itoa(i) ||
			!slices.Equal(c.NewImage["tags"].Map()["b"].Binary(), []byte{1}) || c.Keys["id"].String() != strconv.Itoa(i) ||
			c.ApproximateCreationDateTime.IsZero() || c.ApproximateCreationDateTime.Nanosecond() != 0 || c.StreamViewType != string(audit.StreamView) {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if b, err := p.Poll(t.Context()); err != nil || b.Records != 0 {
		t.Errorf("a poll after the last change: %+v %v, want nothing", b, err)
	}
}

// TestAFailedBatchIsHandedOverAgainAndNothingSkipsIt: as Lambda with
// unlimited retries, the poller hands a failed batch over again, whole,
// until it succeeds; the changes after it wait.
func TestAFailedBatchIsHandedOverAgainAndNothingSkipsIt(t *testing.T) {
	t.Parallel()
	db, table, arn := streamedTable(t)
	put(t, db, table, 3)
	fail := 2
	var handed [][]string
	p, err := eventsource.NewStream(testkit.Streams(t), arn, func(_ context.Context, ev events.DynamoDBEvent) error {
		var ids []string
		for _, r := range ev.Records {
			ids = append(ids, r.Change.Keys["id"].String())
		}
		handed = append(handed, ids)
		if fail > 0 {
			fail--
			return errors.New("s3 unreachable")
		}
		return nil
	}, func(o *eventsource.StreamOptions) { o.BatchSize = 2 })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []eventsource.StreamBatch{{Records: 2, Failed: 2}, {Records: 2, Failed: 2}, {Records: 2}, {Records: 1}, {}} {
		if b, err := p.Poll(t.Context()); err != nil || b != want {
			t.Fatalf("poll: %+v %v, want %+v", b, err, want)
		}
	}
	want := [][]string{{"0", "1"}, {"0", "1"}, {"0", "1"}, {"2"}}
	if !slices.EqualFunc(handed, want, slices.Equal) {
		t.Errorf("handed over %v, want %v", handed, want)
	}
}

func TestNewStreamChecksItsArguments(t *testing.T) {
	t.Parallel()
	api := testkit.Streams(t)
	h := func(context.Context, events.DynamoDBEvent) error { return nil }
	const arn = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-12-07T05:30:45.008689"
	for i, fn := range []func(*eventsource.StreamOptions){
		func(o *eventsource.StreamOptions) { o.BatchSize = 1001 },
		func(o *eventsource.StreamOptions) { o.Interval = -1 },
		func(o *eventsource.StreamOptions) { o.Timeout = -1 },
	} {
		if _, err := eventsource.NewStream(api, arn, h, fn); err == nil {
			t.Errorf("options %d accepted", i)
		}
	}
	if _, err := eventsource.NewStream(api, "arn:aws:dynamodb:us-east-1:123456789012:table/t", h); err == nil {
		t.Error("a table's arn accepted as a stream's")
	}
	if _, err := eventsource.NewStream(api, arn, nil); err == nil {
		t.Error("nil handler accepted")
	}
}
