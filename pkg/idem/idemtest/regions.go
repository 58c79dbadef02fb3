package idemtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Regions is one deployment of a store in several Regions, under test.
type Regions struct {
	// Store returns a store of region on records of its own. It is a
	// replica nothing has replicated to yet.
	Store func(region string) idem.Backend
	// Replica returns a store of region on the records of of. It is
	// a replica kept in step.
	Replica func(of idem.Backend, region string) idem.Backend
}

// NewRegions builds a fresh deployment whose stores take o and ledger.
type NewRegions func(t *testing.T, o Options, ledger idem.Ledger) Regions

// NewLedger builds an empty Ledger whose Yields is yields.
type NewLedger func(t *testing.T, yields func(key idem.Key, region string) bool) idem.Ledger

// RunRegionConformance checks stores whose records replicate between
// Regions only eventually, with a Ledger. A record names the Region that
// leased it. A command another Region claimed is refused, with nothing
// written, until that Region yields. A yielded claim is inherited and
// left to recovery, and its heir holds it. A claim without its record is
// taken up only by the request it claimed, until it ends. A release ends
// its claim when its record expires. An expired claim gives way once its
// holder yields.
func RunRegionConformance(t *testing.T, newLedger NewLedger, newRegions NewRegions) {
	tests := []struct {
		name string
		run  func(t *testing.T, r *regionSuite)
	}{
		{"A record names the Region that leased it", recordNamesItsRegion},
		{"Another Region's claim is refused until it yields", claimedElsewhereRefused},
		{"A yielded claim is inherited and left to recovery", yieldedClaimInherited},
		{"An inherited claim stands against the Region it came from", inheritedClaimStands},
		{"A Region takes up its own claim left without a record", ownClaimTakenUp},
		{"An expired claim gives way once its Region yields", expiredClaimGivesWay},
		{"Another Region's release is claimed back once it yields", foreignReleaseWaits},
		{"Another Region's record is taken over once it yields", foreignTakeOverWaits},
		{"A replicated settled record replays", replicatedReplays},
		{"Another Region's record is not marked until it yields", foreignMarkWaits},
		{"A command older than a pending failover is neither claimed back nor taken over", staleCopyLeft},
		{"A claim lasts as long as its settled record", claimOutlivesCommit(0)},
		{"A claim lasts as long as a postponed record", claimOutlivesCommit(2 * time.Hour)},
		{"A claim lasts as long as a record claimed back elsewhere", claimOutlivesClaimBack},
		{"A claim lasts as long as a record taken over elsewhere", claimOutlivesTakeOver},
		{"An expired release's reference is never a new command's", releaseReferenceNotReused},
		{"A deleted release's claim ends with its record: a new intent is a new command", deletedReleaseEndsItsClaim},
		{"A claim without its record is taken up only by its request", claimTakenUpByItsRequest},
		{"A settled command's claim without its record is taken up by its request until it ends", settledClaimTakenUpUntilItEnds},
		{"An inherited claim without its record is taken up only by its request", inheritedClaimTakenUpByItsRequest},
		{"The released body resent after its release expired is a new command in an heir too", releasedBodyAfterExpiryInHeir},
		{"A release claimed back no longer ends its claim", claimedBackReleaseHoldsItsClaim},
		{"A release the Ledger cannot record is left in flight", unrecordedReleaseLeftInFlight},
		{"A claim back whose clear fails says its claim unknown", claimBackWhoseClearFailsIsUnknown},
		{"A preemption whose claim is not extended says unavailable only if nothing was written", preemptUnextendedWritesNothingOrIsUnknown},
		{"A stale lease's release keeps the end the holding lease's release recorded", staleReleaseKeepsItsEnd},
		{"A stale lease's clear of its own end keeps the end the holder recorded since", staleClearKeepsTheHoldersEnd},
		{"A stale lease's release after the holder's commit records no end", staleReleaseAfterCommitRecordsNoEnd},
		{"Recover clears the end a commit's failed clear left", recoverSettlesTheClaim},
		{"A stale claim back's clear after another lease's commit leaves the claim settled and replays", staleClaimBackClearKeepsItSettled},
		{"A take-over that reads its command committed meanwhile gives ErrCompleted", takeOverAfterCommitIsCompleted},
		{"A settled command taken up without its record may release", settledTakenUpReleases},
		{"A new command after a settled one's claim ended releases", newCommandAfterASettledOneReleases},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := NewClock(time.Now())
			r := &regionSuite{clock: clock}
			r.ledger = &pendingLedger{Ledger: newLedger(t, func(_ idem.Key, region string) bool { return r.yields(region) })}
			r.Regions = newRegions(t, Options{Clock: clock.Now, DefaultLease: 30 * time.Second, Retention: time.Hour}, r.ledger)
			tc.run(t, r)
		})
	}
}

// regionSuite is one subtest's deployment.
type regionSuite struct {
	Regions
	clock  *Clock
	ledger *pendingLedger

	mu       sync.Mutex
	yielding []string
}

