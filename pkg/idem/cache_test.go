package idem_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestReplayCache: a warm replay makes no DynamoDB call; another
// fingerprint, another tenant, an evicted key or an expired record goes
// to the store.
func TestReplayCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *idem.Options) { o.Retention = time.Hour })
	cache := idem.NewReplayCache(e.store, 2, func(o *idem.CacheOptions) { o.Clock = e.clock.Now })
	check := func(what string, want map[string]int) {
		t.Helper()
		if got := e.calls.Snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: DynamoDB calls %v, want %v", what, got, want)
		}
	}
	settle := func(k idem.Key) *idem.Lease {
		t.Helper()
		l := begin(t, e.store, k, fpA)
		if err := e.store.Commit(ctx, l, resp); err != nil {
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
	k := key(t, "acme")
	l := settle(k)
	e.calls.Snapshot()
	replay(k)
	check("cold replay", map[string]int{"PutItem": 1})
	replay(k)
	replay(k)
	check("warm replays", map[string]int{})

	if _, err := cache.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("another request: want mismatch, got %v", err)
	}
	check("another fingerprint", map[string]int{"PutItem": 1})
	other, _ := idem.NewKey("globex", k.Operation(), k.ClientKey())
	if b, err := cache.Begin(ctx, other, fpA, nil); err != nil || b.Lease == nil {
		t.Fatalf("another tenant's key: want a new lease, got %+v, %v", b, err)
	}
	check("another tenant", map[string]int{"PutItem": 1})

	k2, k3 := key(t, "acme"), key(t, "acme")
	settle(k2)
	settle(k3)
	replay(k2)
	replay(k3) // k is the least recently used of three: dropped
	e.calls.Snapshot()
	if cache.Len() != 2 {
		t.Fatalf("cache holds %d entries, want 2", cache.Len())
	}
	replay(k)
	check("an evicted key", map[string]int{"PutItem": 1})

	e.clock.Advance(l.RecordExpiresAt.Sub(e.clock.Now()) - time.Millisecond)
	replay(k) // a millisecond before the end of retention, still the cache's
	check("just before the end of retention", map[string]int{})
	e.clock.Advance(time.Millisecond)
	// From the instant retention ends, for the cache as for the store.
	if b, err := cache.Begin(ctx, k, fpA, nil); err != nil || b.Lease == nil {
		t.Fatalf("at the end of retention: want a new command, got %+v, %v", b, err)
	}
	check("an expired record", map[string]int{"PutItem": 1})
}
