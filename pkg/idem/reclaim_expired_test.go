package idem_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// slowAfterPut is DynamoDB as a claim meets it when time passes between
// its conditional PutItem's answer and the re-claim's UpdateItem (a GC
// pause, the SDK backing off a throttled UpdateItem).
type slowAfterPut struct {
	dynamostore.DynamoDBAPI
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
	ctx := t.Context()
	t.Parallel()
	const keep = 10 * time.Second
	clock := idemtest.NewClock(time.Now().Truncate(time.Second).Add(300 * time.Millisecond))
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, dynamostore.TableInput("revive"))
	opts := func(o *dynamostore.Options) { o.Clock, o.Retention, o.ReleaseRetention = clock.Now, keep, keep }
	s, err := dynamostore.New(db, table, opts)
	if err != nil {
		t.Fatal(err)
	}
	k, l := released(t, s, nil)
	created, expires := l.CreatedAt, l.RecordExpiresAt
	clock.Advance(expires.Sub(clock.Now()) - time.Millisecond) // 1 ms before the release expires

	slow, err := dynamostore.New(slowAfterPut{DynamoDBAPI: db, clock: clock, pause: 2 * time.Second}, table, opts)
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

// released begins a command with intent under a new key and releases it.
func released(t *testing.T, s idem.Backend, intent []byte) (idem.Key, *idem.Lease) {
	ctx := t.Context()
	t.Helper()
	k := idemtest.UniqueKey(t, "acme")
	b, err := s.Begin(ctx, k, fpA, intent)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, b.Lease); err != nil {
		t.Fatal(err)
	}
	return k, b.Lease
}

// steppedClock reads at until calls reads, then at after: time that
// passes between two of a Begin's readings of its clock.
type steppedClock struct {
	mu           sync.Mutex
	at, after    time.Time
	until, reads int
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.until > 0 && c.reads > c.until {
		return c.after
	}
	return c.at
}

func (c *steppedClock) set(at time.Time, stepAfter int, after time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.after, c.until, c.reads = at, after, stepAfter, 0
}

// TestExpiredReleaseIsClaimedWithTheCallersIntent: a release that expires
// between a retry's read of it and the re-claim's UpdateItem is claimed
// as a new intent, with the intent its caller gave (here none), as when
// it had expired before the claim; the lease used to carry the expired
// command's intent into the new record already.
func TestExpiredReleaseIsClaimedWithTheCallersIntent(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	const keep = 10 * time.Second
	oldIntent := []byte(`{"amount":5000,"currency":"EUR","source":"tok_old"}`)
	run := func(t *testing.T, s idem.Backend, clock *steppedClock, atomic bool) {
		k, l := released(t, s, oldIntent)
		created, expires := l.CreatedAt, l.RecordExpiresAt
		// The claim's PutItem and its read of the record see the release
		// 1 ms before it expires; the re-claim's clock reads after.
		// memstore reads its clock once, so its Begin meets the release
		// expired: the fresh claim the DynamoDB store's should equal.
		clock.set(expires.Add(-time.Millisecond), 2, expires.Add(time.Millisecond))
		if atomic {
			clock.set(expires.Add(time.Millisecond), 0, time.Time{})
		}
		again, err := s.Begin(ctx, k, fpA, nil)
		if err != nil || again.Lease == nil {
			t.Fatalf("retry: %+v, %v", again, err)
		}
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("record after the retry: %s, CreatedAt %v (old %v), intent %q; lease intent %q",
			rec.Status, rec.CreatedAt.Format(time.StampMilli), created.Format(time.StampMilli), rec.Intent, again.Lease.Intent)
		if !rec.CreatedAt.Equal(created) && (len(rec.Intent) > 0 || len(again.Lease.Intent) > 0) {
			t.Errorf("a new command (new CreatedAt) claimed without an intent carries the expired command's intent %q (lease: %q)", rec.Intent, again.Lease.Intent)
		}
	}
	base := time.Now().Truncate(time.Second).Add(300 * time.Millisecond)
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		clock := &steppedClock{at: base}
		run(t, memstore.New(func(o *memstore.Options) { o.Clock, o.Retention, o.ReleaseRetention = clock.Now, keep, keep }), clock, true)
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		clock := &steppedClock{at: base}
		s, err := dynamostore.New(dynamotest.Client(t), dynamotest.Table(t, dynamostore.TableInput("intent")), func(o *dynamostore.Options) {
			o.Clock, o.Retention, o.ReleaseRetention = clock.Now, keep, keep
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, s, clock, false)
	})
}
