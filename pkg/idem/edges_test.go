package idem_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestInFlightOutlivesRetention: a command whose outcome is unknown keeps
// its record however long it stays unknown. TTL must never turn it into a
// free key (another request would then be accepted and the first one's
// charge never recorded).
func TestInFlightOutlivesRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	k := key(t, "acme")
	l := begin(t, e.store, k, fpA)
	e.clock.Advance(3 * time.Hour)
	rec, err := e.store.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusInFlight || !rec.ExpiresAt.IsZero() {
		t.Fatalf("Get three retentions later: %+v, %v", rec, err)
	}
	if _, err := e.store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request three retentions later: want mismatch, got %v", err)
	}
	taken, err := e.store.TakeOver(ctx, k)
	if err != nil {
		t.Fatalf("TakeOver three retentions later: %v", err)
	}
	if !taken.CreatedAt.Equal(l.CreatedAt) || !taken.AttemptDeadline.Equal(l.AttemptDeadline) || taken.Attempts != 1 {
		t.Fatalf("taken-over lease %+v, first lease %+v", taken, l)
	}
	if err := e.store.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	rec, err = e.store.Get(ctx, k)
	if err != nil || !rec.ExpiresAt.Equal(taken.RecordExpiresAt) || !rec.ExpiresAt.After(e.clock.Now().Add(59*time.Minute)) {
		t.Fatalf("retention after the late commit: %+v, %v (now %v)", rec, err, e.clock.Now())
	}
}

// TestReleasedKeyAfterRetention: the released key's fingerprint is kept
// until retention ends, and then the key is free for a new command.
func TestReleasedKeyAfterRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	k := key(t, "acme")
	l := begin(t, e.store, k, fpA)
	if err := e.store.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(l.RecordExpiresAt.Sub(e.clock.Now()) - time.Second)
	if _, err := e.store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("just before retention ends: want mismatch, got %v", err)
	}
	e.clock.Advance(2 * time.Second)
	next := begin(t, e.store, k, fpB)
	if next.CreatedAt.Equal(l.CreatedAt) {
		t.Fatal("a new command after retention kept the released one's CreatedAt")
	}
}

// TestPostponeHidesTheLeaseUntilThen: a reconciler that cannot settle a
// command yet names when to try again; until then the key is neither
// listed as stuck nor taken over, and each take-over is counted.
func TestPostponeHidesTheLeaseUntilThen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *dynamostore.Options) { o.Shards = 1 })
	k := key(t, "acme")
	begin(t, e.store, k, fpA)
	e.clock.Advance(time.Minute)
	l, err := e.store.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	until := e.clock.Now().Add(10 * time.Minute)
	if err := e.store.Postpone(ctx, l, until); err != nil {
		t.Fatal(err)
	}
	stuck := func(at time.Time) []idem.Record {
		var out []idem.Record
		for sl, err := range e.store.StuckLeases(ctx, 0, at) {
			if err != nil {
				t.Fatal(err)
			}
			if sl.Key == k {
				out = append(out, sl)
			}
		}
		return out
	}
	e.clock.Advance(5 * time.Minute)
	if got := stuck(e.clock.Now()); len(got) != 0 {
		t.Fatalf("listed as stuck before the postponed time: %+v", got)
	}
	_, err = e.store.TakeOver(ctx, k)
	wantInFlight(t, err)
	e.clock.Advance(6 * time.Minute)
	if got := stuck(e.clock.Now()); len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("after the postponed time: stuck %+v, want the key with 1 attempt", got)
	}
	again, err := e.store.TakeOver(ctx, k)
	if err != nil || again.Attempts != 2 {
		t.Fatalf("second take-over: %+v, %v", again, err)
	}
	if err := e.store.Postpone(ctx, l, until); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("postpone by the taken-over lease: want ErrLeaseLost, got %v", err)
	}
}

// TestSettlementsRecogniseTheirOwnRetriedWrite: when the SDK retries a
// fenced write whose first attempt was applied, the retry fails its own
// fence. The store must read that as its own success, not as a lost
// lease: otherwise a decline is answered "outcome pending", a release
// "still leased", and a take-over is lost to the one who made it.
func TestSettlementsRecogniseTheirOwnRetriedWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	row := func(k idem.Key) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String(e.table),
			Item:                map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}
	}
	cases := []struct {
		name, op string
		settle   func(s *dynamostore.Store, l *idem.Lease) error
		want     idem.Status
	}{
		{"commit", "TransactWriteItems", func(s *dynamostore.Store, l *idem.Lease) error { return s.Commit(ctx, l, resp, row(l.Key)) }, idem.StatusSucceeded},
		{"commit without writes", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error { return s.Commit(ctx, l, resp) }, idem.StatusSucceeded},
		{"fail", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error { return s.Fail(ctx, l, resp) }, idem.StatusFailedPermanent},
		{"release", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error { return s.Release(ctx, l) }, idem.StatusReleased},
		{"take over", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error {
			e.clock.Advance(time.Minute)
			taken, err := s.TakeOver(ctx, l.Key)
			if err == nil && taken.Attempts != 1 {
				t.Errorf("take over after a lost answer counted %d attempts, want 1", taken.Attempts)
			}
			return err
		}, idem.StatusInFlight},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lossy := &loseFirstAnswer{op: c.op}
			db := dynamotest.Client(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lossy} })
			s, err := dynamostore.New(db, e.table, func(o *dynamostore.Options) { o.Clock = e.clock.Now })
			if err != nil {
				t.Fatal(err)
			}
			k := key(t, "acme")
			l := begin(t, e.store, k, fpA)
			if err := c.settle(s, l); err != nil {
				t.Fatalf("%s after a lost answer: %v", c.name, err)
			}
			if !lossy.done {
				t.Fatal("no answer was lost: the test proves nothing")
			}
			rec, err := e.store.Get(ctx, k)
			if err != nil || rec.Status != c.want {
				t.Fatalf("record after %s: %+v, %v", c.name, rec, err)
			}
		})
	}
}

// TestCommitRetriedByTheCaller: a Commit repeated with the same arguments
// (the caller's own retry after an error) is a success, as DynamoDB's
// ClientRequestToken makes it; one with other arguments is refused.
func TestCommitRetriedByTheCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := key(t, "acme")
	l := begin(t, e.store, k, fpA)
	row := types.TransactWriteItem{Put: &types.Put{
		TableName:           aws.String(e.table),
		Item:                map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}
	for i := range 2 {
		if err := e.store.Commit(ctx, l, resp, row); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
	}
	other := idem.Response{Status: 201, Body: []byte(`{"id":"ch_2"}`)}
	if err := e.store.Commit(ctx, l, other, row); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("commit with another response: want ErrLeaseLost, got %v", err)
	}
	wantReplay(t, e.store, k, resp)
}