// yield makes regions yield, and no other Region.
func (r *regionSuite) yield(regions ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.yielding = regions
}

func (r *regionSuite) yields(region string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.yielding, region)
}

func beginIn(t *testing.T, b idem.Backend, k idem.Key) *idem.Lease {
	t.Helper()
	begun, err := b.Begin(context.Background(), k, fpA, []byte("intent"))
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: want a new lease, got %+v, %v", begun, err)
	}
	return begun.Lease
}

// releasedIn claims k in b, as beginIn, and releases it.
func releasedIn(t *testing.T, b idem.Backend, k idem.Key) *idem.Lease {
	t.Helper()
	l := beginIn(t, b, k)
	if err := b.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

// wantElsewhere checks err names region as the claim's holder.
func wantElsewhere(t *testing.T, err error, region string) {
	t.Helper()
	var ce *idem.ClaimedElsewhereError
	if !errors.Is(err, idem.ErrClaimedElsewhere) || !errors.As(err, &ce) || ce.Region != region {
		t.Fatalf("want *ClaimedElsewhereError of Region %q, got %v", region, err)
	}
}

func recordNamesItsRegion(t *testing.T, r *regionSuite) {
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	l := beginIn(t, a, k)
	if l.Inherited {
		t.Fatalf("a Region's own claim is Inherited: %+v", l)
	}
	rec, err := a.Get(context.Background(), k)
	if err != nil || rec.Region != "a" {
		t.Fatalf("Get = %+v, %v; want the Region a", rec, err)
	}
}

func claimedElsewhereRefused(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	beginIn(t, r.Store("a"), k)
	b := r.Store("b")
	_, err := b.Begin(ctx, k, fpA, nil)
	wantElsewhere(t, err, "a")
	if _, err := b.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a refused claim wrote a record: %v", err)
	}
	ran := false
	_, err = idem.Do(ctx, b, k, fpA, nil, func(context.Context, *idem.Lease) (idem.Outcome, error) {
		ran = true
		return idem.Succeeded(resp), nil
	})
	wantElsewhere(t, err, "a")
	if ran {
		t.Fatal("Do ran its function under another Region's claim")
	}
}

