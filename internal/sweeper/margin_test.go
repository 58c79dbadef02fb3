package sweeper_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// slowQueries makes every Query take d (or until its context ends), as a
// busy table's pages do.
func slowQueries(d time.Duration) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("slow", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if awsmw.GetOperationName(ctx) == "Query" {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return middleware.InitializeOutput{}, middleware.Metadata{}, ctx.Err()
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
		})
	}
}

// TestUnreadableItemsDoNotOutrunTheSafetyMargin: a run stops taking
// keys its safety margin before its context's deadline (OutOfTime), so it
// ends, and reports, before the Lambda does. A shard whose index holds many
// unreadable items is read past that point, page after page, since an
// unreadable item is passed over without asking whether the run may go
// on: the run reads into its deadline and fails.
func TestUnreadableItemsDoNotOutrunTheSafetyMargin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(o *dynamostore.Options) { o.Shards = 1 })
	db := testkit.Clients(t).DynamoDB
	for i := range 350 {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
			dynamostore.AttrPK:             &types.AttributeValueMemberS{Value: "not a key " + strconv.Itoa(i)},
			dynamostore.AttrLeaseShard:     &types.AttributeValueMemberN{Value: "0"},
			dynamostore.AttrLeaseExpiresAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(e.clock.Now().Add(-time.Minute).UnixMilli(), 10)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	slow, err := dynamostore.New(testkit.Clients(t, slowQueries(500*time.Millisecond)).DynamoDB, e.table, func(o *dynamostore.Options) {
		o.Clock, o.DefaultLease, o.Shards = e.clock.Now, 30*time.Second, 1
	})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := sweeper.New(slow, e.sender, func(o *sweeper.Options) {
		o.Clock, o.Metrics, o.Logger = e.clock.Now, e.metrics, slog.New(slog.NewJSONHandler(e.logs, nil))
		o.SafetyMargin = time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rctx, cancel := context.WithDeadline(ctx, start.Add(1700*time.Millisecond)) // stop taking keys at +0.7s
	defer cancel()
	sum, err := sw.Run(rctx)
	took := time.Since(start)
	if err != nil || !sum.OutOfTime || took > 1500*time.Millisecond {
		t.Fatalf("run took %v (stop at 700ms, deadline 1.7s): summary %+v, %v; want it out of time before the deadline, without an error", took.Round(time.Millisecond), sum, err)
	}
}
