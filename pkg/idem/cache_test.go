package idem_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// TestReplayCache: a warm replay makes no DynamoDB call; another
// fingerprint, another tenant, an evicted key or an expired record goes
// to the store.
func TestReplayCache(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	cache := idem.NewReplayCache(e.Store, 2)
	check := func(what string, want map[string]int) { t.Helper(); wantCalls(t, e.Calls, what, want) }
	settle := func(k idem.Key) *idem.Lease {
		t.Helper()
		l := dynamotest.Begin(t, e.Store, k, fpA)
		if err := e.Store.Commit(ctx, l, resp); err != nil {
			t.Fatal(err)
		}
		return l
	}
	replay := func(k idem.Key) {
		t.Helper()
		b, err := cache.Begin(ctx, k, fpA, nil)
		if err != nil || b.Replay == nil || !b.Replay.Equal(resp) || b.Status != idem.StatusSucceeded {
			t.Fatalf("replay through the cache: %+v, %v", b, err)
		}
		b.Replay.Body[0] = 'X' // the caller's copy, not the cache's
	}
	k := dynamotest.Key(t, "acme")
	l := settle(k)
	e.Calls.Snapshot()
	replay(k)
	check("cold replay", map[string]int{"PutItem": 1})
	replay(k)
	replay(k)
	check("warm replays", map[string]int{})

	if _, err := cache.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request: want mismatch, got %v", err)
	}
	check("another fingerprint", map[string]int{"PutItem": 1})
	other, _ := idem.NewKey("globex", k.Operation(), k.ClientKey())
	if b, err := cache.Begin(ctx, other, fpA, nil); err != nil || b.Lease == nil {
		t.Fatalf("another tenant's key: want a new lease, got %+v, %v", b, err)
	}
	check("another tenant", map[string]int{"PutItem": 1})

	k2, k3 := dynamotest.Key(t, "acme"), dynamotest.Key(t, "acme")
	settle(k2)
	settle(k3)
	replay(k2)
	replay(k3) // k and the other tenant's lease are the least recently used: dropped
	e.Calls.Snapshot()
	if idem.CacheLen(cache) != 2 {
		t.Fatalf("cache holds %d entries, want 2", idem.CacheLen(cache))
	}
	replay(k)
	check("an evicted key", map[string]int{"PutItem": 1})

	e.Clock.Advance(l.RecordExpiresAt.Sub(e.Clock.Now()) - time.Millisecond)
	replay(k) // a millisecond before the end of retention, still the cache's
	check("just before the end of retention", map[string]int{})
	e.Clock.Advance(time.Millisecond)
	// From the instant retention ends, for the cache as for the store.
	if b, err := cache.Begin(ctx, k, fpA, nil); err != nil || b.Lease == nil {
		t.Fatalf("at the end of retention: want a new command, got %+v, %v", b, err)
	}
	check("an expired record", map[string]int{"PutItem": 1})
}

// wantCalls fails the test unless the DynamoDB calls since the last look
// are want.
func wantCalls(t *testing.T, calls *idemtest.CallCounter, what string, want map[string]int) {
	t.Helper()
	if got := calls.Snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: DynamoDB calls %v, want %v", what, got, want)
	}
}