func yieldedClaimInherited(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	first := beginIn(t, r.Store("a"), k)
	r.yield("a")
	b := r.Store("b")
	ran := false
	res, err := idem.Do(ctx, b, k, fpA, []byte("intent"), func(context.Context, *idem.Lease) (idem.Outcome, error) {
		ran = true
		return idem.NotApplied(idem.Response{}), nil
	})
	switch {
	case err != nil || ran:
		t.Fatalf("Do on an inherited claim: ran %t, %v", ran, err)
	case res.Status != idem.StatusInFlight || res.Lease == nil || !res.Lease.Inherited || !res.Lease.CreatedAt.Equal(first.CreatedAt):
		t.Fatalf("Do = %+v (lease %+v), want IN_FLIGHT under the first claim's CreatedAt %s, inherited", res, res.Lease, first.CreatedAt)
	}
	rec, err := b.Get(ctx, k)
	if err != nil || rec.Region != "b" || !rec.CreatedAt.Equal(first.CreatedAt) || rec.Status != idem.StatusInFlight {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
	// Recovery settles it, as for any command whose attempt died.
	r.clock.Advance(time.Hour)
	rec2, err := idem.Recover(ctx, b, k, idem.ReleaseLocalEffect)
	if err != nil || rec2.Status != idem.StatusReleased {
		t.Fatalf("Recover = %+v, %v", rec2, err)
	}
}

// inheritedClaimStands: a dies after its Ledger claim, and b inherits it.
// Then a returns, and b is not drained. Were the claim still a's, a
// would replace it once expired: a new reference, while b's record lives.
func inheritedClaimStands(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	at := time.UnixMilli(r.clock.Now().UnixMilli())
	if _, err := r.ledger.Claim(ctx, k, idem.Claim{Region: "a", CreatedAt: at, Until: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	r.yield("a")
	if l := beginIn(t, r.Store("b"), k); !l.Inherited || !l.CreatedAt.Equal(at) {
		t.Fatalf("b's lease %+v: want a's claim, inherited", l)
	}
	r.yield()
	// b, without its record, takes the claim up again: still inherited.
	if l := beginIn(t, r.Store("b"), k); !l.Inherited || !l.CreatedAt.Equal(at) {
		t.Fatalf("b's lease again %+v: want a's claim, inherited", l)
	}
	r.clock.Advance(2 * time.Hour) // past the claim's Until; b's record is IN_FLIGHT
	_, err := r.Store("a").Begin(ctx, k, fpA, []byte("intent"))
	wantElsewhere(t, err, "b")
}

func ownClaimTakenUp(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	at := time.UnixMilli(r.clock.Now().Add(-time.Minute).UnixMilli())
	if _, err := r.ledger.Claim(ctx, k, idem.Claim{Region: "a", CreatedAt: at, Until: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	l := beginIn(t, r.Store("a"), k)
	if !l.CreatedAt.Equal(at) || l.Inherited {
		t.Fatalf("lease %+v: want the claim's CreatedAt %s, not inherited", l, at)
	}
}

func expiredClaimGivesWay(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := beginIn(t, a, k)
	if err := a.Commit(ctx, first, resp); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(2 * time.Hour) // past retention, and the claim's Until
	b := r.Store("b")
	// a's record may still replay the key there, until a yields.
	_, err := b.Begin(ctx, k, fpA, []byte("intent"))
	wantElsewhere(t, err, "a")
	r.yield("a")
	l := beginIn(t, b, k)
	if !l.CreatedAt.After(first.CreatedAt) || l.Inherited {
		t.Fatalf("lease %+v after the first claim expired: want a new command", l)
	}
}

func foreignReleaseWaits(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := releasedIn(t, a, k)
	b := r.Replica(a, "b")
	_, err := b.Begin(ctx, k, fpA, nil)
	wantElsewhere(t, err, "a")
	r.yield("a")
	l := beginIn(t, b, k)
	rec, err := b.Get(ctx, k)
	if !l.CreatedAt.Equal(first.CreatedAt) || err != nil || rec.Region != "b" {
		t.Fatalf("lease %+v, record %+v, %v: want the release's CreatedAt, now Region b's", l, rec, err)
	}
}

func foreignTakeOverWaits(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := beginIn(t, a, k)
	r.clock.Advance(time.Hour)
	b := r.Replica(a, "b")
	for _, take := range []func() (*idem.Lease, error){
		func() (*idem.Lease, error) { return b.TakeOver(ctx, k) },
		func() (*idem.Lease, error) { return b.Preempt(ctx, k, first.CreatedAt) },
	} {
		_, err := take()
		wantElsewhere(t, err, "a")
	}
	r.yield("a")
	l, err := b.TakeOver(ctx, k)
	if err != nil || !l.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("TakeOver once a yields = %+v, %v", l, err)
	}
	if err := a.Commit(ctx, first, resp); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the first holder's Commit after the take-over: %v, want ErrLeaseLost", err)
	}
	if rec, err := b.Get(ctx, k); err != nil || rec.Region != "b" {
		t.Fatalf("Get = %+v, %v; want Region b's", rec, err)
	}
}

func replicatedReplays(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	if err := a.Commit(ctx, beginIn(t, a, k), resp); err != nil {
		t.Fatal(err)
	}
	begun, err := r.Replica(a, "b").Begin(ctx, k, fpA, nil)
	if err != nil || begun.Replay == nil || !begun.Replay.Equal(resp) {
		t.Fatalf("Begin in another Region = %+v, %v; want the replay", begun, err)
	}
}

// pendingLedger is a Ledger whose Unreplicated the suite sets: since when
// a Region not yet drained may hold newer writes. Before each Release it
// calls before, if set: an error fails the Release unapplied. Settle
// fails while settleErr is set, Extend while extendErr is.
type pendingLedger struct {
	idem.Ledger
	mu                   sync.Mutex
	since                time.Time
	before               func(until time.Time, token string) error
	settleErr, extendErr error
}

// beforeRelease sets fn to run before each Release; nil runs none.
func (p *pendingLedger) beforeRelease(fn func(until time.Time, token string) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.before = fn
}

func (p *pendingLedger) failRelease(err error) {
	p.beforeRelease(func(time.Time, string) error { return err })
}

func (p *pendingLedger) failSettle(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settleErr = err
}

func (p *pendingLedger) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	p.mu.Lock()
	before := p.before
	p.mu.Unlock()
	if before != nil {
		if err := before(until, token); err != nil {
			return err
		}
	}
	return p.Ledger.Release(ctx, key, region, created, until, token)
}

func (p *pendingLedger) Settle(ctx context.Context, key idem.Key, region string, created time.Time) error {
	p.mu.Lock()
	err := p.settleErr
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.Ledger.Settle(ctx, key, region, created)
}

func (p *pendingLedger) failExtend(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.extendErr = err
}

func (p *pendingLedger) Extend(ctx context.Context, key idem.Key, region string, created, until time.Time) error {
	p.mu.Lock()
	err := p.extendErr
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.Ledger.Extend(ctx, key, region, created, until)
}

func (p *pendingLedger) pending(since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.since = since
}

func (p *pendingLedger) Unreplicated(key idem.Key) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.since.IsZero() {
		return p.since
	}
	return p.Ledger.Unreplicated(key)
}

// foreignMarkWaits: a's IN_FLIGHT record, replicated to b, is a's to
// mark while a does not yield. A mark b made could be lost to last writer
// wins, or hide a's record from a's sweeper.
func foreignMarkWaits(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	beginIn(t, a, k)
	r.clock.Advance(time.Hour) // the lease ran out: a sweeper would queue it
	b, ok := r.Replica(a, "b").(queueMarker)
	if !ok {
		t.Skip("the store marks no queued commands")
	}
	if marked, err := b.MarkQueued(ctx, k, r.clock.Now().Add(time.Minute)); err != nil || marked {
		t.Fatalf("b's MarkQueued of a's record before a yields = %t, %v; want false", marked, err)
	}
}

// staleCopyLeft: b claimed a key and released it, then served through a
// failover to a and back; a is pending. b's copy of the record may be
// stale: a may have claimed it back and acted. So b neither claims it back
// nor takes a lease over for a command created before the failover.
func staleCopyLeft(t *testing.T, r *regionSuite) {
	ctx := context.Background()
	b := r.Store("b")
	released, stuck := UniqueKey(t, "acme"), UniqueKey(t, "acme")
	releasedIn(t, b, released)
	beginIn(t, b, stuck)
	r.clock.Advance(time.Minute) // past the stuck lease
	r.ledger.pending(r.clock.Now())
	if _, err := b.Begin(ctx, released, fpA, []byte("intent")); !errors.Is(err, idem.ErrClaimedElsewhere) {
		t.Errorf("Begin of a release older than a pending failover: %v, want ErrClaimedElsewhere", err)
	}
	if _, err := b.TakeOver(ctx, stuck); !errors.Is(err, idem.ErrClaimedElsewhere) {
		t.Errorf("TakeOver of a command older than a pending failover: %v, want ErrClaimedElsewhere", err)
	}
}

// claimOutlivesCommit: a commits, and is written off before anything
// replicates. Until the record's retention ends, b inherits a's claim. A
// fresh claim would send a second reference while a's key lives. With
// postpone, a first postpones its lease that far, past the claim's first
// Until: the record lives a retention after that lease.
func claimOutlivesCommit(postpone time.Duration) func(*testing.T, *regionSuite) {
	return func(t *testing.T, r *regionSuite) {
		ctx := t.Context()
		k := UniqueKey(t, "acme")
		a := r.Store("a")
		first := beginIn(t, a, k)
		if postpone > 0 {
			if err := a.Postpone(ctx, first, r.clock.Now().Add(postpone)); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Commit(ctx, first, resp); err != nil {
			t.Fatal(err)
		}
		r.clock.Advance(first.RecordExpiresAt.Add(-time.Second).Sub(r.clock.Now()))
		r.yield("a")
		if l := beginIn(t, r.Store("b"), k); !l.Inherited || !l.CreatedAt.Equal(first.CreatedAt) {
			t.Fatalf("b's lease %+v a second before a's record expires: want a's claim, inherited", l)
		}
	}
}

// claimOutlivesClaimBack: b claims a's release back near its end, once a
// yields, and commits. a, back and no longer yielding to a pending b,
// must find b's claim, not an expired one of its own.
func claimOutlivesClaimBack(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := releasedIn(t, a, k)
	r.clock.Advance(first.RecordExpiresAt.Add(-time.Minute).Sub(r.clock.Now()))
	r.yield("a")
	b := r.Replica(a, "b")
	l := beginIn(t, b, k)
	if err := b.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	r.yield()
	r.clock.Advance(2 * time.Minute) // past the release's end, within b's record's
	_, err := r.Store("a").Begin(ctx, k, fpA, []byte("intent"))
	wantElsewhere(t, err, "b")
}

// claimOutlivesTakeOver: b takes a's stuck command over, once a yields,
// and commits. Past the claim's first Until, a must find b's claim.
func claimOutlivesTakeOver(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := beginIn(t, a, k)
	r.clock.Advance(time.Minute) // past a's lease
	r.yield("a")
	b := r.Replica(a, "b")
	l, err := b.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	r.yield()
	r.clock.Advance(first.CreatedAt.Add(time.Hour + 10*time.Second).Sub(r.clock.Now()))
	_, err = r.Store("a").Begin(ctx, k, fpA, []byte("intent"))
	wantElsewhere(t, err, "b")
}

// releaseReferenceNotReused: a's claim may outlive its release, ended
// sooner than a settled record would. A new intent under the key then must
// not take the release's CreatedAt: the provider may still hold that
// reference, for another request.
func releaseReferenceNotReused(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := releasedIn(t, a, k)
	r.clock.Advance(first.RecordExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	begun, err := a.Begin(ctx, k, fpB, []byte("another intent"))
	if err == nil && begun.Lease != nil && begun.Lease.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("a new intent after the release expired: lease %+v under the release's CreatedAt", begun.Lease)
	}
}

// deletedReleaseEndsItsClaim: a's release expired, and TTL deleted it. A
// fresh Store of a is its table then. The claim records the release's
// end: a new intent, of either body, is a new command at once.
func deletedReleaseEndsItsClaim(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	for _, fp := range []idem.Fingerprint{fpA, fpB} {
		k := UniqueKey(t, "acme")
		first := releasedIn(t, r.Store("a"), k)
		r.clock.Advance(first.RecordExpiresAt.Add(time.Second).Sub(r.clock.Now()))
		begun, err := r.Store("a").Begin(ctx, k, fp, []byte("intent"))
		if err != nil || begun.Lease == nil || !begun.Lease.CreatedAt.After(first.CreatedAt) || begun.Lease.Inherited {
			t.Fatalf("Begin once the release expired and was deleted = %+v, %v; want a new command", begun, err)
		}
	}
}

// claimTakenUpByItsRequest: a's record of its claim is lost: a fresh
// Store of a is its table then. Another request under the key is a key
// reused with another body, with nothing written.
func claimTakenUpByItsRequest(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	first := beginIn(t, r.Store("a"), k)
	r.clock.Advance(time.Second)
	lost := r.Store("a")
	if _, err := lost.Begin(ctx, k, fpB, []byte("another intent")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request under a's claim without its record: %v; want ErrMismatch", err)
	}
	if _, err := lost.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the refusal wrote a record: %v", err)
	}
	if l := beginIn(t, lost, k); !l.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("the claimed request's lease %+v: want the claim's CreatedAt %s", l, first.CreatedAt)
	}
}

