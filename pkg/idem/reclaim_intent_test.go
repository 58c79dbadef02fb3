package idem_test

import (
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

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
	t.Parallel()
	const keep = 10 * time.Second
	oldIntent := []byte(`{"amount":5000,"currency":"EUR","source":"tok_old"}`)
	run := func(t *testing.T, s idem.RecoveryBackend, clock *steppedClock, atomic bool) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, oldIntent)
		if err != nil {
			t.Fatal(err)
		}
		created := b.Lease.CreatedAt
		if err := s.Release(ctx, b.Lease); err != nil {
			t.Fatal(err)
		}
		expires := b.Lease.RecordExpiresAt
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
		run(t, memstore.New(func(o *idem.Options) { o.Clock, o.Retention, o.ReleaseRetention = clock.Now, keep, keep }), clock, true)
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		clock := &steppedClock{at: base}
		s, err := idem.New(dynamotest.Client(t), dynamotest.Table(t, idem.TableInput("intent")), func(o *idem.Options) {
			o.Clock, o.Retention, o.ReleaseRetention = clock.Now, keep, keep
		})
		if err != nil {
			t.Fatal(err)
		}
		run(t, s, clock, false)
	})
}
