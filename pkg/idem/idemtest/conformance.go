package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

var (
	fpA  = idem.FingerprintOf([]byte(`{"amount":100}`))
	fpB  = idem.FingerprintOf([]byte(`{"amount":200}`))
	resp = idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"ch_1"}`)}
)

// suite is one store under test with the clock it reads.
type suite struct {
	Subject
	clock *Clock
}

func (c *suite) begin(t *testing.T, k idem.Key, fp idem.Fingerprint) *idem.Lease {
	t.Helper()
	b, err := c.Store.Begin(context.Background(), k, fp, []byte("intent"))
	if err != nil || b.Lease == nil || b.Status != idem.StatusInFlight {
		t.Fatalf("Begin: want a new lease, got %+v, %v", b, err)
	}
	if b.RecordExpiresAt.IsZero() || b.Lease.RecordExpiresAt.IsZero() {
		t.Fatalf("Begin: a lease without RecordExpiresAt: %+v", b)
	}
	return b.Lease
}

func (c *suite) wantReplay(t *testing.T, k idem.Key, want idem.Response, status idem.Status) {
	t.Helper()
	b, err := c.Store.Begin(context.Background(), k, fpA, nil)
	if err != nil || b.Replay == nil || b.Lease != nil || b.RecordExpiresAt.IsZero() {
		t.Fatalf("Begin: want a replay with its RecordExpiresAt, got %+v, %v", b, err)
	}
	if !b.Replay.Equal(want) || b.Status != status {
		t.Fatalf("replay = %s %d %q %v, want %s %d %q %v", b.Status, b.Replay.Status, b.Replay.Body, b.Replay.Headers, status, want.Status, want.Body, want.Headers)
	}
}

// wantInFlight checks err by its sentinel alone. The contract lets a store
// return ErrInFlight plain or as *InFlightError.
func wantInFlight(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("want ErrInFlight, got %v", err)
	}
}

// RunConformance checks that the stores newSubject builds keep pkg/idem's
// contract. It covers the lifecycle and its forbidden transitions, and
// fencing after a take-over. It covers retention, the mismatch rule,
// tenant scoping and the size limit. It covers the stuck-lease listing,
// and one owner under concurrent claims. It covers idem.Recover's
// take-over, resolution and settlement on the store. Each subtest builds
// its own store and uses keys of its own. It runs in parallel with the
// others.
func RunConformance(t *testing.T, newSubject NewSubject) {
	tests := []struct {
		name string
		opts func(*Options)
		run  func(t *testing.T, c *suite)
	}{
		{"Commit then replay", nil, commitThenReplay},
		{"Fail then replay", nil, failThenReplay},
		{"Empty response", nil, emptyResponse},
		{"Release keeps the fingerprint", nil, releaseKeepsFingerprint},
		{"Heartbeat extends the lease", nil, heartbeatExtends},
		{"Terminal records are final", nil, terminalIsFinal},
		{"Only the lease owner settles", nil, onlyOwnerSettles},
		{"TakeOver needs an expired lease", nil, takeOverNeedsExpiry},
		{"Fencing after TakeOver", nil, fencingAfterTakeOver},
		{"Commit repeated by its lease", nil, commitRepeated},
		{"Retention from the lease's end", retention(time.Hour), retentionFromLeaseEnd},
		{"IN_FLIGHT outlives retention", retention(time.Hour), inFlightOutlivesRetention},
		{"RELEASED until retention ends", retention(time.Hour), releasedUntilRetention},
		{"Expired from the second it names", retention(time.Hour), expiredFromItsSecond},
		{"An unsettled key's expiry is the earliest", func(o *Options) { o.Retention, o.ReleaseRetention = 24*time.Hour, 23*time.Hour }, earliestWhileUnsettled},
		{"Mismatch never replays", nil, mismatchNeverReplays},
		{"Tenants do not share keys", nil, tenantsApart},
		{"Size limit", nil, sizeLimit},
		{"Stuck leases", shards(2), stuckLeases},
		{"Postpone hides the lease", shards(1), postponeHides},
		{"A queued recovery's mark", retention(time.Hour), queuedMark},
		{"Concurrent Begin has one owner", nil, oneOwner},
		{"Preempt fences a live holder", nil, preemptLive},
		{"Preempt claims a release back", retention(time.Hour), preemptReleased},
		{"Recover settles as resolved", nil, recoverSettles},
		{"Recover leaves alone what needs no recovery", nil, recoverLeavesAlone},
		{"Recover postpones an unknown outcome", shards(1), recoverPostpones},
		{"Recover after a resolver's error", nil, recoverResolverFails},
		{"ReleaseLocalEffect fences the dead attempt", nil, releaseLocalEffect},
		{"A done context changes nothing", nil, doneContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := NewClock(time.Now())
			o := Options{Clock: clock.Now, DefaultLease: 30 * time.Second}
			if tc.opts != nil {
				tc.opts(&o)
			}
			tc.run(t, &suite{Subject: newSubject(t, o), clock: clock})
		})
	}
}

func retention(d time.Duration) func(*Options) { return func(o *Options) { o.Retention = d } }
func shards(n int) func(*Options)              { return func(o *Options) { o.Shards = n } }

func commitThenReplay(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	_, err := c.Store.Begin(ctx, k, fpA, nil)
	wantInFlight(t, err)
	if err := c.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
	rec, err := c.Store.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusSucceeded || string(rec.Intent) != "intent" || rec.Fingerprint != fpA.String() ||
		!rec.CreatedAt.Equal(l.CreatedAt) || !rec.ExpiresAt.Equal(l.RecordExpiresAt) || !rec.LeaseExpiresAt.IsZero() || rec.LeaseToken != l.Token {
		t.Fatalf("Get = %+v, %v (lease %+v)", rec, err, l)
	}
}

func failThenReplay(t *testing.T, c *suite) {
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	declined := idem.Response{Status: 402, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: []byte(`{"type":"card-declined"}`)}
	if err := c.Store.Fail(context.Background(), l, declined); err != nil {
		t.Fatal(err)
	}
	c.wantReplay(t, k, declined, idem.StatusFailedPermanent)
}

func emptyResponse(t *testing.T, c *suite) {
	ctx := context.Background()
	empty := idem.Response{}
	k := UniqueKey(t, "acme")
	if err := c.Store.Commit(ctx, c.begin(t, k, fpA), empty); err != nil {
		t.Fatalf("commit of an empty response: %v", err)
	}
	c.wantReplay(t, k, empty, idem.StatusSucceeded)
	if c.Row != nil {
		k := UniqueKey(t, "acme")
		if err := c.Store.Commit(ctx, c.begin(t, k, fpA), empty, c.Row("empty-"+k.ClientKey())); err != nil {
			t.Fatalf("commit of an empty response with a business write: %v", err)
		}
		c.wantReplay(t, k, empty, idem.StatusSucceeded)
	}
	k = UniqueKey(t, "acme")
	if err := c.Store.Fail(ctx, c.begin(t, k, fpA), empty); err != nil {
		t.Fatalf("fail with an empty response: %v", err)
	}
	c.wantReplay(t, k, empty, idem.StatusFailedPermanent)
}

func releaseKeepsFingerprint(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	c.clock.Advance(time.Second)
	if err := c.Store.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	rec, err := c.Store.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusReleased || rec.Fingerprint != fpA.String() || rec.Response != nil {
		t.Fatalf("Get after release: %+v, %v", rec, err)
	}
	if _, err := c.Store.TakeOver(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("take over of a released key: want ErrNotFound, got %v", err)
	}
	if _, err := c.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request on a released key: want mismatch, got %v", err)
	}
	again := c.begin(t, k, fpA)
	if !again.CreatedAt.Equal(l.CreatedAt) || again.Token == l.Token {
		t.Fatalf("claim after release: CreatedAt %v (was %v), token %s (was %s)", again.CreatedAt, l.CreatedAt, again.Token, l.Token)
	}
	if err := c.Store.Release(ctx, l); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the first lease after the key was claimed again: want ErrLeaseLost, got %v", err)
	}
	if err := c.Store.Commit(ctx, again, resp); err != nil {
		t.Fatal(err)
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
}

func heartbeatExtends(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	first := l.ExpiresAt
	c.clock.Advance(20 * time.Second)
	if err := c.Store.Heartbeat(ctx, l); err != nil {
		t.Fatal(err)
	}
	if !l.ExpiresAt.After(first) || !l.AttemptDeadline.Equal(l.ExpiresAt) {
		t.Fatalf("lease not extended: %v then %+v", first, l)
	}
	rec, err := c.Store.Get(ctx, k)
	if err != nil || !rec.LeaseExpiresAt.Equal(l.ExpiresAt) || !rec.AttemptDeadline.Equal(l.ExpiresAt) {
		t.Fatalf("stored lease %+v, want %v (%v)", rec, l.ExpiresAt, err)
	}
}

func terminalIsFinal(t *testing.T, c *suite) {
	ctx := context.Background()
	for name, finish := range map[string]func(*idem.Lease) error{
		"succeeded":        func(l *idem.Lease) error { return c.Store.Commit(ctx, l, resp) },
		"failed permanent": func(l *idem.Lease) error { return c.Store.Fail(ctx, l, resp) },
	} {
		k := UniqueKey(t, "acme")
		l := c.begin(t, k, fpA)
		if err := finish(l); err != nil {
			t.Fatal(err)
		}
		for op, again := range map[string]func() error{
			"commit":    func() error { return c.Store.Commit(ctx, l, idem.Response{Status: 500}) },
			"fail":      func() error { return c.Store.Fail(ctx, l, idem.Response{Status: 500}) },
			"release":   func() error { return c.Store.Release(ctx, l) },
			"heartbeat": func() error { return c.Store.Heartbeat(ctx, l) },
			"postpone":  func() error { return c.Store.Postpone(ctx, l, c.clock.Now().Add(time.Hour)) },
		} {
			if err := again(); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("%s after %s: want ErrLeaseLost, got %v", op, name, err)
			}
		}
		c.clock.Advance(time.Hour) // every lease long expired
		if _, err := c.Store.TakeOver(ctx, k); !errors.Is(err, idem.ErrCompleted) {
			t.Errorf("take over of %s: want ErrCompleted, got %v", name, err)
		}
		c.clock.Advance(-time.Hour)
		status := idem.StatusSucceeded
		if name != "succeeded" {
			status = idem.StatusFailedPermanent
		}
		c.wantReplay(t, k, resp, status)
	}
}

func onlyOwnerSettles(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	impostor := *l
	impostor.Token = strings.Repeat("0", len(l.Token))
	for op, try := range map[string]func() error{
		"commit":    func() error { return c.Store.Commit(ctx, &impostor, resp) },
		"fail":      func() error { return c.Store.Fail(ctx, &impostor, resp) },
		"release":   func() error { return c.Store.Release(ctx, &impostor) },
		"heartbeat": func() error { return c.Store.Heartbeat(ctx, &impostor) },
		"postpone":  func() error { return c.Store.Postpone(ctx, &impostor, c.clock.Now()) },
	} {
		if err := try(); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("%s by another token: want ErrLeaseLost, got %v", op, err)
		}
	}
	if err := c.Store.Commit(ctx, l, resp); err != nil {
		t.Fatalf("the owner's commit: %v", err)
	}
	// A lease for a key that has no record settles nothing.
	ghost := impostor
	ghost.Key = UniqueKey(t, "acme")
	if err := c.Store.Commit(ctx, &ghost, resp); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("commit of an absent key: want ErrLeaseLost, got %v", err)
	}
}

func takeOverNeedsExpiry(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	c.begin(t, k, fpA)
	_, err := c.Store.TakeOver(ctx, k)
	wantInFlight(t, err)
	if _, err := c.Store.TakeOver(ctx, UniqueKey(t, "acme")); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("take over of an absent key: want ErrNotFound, got %v", err)
	}
}

func fencingAfterTakeOver(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := c.begin(t, k, fpA)
	c.clock.Advance(31 * time.Second) // A's lease runs out
	b, err := c.Store.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token == a.Token || string(b.Intent) != "intent" || !b.CreatedAt.Equal(a.CreatedAt) || b.Attempts != 1 ||
		!b.AttemptDeadline.Equal(a.AttemptDeadline) {
		t.Fatalf("taken-over lease = %+v (A's: %+v)", b, a)
	}
	for op, try := range map[string]func() error{
		"heartbeat": func() error { return c.Store.Heartbeat(ctx, a) },
		"postpone":  func() error { return c.Store.Postpone(ctx, a, c.clock.Now().Add(time.Hour)) },
		"release":   func() error { return c.Store.Release(ctx, a) },
	} {
		if err := try(); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("A's %s after the take-over: want ErrLeaseLost, got %v", op, err)
		}
	}
	rowB, rowA := "b-"+k.ClientKey(), "a-"+k.ClientKey()
	if c.Row == nil {
		if err := c.Store.Commit(ctx, b, resp); err != nil {
			t.Fatalf("B's commit: %v", err)
		}
		if err := c.Store.Commit(ctx, a, idem.Response{Status: 201, Body: []byte("A")}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("A's late commit: want ErrLeaseLost, got %v", err)
		}
	} else {
		if err := c.Store.Commit(ctx, b, resp, c.Row(rowB)); err != nil {
			t.Fatalf("B's commit: %v", err)
		}
		if err := c.Store.Commit(ctx, a, idem.Response{Status: 201, Body: []byte("A")}, c.Row(rowA)); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("A's late commit: want ErrLeaseLost, got %v", err)
		}
		if !c.RowExists(t, rowB) || c.RowExists(t, rowA) {
			t.Errorf("business rows: B's present %v (want true), A's present %v (want false)", c.RowExists(t, rowB), c.RowExists(t, rowA))
		}
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
	rec, err := c.Store.Get(ctx, k)
	if err != nil || rec.LeaseToken != b.Token || rec.Attempts != 1 {
		t.Fatalf("record after B's commit: %+v, %v", rec, err)
	}
}

func commitRepeated(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	for i := range 2 {
		if err := c.Store.Commit(ctx, l, resp); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
	}
	other := idem.Response{Status: 201, Body: []byte(`{"id":"ch_2"}`)}
	if err := c.Store.Commit(ctx, l, other); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("commit with another response: want ErrLeaseLost, got %v", err)
	}
	if err := c.Store.Fail(ctx, l, resp); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("fail after commit: want ErrLeaseLost, got %v", err)
	}
	r := UniqueKey(t, "acme")
	lr := c.begin(t, r, fpA)
	for i := range 2 {
		if err := c.Store.Release(ctx, lr); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
}

func retentionFromLeaseEnd(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	if err := c.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	if want := l.ExpiresAt.Add(time.Hour).Truncate(time.Second); !l.RecordExpiresAt.Equal(want) {
		t.Fatalf("retention ends %v, want an hour after the lease %v", l.RecordExpiresAt, want)
	}
	c.clock.Advance(l.RecordExpiresAt.Sub(c.clock.Now()) - time.Second)
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
	c.clock.Advance(2 * time.Second)
	if _, err := c.Store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get of an expired record: want ErrNotFound, got %v", err)
	}
	if _, err := c.Store.TakeOver(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("TakeOver of an expired record: want ErrNotFound, got %v", err)
	}
	next := c.begin(t, k, fpB) // a new command under the old key
	if !next.CreatedAt.After(l.CreatedAt) {
		t.Fatalf("the new command's CreatedAt %v does not tell it from the old one's %v", next.CreatedAt, l.CreatedAt)
	}
}

func inFlightOutlivesRetention(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	c.clock.Advance(3 * time.Hour)
	rec, err := c.Store.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusInFlight || !rec.ExpiresAt.IsZero() || !rec.LeaseExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("Get three retentions later: %+v, %v", rec, err)
	}
	if _, err := c.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request three retentions later: want ErrMismatch, got %v", err)
	}
	taken, err := c.Store.TakeOver(ctx, k)
	if err != nil {
		t.Fatalf("TakeOver three retentions later: %v", err)
	}
	if err := c.Store.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	rec, err = c.Store.Get(ctx, k)
	if err != nil || !rec.ExpiresAt.Equal(taken.RecordExpiresAt) || !rec.ExpiresAt.After(c.clock.Now().Add(59*time.Minute)) {
		t.Fatalf("retention after the late commit: %+v, %v (now %v)", rec, err, c.clock.Now())
	}
}

// releasedUntilRetention: a released command's key lives Retention from
// its creation, however often it is released. A re-claim and a second
// release do not move its end.
func releasedUntilRetention(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	if err := c.Store.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	end := time.Unix(l.CreatedAt.Add(time.Hour).Unix(), 0)
	if !l.RecordExpiresAt.Equal(end) {
		t.Fatalf("released until %v, want an hour after its creation %v", l.RecordExpiresAt, end)
	}
	c.clock.Advance(40 * time.Minute)
	again := c.begin(t, k, fpA)
	if !again.CreatedAt.Equal(l.CreatedAt) {
		t.Fatalf("the re-claim's CreatedAt %v, want the command's %v", again.CreatedAt, l.CreatedAt)
	}
	if err := c.Store.Release(ctx, again); err != nil {
		t.Fatal(err)
	}
	if rec, err := c.Store.Get(ctx, k); err != nil || !rec.ExpiresAt.Equal(end) || !again.RecordExpiresAt.Equal(end) {
		t.Fatalf("after a second release: %+v, %v, lease says %v; want it to end at %v still", rec, err, again.RecordExpiresAt, end)
	}
	c.clock.Advance(end.Sub(c.clock.Now()) - time.Second)
	if _, err := c.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("just before retention ends: want mismatch, got %v", err)
	}
	c.clock.Advance(2 * time.Second)
	next := c.begin(t, k, fpB)
	if next.CreatedAt.Equal(l.CreatedAt) {
		t.Fatal("a new command after retention kept the released one's CreatedAt")
	}
}

// expiredFromItsSecond: a record is absent from the instant its expiry
// names, to the millisecond. That is the Idempotency-Expires a client is
// told. It holds for Get and for Begin alike. Another request under the
// key in that second is a new command, not a mismatch.
func expiredFromItsSecond(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	if err := c.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(l.RecordExpiresAt.Sub(c.clock.Now()) - time.Millisecond)
	if _, err := c.Store.Get(ctx, k); err != nil {
		t.Fatalf("Get a millisecond before expiry: %v", err)
	}
	if _, err := c.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request a millisecond before expiry: want mismatch, got %v", err)
	}
	c.clock.Advance(time.Millisecond) // the instant it names
	if _, err := c.Store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get at the instant of expiry: want ErrNotFound, got %v", err)
	}
	c.clock.Advance(500 * time.Millisecond) // inside the expiry's second
	if _, err := c.Store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get in the expiry's second: want ErrNotFound, got %v", err)
	}
	next := c.begin(t, k, fpB)
	if next.CreatedAt.Equal(l.CreatedAt) {
		t.Fatal("a new command in the expiry's second kept the old one's CreatedAt")
	}
}

func mismatchNeverReplays(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	if _, err := c.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("in flight, other body: want mismatch, got %v", err)
	}
	if err := c.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	b, err := c.Store.Begin(ctx, k, fpB, nil)
	if !errors.Is(err, idem.ErrMismatch) || b.Replay != nil || b.Lease != nil {
		t.Fatalf("completed, other body: want mismatch and nothing else, got %+v %v", b, err)
	}
	var mismatch *idem.MismatchError
	if errors.As(err, &mismatch) && !mismatch.RecordExpiresAt.Equal(l.RecordExpiresAt) {
		t.Fatalf("completed, other body: the mismatch's expiry %v, want the record's %v", mismatch.RecordExpiresAt, l.RecordExpiresAt)
	}
}

func tenantsApart(t *testing.T, c *suite) {
	ka := UniqueKey(t, "tenant-a")
	kb, err := idem.NewKey("tenant-b", ka.Operation(), ka.ClientKey())
	if err != nil {
		t.Fatal(err)
	}
	l := c.begin(t, ka, fpA)
	if err := c.Store.Commit(context.Background(), l, resp); err != nil {
		t.Fatal(err)
	}
	c.begin(t, kb, fpA) // same client key and body, other tenant: a new command
}

func sizeLimit(t *testing.T, c *suite) {
	ctx := context.Background()
	if _, err := c.Store.Begin(ctx, UniqueKey(t, "acme"), fpA, make([]byte, 200*1024)); !errors.Is(err, idem.ErrTooLarge) {
		t.Fatalf("oversized intent: want ErrTooLarge, got %v", err)
	}
	k := UniqueKey(t, "acme")
	l := c.begin(t, k, fpA)
	big := idem.Response{Status: 201, Body: make([]byte, 500*1024)}
	rand.NewChaCha8([32]byte{}).Read(big.Body) // incompressible
	if err := c.Store.Commit(ctx, l, big); !errors.Is(err, idem.ErrTooLarge) {
		t.Fatalf("oversized response: want ErrTooLarge, got %v", err)
	}
	headers := map[string]string{}
	for i := range policy.MaxHeaders + 1 {
		headers[fmt.Sprint("X-H", i)] = "v"
	}
	if err := c.Store.Fail(ctx, l, idem.Response{Status: 400, Headers: headers}); !errors.Is(err, idem.ErrTooLarge) {
		t.Fatalf("too many headers: want ErrTooLarge, got %v", err)
	}
	// A large body that compresses well fits, and replays byte for byte.
	body := []byte(strings.Repeat(`{"line":"a fairly repetitive response body"}`, 10000)) // ~440 KB
	large := idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: body}
	if err := c.Store.Commit(ctx, l, large); err != nil {
		t.Fatal(err)
	}
	c.wantReplay(t, k, large, idem.StatusSucceeded)
}

func stuckLeases(t *testing.T, c *suite) {
	ctx := context.Background()
	mine, stuck := map[string]bool{}, map[string]bool{}
	for i := range 6 {
		k := UniqueKey(t, "acme")
		mine[k.String()] = true
		l := c.begin(t, k, fpA)
		switch i % 3 {
		case 0:
			stuck[k.String()] = true
		case 1:
			if err := c.Store.Commit(ctx, l, resp); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := c.Store.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	found := func(before time.Time) map[string]bool {
		got := map[string]bool{}
		for shard := range c.Store.Shards() {
			var last time.Time
			for sl, err := range c.Store.StuckLeases(ctx, shard, before) {
				if err != nil {
					t.Fatal(err)
				}
				if sl.LeaseExpiresAt.Before(last) {
					t.Errorf("shard %d not oldest first: %v after %v", shard, sl.LeaseExpiresAt, last)
				}
				last = sl.LeaseExpiresAt
				if mine[sl.Key.String()] { // the table may be shared
					got[sl.Key.String()] = true
				}
			}
		}
		return got
	}
	if got := found(c.clock.Now()); len(got) != 0 {
		t.Fatalf("live leases listed as stuck: %v", got)
	}
	if got := found(c.clock.Now().Add(time.Minute)); fmt.Sprint(got) != fmt.Sprint(stuck) {
		t.Fatalf("stuck = %v, want %v", got, stuck)
	}
}

func postponeHides(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	c.begin(t, k, fpA)
	c.clock.Advance(time.Minute)
	l, err := c.Store.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	until := c.clock.Now().Add(10 * time.Minute)
	if err := c.Store.Postpone(ctx, l, until); err != nil {
		t.Fatal(err)
	}
	listed := func(at time.Time) []idem.Record {
		var out []idem.Record
		for sl, err := range c.Store.StuckLeases(ctx, 0, at) {
			if err != nil {
				t.Fatal(err)
			}
			if sl.Key == k {
				out = append(out, sl)
			}
		}
		return out
	}
	c.clock.Advance(5 * time.Minute)
	if got := listed(c.clock.Now()); len(got) != 0 {
		t.Fatalf("listed as stuck before the postponed time: %+v", got)
	}
	_, err = c.Store.TakeOver(ctx, k)
	wantInFlight(t, err)
	c.clock.Advance(6 * time.Minute)
	if got := listed(c.clock.Now()); len(got) != 1 || got[0].Attempts != 1 {
		t.Fatalf("after the postponed time: stuck %+v, want the key with 1 attempt", got)
	}
	again, err := c.Store.TakeOver(ctx, k)
	if err != nil || again.Attempts != 2 {
		t.Fatalf("second take-over: %+v, %v", again, err)
	}
	if err := c.Store.Postpone(ctx, l, until); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("postpone by the taken-over lease: want ErrLeaseLost, got %v", err)
	}
}

// queueMarker is a store that marks the commands a queued recovery
// message carries (dynamostore and memstore do).
type queueMarker interface {
	MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error)
	RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error
	UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error
}

// queuedMark: one mark at a time on an IN_FLIGHT record, until it ends,
// renewed or not, or its own unmark; none on a record not IN_FLIGHT; a
// reclaimed key starts unmarked.
func queuedMark(t *testing.T, c *suite) {
	m, ok := c.Store.(queueMarker)
	if !ok {
		t.Skip("the store does not mark queued recoveries")
	}
	ctx := context.Background()
	mark := func(k idem.Key, until time.Time, want bool) {
		t.Helper()
		if got, err := m.MarkQueued(ctx, k, until); err != nil || got != want {
			t.Fatalf("MarkQueued(%s) = %t, %v; want %t", until.Format(time.TimeOnly), got, err, want)
		}
	}
	unmark := func(k idem.Key, until time.Time) {
		t.Helper()
		if err := m.UnmarkQueued(ctx, k, until); err != nil {
			t.Fatal(err)
		}
	}
	renew := func(k idem.Key, until time.Time, hold time.Duration) {
		t.Helper()
		if err := m.RenewQueued(ctx, k, until, hold); err != nil {
			t.Fatal(err)
		}
	}
	k := UniqueKey(t, "acme")
	mark(k, c.clock.Now().Add(time.Minute), false) // absent
	l := c.begin(t, k, fpA)
	first := c.clock.Now().Add(time.Minute)
	mark(k, first, true)
	mark(k, c.clock.Now().Add(2*time.Minute), false)
	c.clock.Advance(time.Minute)
	second := c.clock.Now().Add(time.Minute)
	mark(k, second, true) // the first mark ended
	unmark(k, first)      // not the live mark: left alone
	mark(k, c.clock.Now().Add(2*time.Minute), false)
	unmark(k, second)
	third := c.clock.Now().Add(time.Minute)
	mark(k, third, true)

	// A renewed mark outlives its until; another mark's renewal is none.
	renew(k, third, 3*time.Minute)
	renew(k, first, time.Hour)
	c.clock.Advance(2 * time.Minute)
	mark(k, c.clock.Now().Add(time.Minute), false)
	c.clock.Advance(2 * time.Minute)
	fourth := c.clock.Now().Add(time.Minute)
	mark(k, fourth, true)
	renew(k, fourth, time.Hour)
	unmark(k, fourth) // the renewal goes with its mark
	mark(k, c.clock.Now().Add(time.Minute), true)
	if rec, err := c.Store.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken != l.Token {
		t.Fatalf("a mark changed the record: %+v, %v", rec, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.MarkQueued(done, k, c.clock.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("MarkQueued with a done context: want context.Canceled, got %v", err)
	}
	mark(k, c.clock.Now().Add(2*time.Minute), false) // the done context changed nothing

	// Settled or released, a record needs no message; reclaimed, it
	// starts unmarked.
	r := UniqueKey(t, "acme")
	rl := c.begin(t, r, fpA)
	released := c.clock.Now().Add(time.Hour)
	mark(r, released, true)
	renew(r, released, 2*time.Hour)
	if err := c.Store.Release(ctx, rl); err != nil {
		t.Fatal(err)
	}
	mark(r, c.clock.Now().Add(2*time.Hour), false)
	c.begin(t, r, fpA)
	mark(r, c.clock.Now().Add(time.Minute), true)
	c.clock.Advance(2 * time.Minute)
	taken, err := c.Store.TakeOver(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Store.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	mark(r, c.clock.Now().Add(time.Minute), false)
}

// oneOwner releases 32 goroutines together on one key, round after round.
// Exactly one owns the key, and the rest see it in flight. After the owner
// commits, everyone replays the same bytes.
func oneOwner(t *testing.T, c *suite) {
	const workers, rounds = 32, 20
	ctx := context.Background()
	for round := range rounds {
		k := UniqueKey(t, "acme")
		start := make(chan struct{})
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			owners   []*idem.Lease
			inFlight int
		)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				b, err := c.Store.Begin(ctx, k, fpA, nil)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && b.Lease != nil:
					owners = append(owners, b.Lease)
				case errors.Is(err, idem.ErrInFlight):
					inFlight++
				default:
					t.Errorf("round %d: unexpected Begin result %+v, %v", round, b, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(owners) != 1 || inFlight != workers-1 {
			t.Fatalf("round %d: %d owners and %d in flight, want 1 and %d", round, len(owners), inFlight, workers-1)
		}
		body := []byte(fmt.Sprintf(`{"round":%d}`, round))
		if err := c.Store.Commit(ctx, owners[0], idem.Response{Status: 201, Body: body}); err != nil {
			t.Fatal(err)
		}
		var rwg sync.WaitGroup
		for range 4 {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				b, err := c.Store.Begin(ctx, k, fpA, nil)
				if err != nil || b.Replay == nil || !bytes.Equal(b.Replay.Body, body) {
					t.Errorf("round %d: replay %+v, %v", round, b, err)
				}
			}()
		}
		rwg.Wait()
	}
}

// preemptLive: a caller that knows the outcome takes a live lease over.
// The holder's late writes fail, and the record settles once.
func preemptLive(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := c.begin(t, k, fpA)
	if _, err := c.Store.TakeOver(ctx, k); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("TakeOver of a live lease: want ErrInFlight, got %v", err)
	}
	if _, err := c.Store.Preempt(ctx, k, a.CreatedAt.Add(time.Millisecond)); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Preempt of another command's lease: want ErrNotFound, got %v", err)
	}
	b, err := c.Store.Preempt(ctx, k, a.CreatedAt)
	if err != nil {
		t.Fatalf("Preempt of a live lease: %v", err)
	}
	if b.Token == a.Token || !b.CreatedAt.Equal(a.CreatedAt) || b.Attempts != 1 || string(b.Intent) != "intent" {
		t.Fatalf("preempting lease = %+v (the holder's: %+v)", b, a)
	}
	if err := c.Store.Commit(ctx, a, idem.Response{Status: 201, Body: []byte("A")}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the preempted holder's commit: want ErrLeaseLost, got %v", err)
	}
	if err := c.Store.Commit(ctx, b, resp); err != nil {
		t.Fatalf("the preempting commit: %v", err)
	}
	if err := c.Store.Fail(ctx, a, idem.Response{Status: 402}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the preempted holder's late fail: want ErrLeaseLost, got %v", err)
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
	if _, err := c.Store.Preempt(ctx, k, a.CreatedAt); !errors.Is(err, idem.ErrCompleted) {
		t.Fatalf("Preempt of a settled record: want ErrCompleted, got %v", err)
	}
	if _, err := c.Store.Preempt(ctx, UniqueKey(t, "acme"), a.CreatedAt); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Preempt of an absent key: want ErrNotFound, got %v", err)
	}
}

// preemptReleased: a caller has proof that a released command's effect
// happened after all. It claims the record back under its CreatedAt and
// intent, out of retention, and commits. A release past its retention is a
// new command's, not its.
func preemptReleased(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := c.begin(t, k, fpA)
	if err := c.Store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := c.Store.Preempt(ctx, k, a.CreatedAt)
	if err != nil {
		t.Fatalf("Preempt of a released record: %v", err)
	}
	if !b.CreatedAt.Equal(a.CreatedAt) || string(b.Intent) != "intent" {
		t.Fatalf("preempting lease = %+v (the release's: %+v)", b, a)
	}
	if rec, err := c.Store.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight || !rec.ExpiresAt.IsZero() {
		t.Fatalf("record after the preempt: %+v, %v; want IN_FLIGHT with no expiry", rec, err)
	}
	if err := c.Store.Commit(ctx, b, resp); err != nil {
		t.Fatalf("commit after the preempt: %v", err)
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)

	old := UniqueKey(t, "acme")
	l := c.begin(t, old, fpA)
	if err := c.Store.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(l.RecordExpiresAt.Sub(c.clock.Now()))
	if _, err := c.Store.Preempt(ctx, old, l.CreatedAt); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Preempt of an expired release: want ErrNotFound, got %v", err)
	}
	// A new intent claims the expired key. A proof checked against the old
	// command is not the new one's.
	n := c.begin(t, old, fpB)
	if _, err := c.Store.Preempt(ctx, old, l.CreatedAt); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Preempt of the expired command, with a new intent under its key: want ErrNotFound, got %v", err)
	}
	if rec, err := c.Store.Get(ctx, old); err != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken != n.Token {
		t.Fatalf("the new intent's record after the refused Preempt: %+v, %v; want its own lease", rec, err)
	}
}

// earliestWhileUnsettled: the expiry an unsettled command's answers give
// is the earliest it may have. A 409's and a lease's are such. It is no
// later than the record's end once released, or once committed.
func earliestWhileUnsettled(t *testing.T, c *suite) {
	ctx := context.Background()
	for _, settle := range []string{"release", "commit"} {
		k := UniqueKey(t, "acme")
		l := c.begin(t, k, fpA)
		_, err := c.Store.Begin(ctx, k, fpB, nil)
		if !errors.Is(err, idem.ErrInFlight) && !errors.Is(err, idem.ErrMismatch) {
			t.Fatalf("another request in flight: %v", err)
		}
		_, err = c.Store.Begin(ctx, k, fpA, nil)
		wantInFlight(t, err)
		var inflight *idem.InFlightError
		if !errors.As(err, &inflight) {
			continue // a plain ErrInFlight promises no expiry
		}
		promised, leased := inflight.RecordExpiresAt, l.RecordExpiresAt
		if settle == "release" {
			err = c.Store.Release(ctx, l)
		} else {
			err = c.Store.Commit(ctx, l, resp)
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.RecordExpiresAt.Before(promised) || l.RecordExpiresAt.Before(leased) {
			t.Fatalf("%s: the record ends at %v, before the earliest expiry promised (409: %v, lease: %v)", settle, l.RecordExpiresAt, promised, leased)
		}
	}
}

// doneContext: every method called with a context already done returns an
// error wrapping the context's error. It changes nothing.
func doneContext(t *testing.T, c *suite) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	k := UniqueKey(t, "acme")
	if _, err := c.Store.Begin(done, k, fpA, []byte("intent")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin with a done context: want context.Canceled, got %v", err)
	}
	if _, err := c.Store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Begin with a done context left a record: %v", err)
	}
	l := c.begin(t, k, fpA)
	c.clock.Advance(time.Hour) // the lease runs out: TakeOver would take it
	calls := map[string]func() error{
		"Commit":    func() error { return c.Store.Commit(done, l, resp) },
		"Fail":      func() error { return c.Store.Fail(done, l, resp) },
		"Release":   func() error { return c.Store.Release(done, l) },
		"Heartbeat": func() error { return c.Store.Heartbeat(done, l) },
		"Postpone":  func() error { return c.Store.Postpone(done, l, c.clock.Now().Add(time.Hour)) },
		"TakeOver":  func() error { _, err := c.Store.TakeOver(done, k); return err },
		"Preempt":   func() error { _, err := c.Store.Preempt(done, k, l.CreatedAt); return err },
		"Get":       func() error { _, err := c.Store.Get(done, k); return err },
		"StuckLeases": func() error {
			for _, err := range c.Store.StuckLeases(done, 0, c.clock.Now()) {
				return err
			}
			return errors.New("listed nothing")
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a done context: want context.Canceled, got %v", name, err)
		}
	}
	rec, err := c.Store.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken != l.Token || !rec.LeaseExpiresAt.Equal(l.ExpiresAt) || rec.Attempts != 0 {
		t.Fatalf("record after the calls with a done context: %+v, %v; want it as Begin left it", rec, err)
	}
}