// settledClaimTakenUpUntilItEnds: a's record of a settled command is
// lost, as when another Region's TTL delete erased it. The client's retry,
// later than a release would have lived, comes before the record's
// expiry it was given. It is that command, taken up under its CreatedAt:
// a new command would charge again.
func settledClaimTakenUpUntilItEnds(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := beginIn(t, a, k)
	if err := a.Commit(ctx, first, resp); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(first.RecordExpiresAt.Add(-time.Second).Sub(r.clock.Now()))
	lost := r.Store("a")
	if _, err := lost.Begin(ctx, k, fpB, []byte("another intent")); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("another request under a's claim past its earliest expiry: %v; want ErrInFlight", err)
	}
	if l := beginIn(t, lost, k); !l.CreatedAt.Equal(first.CreatedAt) || l.Inherited {
		t.Fatalf("the retry a second before its record expires: lease %+v; want the claim's CreatedAt %s", l, first.CreatedAt)
	}
}

// inheritedClaimTakenUpByItsRequest: a released its command, yielded,
// and b holds no record of it. Another request is not that command. It
// must not be sent under the released command's reference: the provider
// may hold that command's effect. It is refused while the release lives.
// The claimed request is taken up, inherited.
func inheritedClaimTakenUpByItsRequest(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	first := releasedIn(t, r.Store("a"), k)
	r.yield("a")
	r.clock.Advance(first.RecordExpiresAt.Add(-time.Second).Sub(r.clock.Now()))
	b := r.Store("b")
	if _, err := b.Begin(ctx, k, fpB, []byte("another intent")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another request under a's inherited claim: %v; want ErrMismatch", err)
	}
	if _, err := b.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the refusal wrote a record: %v", err)
	}
	if l := beginIn(t, b, k); !l.Inherited || !l.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("the claimed request's lease %+v: want a's claim, inherited", l)
	}
}

