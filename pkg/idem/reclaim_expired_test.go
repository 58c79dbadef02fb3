package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// slowAfterPut is DynamoDB as a claim meets it when time passes between
// its conditional PutItem's answer and the re-claim's UpdateItem (a GC
// pause, the SDK backing off a throttled UpdateItem).
type slowAfterPut struct {
	idem.DynamoDBAPI
	clock *idemtest.Clock
	pause time.Duration
}

func (s slowAfterPut) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := s.DynamoDBAPI.PutItem(ctx, in, optFns...)
	s.clock.Advance(s.pause)
	return out, err
}

// TestReclaimDoesNotReviveAnExpiredRelease: a RELEASED record expires
// CreatedAt + ReleaseRetention however often it is released, and is absent
// from the instant its expiry names. When it expires between the claim's
// PutItem (refused: still live) and the re-claim's UpdateItem, the retry
// is a new intent with a CreatedAt of its own; the re-claim, once
// conditioned only on status, fingerprint and token, brought it back
// IN_FLIGHT under the old CreatedAt with no expiry.
func TestReclaimDoesNotReviveAnExpiredRelease(t *testing.T) {
	t.Parallel()
	const keep = 10 * time.Second
	clock := idemtest.NewClock(time.Now().Truncate(time.Second).Add(300 * time.Millisecond))
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, idem.TableInput("revive"))
	opts := func(o *idem.Options) { o.Clock, o.Retention, o.ReleaseRetention = clock.Now, keep, keep }
	s, err := idem.New(db, table, opts)
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	b, err := s.Begin(ctx, k, fpA, nil)
	if err != nil {
		t.Fatal(err)
	}
	created := b.Lease.CreatedAt
	if err := s.Release(ctx, b.Lease); err != nil {
		t.Fatal(err)
	}
	expires := b.Lease.RecordExpiresAt
	clock.Advance(expires.Sub(clock.Now()) - time.Millisecond) // 1 ms before the release expires

	slow, err := idem.New(slowAfterPut{DynamoDBAPI: db, clock: clock, pause: 2 * time.Second}, table, opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := slow.Begin(ctx, k, fpA, nil)
	if err != nil || again.Lease == nil {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	t.Logf("released record expired at %v; now %v; record %s, CreatedAt %v (%v old, ReleaseRetention %v), expiry %v",
		expires.Format(time.TimeOnly), now.Format(time.StampMilli), rec.Status, created.Format(time.StampMilli), now.Sub(created), keep, rec.ExpiresAt)
	if !now.Before(expires) && rec.CreatedAt.Equal(created) {
		t.Fatalf("the release expired at %v, yet at %v the key is IN_FLIGHT again under the old CreatedAt (%v old > ReleaseRetention %v), with no expiry",
			expires.Format(time.TimeOnly), now.Format(time.StampMilli), now.Sub(created), keep)
	}
}