// TestReplayCacheKeepsItsOwnSettlements: a Commit or Fail through the
// cache of a lease begun through it makes the next Begin a warm replay,
// the same the store gives; a release, a lost lease, a taken-over lease
// or an unsettled command leaves the answer to the store, and retention
// and the size bound apply as to any replay.
func TestReplayCacheKeepsItsOwnSettlements(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	cache := idem.NewReplayCache(e.Store, 3)
	check := func(what string, want map[string]int) { t.Helper(); wantCalls(t, e.Calls, what, want) }
	lease := func(k idem.Key) *idem.Lease {
		t.Helper()
		b, err := cache.Begin(ctx, k, fpA, []byte("intent"))
		if err != nil || b.Lease == nil {
			t.Fatalf("Begin through the cache: want a new lease, got %+v, %v", b, err)
		}
		return b.Lease
	}
	replay := func(k idem.Key) idem.Begun {
		t.Helper()
		b, err := cache.Begin(ctx, k, fpA, nil)
		if err != nil || b.Replay == nil {
			t.Fatalf("Begin through the cache: want a replay, got %+v, %v", b, err)
		}
		return b
	}

	committed := dynamotest.Key(t, "acme")
	l := lease(committed)
	if err := cache.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	check("begin and commit", map[string]int{"PutItem": 1, "UpdateItem": 1})
	if b := replay(committed); !b.Replay.Equal(resp) || b.Status != idem.StatusSucceeded || !b.RecordExpiresAt.Equal(l.RecordExpiresAt) {
		t.Fatalf("replay of the cache's own commit: %+v", b)
	}
	check("the replay of a commit made through the cache", map[string]int{})

	// A response without headers or body replays from memory in the form
	// the store gives it.
	empty := dynamotest.Key(t, "acme")
	if err := cache.Commit(ctx, lease(empty), idem.Response{Status: 204}); err != nil {
		t.Fatal(err)
	}
	e.Calls.Snapshot()
	warm := replay(empty)
	cold, err := e.Store.Begin(ctx, empty, fpA, nil)
	if err != nil || cold.Replay == nil {
		t.Fatalf("the store's replay: %+v, %v", cold, err)
	}
	if !reflect.DeepEqual(*warm.Replay, *cold.Replay) || warm.Status != cold.Status || !warm.RecordExpiresAt.Equal(cold.RecordExpiresAt) {
		t.Fatalf("an empty response from memory %#v %s %v, from the store %#v %s %v",
			*warm.Replay, warm.Status, warm.RecordExpiresAt, *cold.Replay, cold.Status, cold.RecordExpiresAt)
	}
	e.Calls.Snapshot()

	declined := idem.Response{Status: 402, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: []byte(`{"type":"card-declined"}`)}
	failed := dynamotest.Key(t, "acme")
	if err := cache.Fail(ctx, lease(failed), declined); err != nil {
		t.Fatal(err)
	}
	e.Calls.Snapshot()
	if b := replay(failed); !b.Replay.Equal(declined) || b.Status != idem.StatusFailedPermanent {
		t.Fatalf("replay of the cache's own fail: %+v", b)
	}
	check("the replay of a fail made through the cache", map[string]int{})
	if _, err := cache.Begin(ctx, failed, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request on a key failed through the cache: want mismatch, got %v", err)
	}
	check("another fingerprint", map[string]int{"PutItem": 1})

	released := dynamotest.Key(t, "acme")
	if err := cache.Release(ctx, lease(released)); err != nil {
		t.Fatal(err)
	}
	e.Calls.Snapshot()
	lease(released)
	check("a key released through the cache", map[string]int{"PutItem": 1, "UpdateItem": 1}) // claimed again

	pending := dynamotest.Key(t, "acme")
	lease(pending)
	e.Calls.Snapshot()
	if _, err := cache.Begin(ctx, pending, fpA, nil); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("a command not settled: want in flight, got %v", err)
	}
	check("a command not settled", map[string]int{"PutItem": 1})

	// A lease taken over: the stalled holder's commit fails, the new
	// owner's (not begun through the cache) settles, and the store answers.
	e.Clock.Advance(31 * time.Second)
	taken, err := e.Store.TakeOver(ctx, pending)
	if err != nil {
		t.Fatal(err)
	}
	stalled := lease(dynamotest.Key(t, "acme")) // a lease of another key, to be lost below
	if _, err := e.Store.Preempt(ctx, stalled.Key, stalled.CreatedAt); err != nil {
		t.Fatal(err)
	}
	if err := cache.Commit(ctx, stalled, resp); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("a lost lease's commit: want ErrLeaseLost, got %v", err)
	}
	theirs := idem.Response{Status: 201, Body: []byte(`{"id":"ch_2"}`)}
	if err := cache.Commit(ctx, taken, theirs); err != nil {
		t.Fatal(err)
	}
	e.Calls.Snapshot()
	if b := replay(pending); !b.Replay.Equal(theirs) {
		t.Fatalf("after a take-over: replay %+v, want the new owner's", b)
	}
	check("a key committed under a lease taken over", map[string]int{"PutItem": 1})
	if _, err := cache.Begin(ctx, stalled.Key, fpA, nil); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("after a lost lease's commit: want in flight, got %v", err)
	}
	check("after a lost lease's commit", map[string]int{"PutItem": 1})

	// The bound: the cache holds the three entries used last, and the
	// first commit's was dropped long since; the store answers it.
	if idem.CacheLen(cache) != 3 {
		t.Fatalf("cache holds %d entries, want 3", idem.CacheLen(cache))
	}
	replay(committed)
	check("a commit dropped by the bound", map[string]int{"PutItem": 1})

	// Retention, as for a cached replay: the cache's own commit answers a
	// millisecond before it ends and not from the instant it does.
	mine := dynamotest.Key(t, "acme")
	l = lease(mine)
	if err := cache.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(l.RecordExpiresAt.Sub(e.Clock.Now()) - time.Millisecond)
	e.Calls.Snapshot()
	replay(mine)
	check("just before the end of retention", map[string]int{})
	e.Clock.Advance(time.Millisecond)
	lease(mine)
	check("at the end of retention", map[string]int{"PutItem": 1})
}