// releasedBodyAfterExpiryInHeir: a released its command, yielded, and b
// holds no record of it. Once the release expired, the client sends the
// same body again. The contract makes it a new command, with a new
// reference: b must not resend the release's.
func releasedBodyAfterExpiryInHeir(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	first := releasedIn(t, r.Store("a"), k)
	r.yield("a")
	r.clock.Advance(first.RecordExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	begun, err := r.Store("b").Begin(ctx, k, fpA, []byte("intent"))
	if err != nil || begun.Lease == nil || !begun.Lease.CreatedAt.After(first.CreatedAt) || begun.Lease.Inherited {
		t.Fatalf("the released body after its release expired, in the heir = %+v, %v; want a new command", begun, err)
	}
}

// claimedBackReleaseHoldsItsClaim: a's release is claimed back by its
// request and committed. Then a's record is lost. The release's end no
// longer ends the claim: the retry is the committed command, not a new one.
func claimedBackReleaseHoldsItsClaim(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	first := releasedIn(t, a, k)
	r.clock.Advance(time.Minute)
	again := beginIn(t, a, k)
	if err := a.Commit(ctx, again, resp); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(first.RecordExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	if l := beginIn(t, r.Store("a"), k); !l.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("the retry past the release's end, its record lost: lease %+v; want the committed command's CreatedAt %s", l, first.CreatedAt)
	}
}

// unrecordedReleaseLeftInFlight: a's release cannot reach the Ledger. It
// is not done: the record stays IN_FLIGHT under the lease, for a retry
// or the reconciler. Released again, the Ledger back, it is done.
func unrecordedReleaseLeftInFlight(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	l := beginIn(t, a, k)
	r.ledger.failRelease(errors.New("ledger down"))
	if err := a.Release(ctx, l); err == nil {
		t.Fatal("Release with the Ledger down: nil error")
	}
	if rec, err := a.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the record after a release the Ledger missed: %+v, %v; want IN_FLIGHT", rec, err)
	}
	r.ledger.beforeRelease(nil)
	if err := a.Release(ctx, l); err != nil {
		t.Fatalf("Release again, the Ledger back: %v", err)
	}
}

// claimBackWhoseClearFailsIsUnknown: a retry claims a released command
// back. Its IN_FLIGHT record is written, then the clear of the release's
// end fails. backend.md: ErrUnavailable from Begin, without
// ErrUnknownClaim, proves that no record was written. The record is
// written, its lease handed to nobody: ErrUnknownClaim. The record stays
// IN_FLIGHT, for the reconciler.
func claimBackWhoseClearFailsIsUnknown(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a := UniqueKey(t, "acme"), r.Store("a")
	releasedIn(t, a, k)
	r.clock.Advance(time.Minute)
	r.ledger.beforeRelease(func(until time.Time, _ string) error {
		if until.IsZero() {
			return fmt.Errorf("throttled, the clear is not applied: %w", idem.ErrUnavailable)
		}
		return nil
	})
	_, err := a.Begin(ctx, k, fpA, []byte("intent"))
	r.ledger.beforeRelease(nil)
	if !errors.Is(err, idem.ErrUnknownClaim) {
		t.Fatalf("the claim back whose clear failed: %v; want ErrUnknownClaim (backend.md: ErrUnavailable alone says no record was written)", err)
	}
	rec, err := a.Get(ctx, k)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the record after Begin said its claim unknown: %+v, %v; want IN_FLIGHT, for the reconciler", rec, err)
	}
}

// preemptUnextendedWritesNothingOrIsUnknown: a notification preempts a
// released command, and the Ledger refuses to extend its claim. A store
// may extend first, writing nothing, or write its record first. Either
// answer must be true. ErrUnavailable alone says the record is untouched.
// Otherwise it is ErrUnknownClaim: IN_FLIGHT under a lease nobody holds.
func preemptUnextendedWritesNothingOrIsUnknown(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a := UniqueKey(t, "acme"), r.Store("a")
	released := releasedIn(t, a, k)
	r.ledger.failExtend(fmt.Errorf("throttled, not applied: %w", idem.ErrUnavailable))
	_, err := a.Preempt(ctx, k, released.CreatedAt)
	r.ledger.failExtend(nil)
	rec, gerr := a.Get(ctx, k)
	switch {
	case gerr != nil:
		t.Fatalf("the record after the preemption: %v", gerr)
	case err == nil:
		t.Fatal("Preempt with the Ledger's extension refused: nil error")
	case errors.Is(err, idem.ErrUnknownClaim):
	case rec.Status != idem.StatusReleased:
		t.Fatalf("the preemption said %v, without ErrUnknownClaim, but wrote the record %s; want it RELEASED, or ErrUnknownClaim", err, rec.Status)
	}
}

// staleReleaseKeepsItsEnd: a's lease runs out while its provider hangs.
// The reconciler takes the command over and releases it. Then the stale
// lease releases, refused. The key must still be free once the holding
// release expired: its claim ends with that release's record.
func staleReleaseKeepsItsEnd(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k := UniqueKey(t, "acme")
	a := r.Store("a")
	stale := beginIn(t, a, k)
	r.clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	taken, err := a.TakeOver(ctx, k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	if err := a.Release(ctx, taken); err != nil {
		t.Fatalf("the holding lease's Release: %v", err)
	}
	if err := a.Release(ctx, stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's Release: %v; want ErrLeaseLost", err)
	}
	released, err := a.Get(ctx, k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the record: %+v, %v; want RELEASED", released, err)
	}
	r.clock.Advance(released.ExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	begun, err := a.Begin(ctx, k, fpB, []byte("another intent"))
	if err != nil || begun.Lease == nil || !begun.Lease.CreatedAt.After(stale.CreatedAt) {
		t.Fatalf("another intent once the release expired: %+v, %v; want a new command", begun, err)
	}
}

// staleClearKeepsTheHoldersEnd: a's stale lease releases after the
// reconciler took its command over. Its write fails under the holder's
// lease, so it clears its own end. Just before, the holder releases,
// recording its end. The clear names the stale lease: the holder's end
// stays, and the claim ends with the holder's release.
func staleClearKeepsTheHoldersEnd(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a, stale, taken := takenFromAStaleLease(t, r)
	r.ledger.beforeRelease(func(until time.Time, token string) error {
		if !until.IsZero() || token != stale.Token {
			return nil
		}
		r.ledger.beforeRelease(nil)
		return a.Release(ctx, taken) // the holder's release, just before the stale clear
	})
	if err := a.Release(ctx, stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's Release: %v; want ErrLeaseLost", err)
	}
	released, err := a.Get(ctx, k)
	if err != nil || released.Status != idem.StatusReleased || released.LeaseToken != taken.Token {
		t.Fatalf("the record: %+v, %v; want RELEASED by the holder", released, err)
	}
	r.clock.Advance(released.ExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	begun, err := a.Begin(ctx, k, fpB, []byte("another intent"))
	if err != nil || begun.Lease == nil || !begun.Lease.CreatedAt.After(stale.CreatedAt) {
		t.Fatalf("another intent once the holder's release expired: %+v, %v; want a new command (a clear removes only its token's end)", begun, err)
	}
}

// staleReleaseAfterCommitRecordsNoEnd: the reconciler takes a's command
// over and commits it. Then the stale lease releases. The settled claim
// refuses its end: ErrLeaseLost, with nothing recorded that its death
// could leave. Here its clear would fail. The retry, its record lost
// past the release's end, is the committed command.
func staleReleaseAfterCommitRecordsNoEnd(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a, stale, taken := takenFromAStaleLease(t, r)
	if err := a.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	r.ledger.beforeRelease(diesBeforeItsClear)
	if err := a.Release(ctx, stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's Release after the commit: %v; want ErrLeaseLost", err)
	}
	r.ledger.beforeRelease(nil)
	retryIsTheCommittedCommand(t, r, k, stale)
}

// recoverSettlesTheClaim: a stale release records its end, then the
// holder commits; the commit's clear fails. Recover, finding the record
// settled, clears the end. The retry, its record lost past the release's
// end, is the committed command.
func recoverSettlesTheClaim(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a, stale, taken := takenFromAStaleLease(t, r)
	r.ledger.beforeRelease(diesBeforeItsClear)
	if err := a.Release(ctx, stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's Release: %v; want ErrLeaseLost", err)
	}
	r.ledger.beforeRelease(nil)
	r.ledger.failSettle(errors.New("ledger throttled"))
	if err := a.Commit(ctx, taken, resp); err == nil {
		t.Fatal("Commit whose clear failed: nil error")
	}
	r.ledger.failSettle(nil)
	if _, err := idem.Recover(ctx, a, k, func(context.Context, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, errors.New("a settled command needs no resolver")
	}); err != nil {
		t.Fatalf("Recover of the settled command: %v", err)
	}
	retryIsTheCommittedCommand(t, r, k, stale)
}

// staleClaimBackClearKeepsItSettled: a claim back's clear of any end is
// held up while its lease runs out. The reconciler takes the command over
// and commits it, settling its claim. Then the clear lands. The claim must
// stay settled, and the claim back gets the stored Replay: its lease is
// lost. The retry, its record lost past the release's end, is the
// committed command.
func staleClaimBackClearKeepsItSettled(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a := UniqueKey(t, "acme"), r.Store("a")
	released := releasedIn(t, a, k)
	r.clock.Advance(time.Minute)
	committed := commitsDuringTheClear(r, a, k, func() (*idem.Lease, error) {
		rec, err := a.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		r.clock.Advance(rec.LeaseExpiresAt.Add(time.Second).Sub(r.clock.Now()))
		return a.TakeOver(ctx, k)
	})
	back, err := a.Begin(ctx, k, fpA, []byte("intent"))
	if *committed != nil {
		t.Fatalf("the take-over's commit during the claim back's clear: %v", *committed)
	}
	if err != nil || back.Lease != nil || back.Replay == nil || !back.Replay.Equal(resp) || back.Status != idem.StatusSucceeded {
		t.Fatalf("the claim back that reads its command committed: %+v, %v; want the stored Replay and no lease", back, err)
	}
	settledWithNoEnd(t, r, k, released)
	retryIsTheCommittedCommand(t, r, k, released)
}

// takeOverAfterCommitIsCompleted: a take-over's clear of any end is held
// up while a preemption commits the command. The take-over reads it
// settled: it gives ErrCompleted, as before its write, and the claim stays
// settled.
func takeOverAfterCommitIsCompleted(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a := UniqueKey(t, "acme"), r.Store("a")
	stale := beginIn(t, a, k)
	r.clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	committed := commitsDuringTheClear(r, a, k, func() (*idem.Lease, error) {
		return a.Preempt(ctx, k, stale.CreatedAt)
	})
	taken, err := a.TakeOver(ctx, k)
	if *committed != nil {
		t.Fatalf("the preemption's commit during the take-over's clear: %v", *committed)
	}
	if !errors.Is(err, idem.ErrCompleted) {
		t.Fatalf("the take-over that reads its command committed: %+v, %v; want ErrCompleted", taken, err)
	}
	settledWithNoEnd(t, r, k, stale)
	retryIsTheCommittedCommand(t, r, k, stale)
}

// commitsDuringTheClear holds up a's next clear of any end. Meanwhile
// take leases k's command, and that lease commits it. The returned error
// is set once the clear went on: take's or the commit's.
func commitsDuringTheClear(r *regionSuite, a idem.Backend, k idem.Key, take func() (*idem.Lease, error)) *error {
	committed := new(error)
	r.ledger.beforeRelease(func(until time.Time, token string) error {
		if !until.IsZero() || token != "" {
			return nil
		}
		r.ledger.beforeRelease(nil)
		l, err := take()
		if err == nil {
			err = a.Commit(context.Background(), l, resp)
		}
		*committed = err
		return nil
	})
	return committed
}

// settledWithNoEnd checks the Ledger's claim of k is l's command's,
// settled, with no release's end.
func settledWithNoEnd(t *testing.T, r *regionSuite, k idem.Key, l *idem.Lease) {
	t.Helper()
	c, err := r.ledger.Claim(t.Context(), k, idem.Claim{Region: "a", CreatedAt: r.clock.Now(), Until: r.clock.Now().Add(time.Hour)})
	if err != nil || !c.CreatedAt.Equal(l.CreatedAt) || !c.Settled || !c.ReleasedUntil.IsZero() {
		t.Fatalf("the claim: %+v, %v; want the command's, settled, with no end", c, err)
	}
}

// settledTakenUpReleases: a command taken over commits, marking its claim
// settled. Its record is lost, as to a TTL delete. The retry takes it up
// and clears the mark: its lease holds the record, and may release it.
func settledTakenUpReleases(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a, stale, taken := takenFromAStaleLease(t, r)
	if err := a.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	lost := r.Store("a")
	l := beginIn(t, lost, k)
	if !l.CreatedAt.Equal(stale.CreatedAt) {
		t.Fatalf("the retry, its record lost: lease %+v; want the command's CreatedAt %s", l, stale.CreatedAt)
	}
	if err := lost.Release(ctx, l); err != nil {
		t.Fatalf("the taken-up lease's Release: %v", err)
	}
	c, err := r.ledger.Claim(ctx, k, idem.Claim{Region: "a", CreatedAt: r.clock.Now(), Until: r.clock.Now().Add(time.Hour)})
	if err != nil || !c.CreatedAt.Equal(stale.CreatedAt) || c.Settled || c.ReleasedBy != l.Token {
		t.Fatalf("the claim: %+v, %v; want the command's, its end the release's", c, err)
	}
}

// newCommandAfterASettledOneReleases: a command taken over commits,
// marking its claim settled. Once its record and claim have ended, the
// key names a new command. Its claim is its own: its release is
// recorded, and its claim ends with it.
func newCommandAfterASettledOneReleases(t *testing.T, r *regionSuite) {
	ctx := t.Context()
	k, a, _, taken := takenFromAStaleLease(t, r)
	if err := a.Commit(ctx, taken, resp); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(taken.RecordExpiresAt.Add(time.Hour).Sub(r.clock.Now())) // past the record and its claim
	next, err := a.Begin(ctx, k, fpB, []byte("another intent"))
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(taken.CreatedAt) {
		t.Fatalf("another intent after the settled command ended: %+v, %v; want a new command", next, err)
	}
	if err := a.Release(ctx, next.Lease); err != nil {
		t.Fatalf("the new command's Release: %v", err)
	}
	r.clock.Advance(next.Lease.RecordExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	again, err := a.Begin(ctx, k, fpA, []byte("intent"))
	if err != nil || again.Lease == nil || !again.Lease.CreatedAt.After(next.Lease.CreatedAt) {
		t.Fatalf("a third intent once the release expired: %+v, %v; want a new command", again, err)
	}
}

// takenFromAStaleLease begins a command of a fresh key in a, lets its
// lease run out, and takes it over: the stale lease and the holder.
func takenFromAStaleLease(t *testing.T, r *regionSuite) (k idem.Key, a idem.Backend, stale, taken *idem.Lease) {
	t.Helper()
	k, a = UniqueKey(t, "acme"), r.Store("a")
	stale = beginIn(t, a, k)
	r.clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	taken, err := a.TakeOver(t.Context(), k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	return k, a, stale, taken
}

// diesBeforeItsClear fails every clear: the releasing lease died.
func diesBeforeItsClear(until time.Time, _ string) error {
	if until.IsZero() {
		return errors.New("the stale lease died before its clear")
	}
	return nil
}

// retryIsTheCommittedCommand: past the release's end of stale's
// command, within its claim, a retry whose record is lost takes up the
// committed command. A new command would charge twice.
func retryIsTheCommittedCommand(t *testing.T, r *regionSuite, k idem.Key, stale *idem.Lease) {
	t.Helper()
	r.clock.Advance(stale.CreatedAt.Add(time.Hour + 2*time.Second).Sub(r.clock.Now()))
	if l := beginIn(t, r.Store("a"), k); !l.CreatedAt.Equal(stale.CreatedAt) {
		t.Fatalf("the retry, its record lost: lease %+v; want the committed command's CreatedAt %s", l, stale.CreatedAt)
	}
}
