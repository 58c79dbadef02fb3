package memstore_test

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestAClaimBackInItsCommandsMillisecondClearsTheReleasesEnd: a release
// claimed back in the millisecond its command was created, as under a
// test's frozen clock. dynamostore's claim back clears the release's end
// (claims.Leased); memstore's skips it, taking the lease for a fresh
// claim. Committed, the command's claim still ends with the release: a
// retry whose record is lost is a new command.
func TestAClaimBackInItsCommandsMillisecondClearsTheReleasesEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := memstore.NewLedger(nil)
	region := func() *memstore.Store {
		return memstore.New(func(o *memstore.Options) {
			o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour
			o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
		})
	}
	st := region()
	k, body, released := releasedIn(t, st)
	back, err := st.Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || back.Lease == nil || !back.Lease.CreatedAt.Equal(released.CreatedAt) {
		t.Fatalf("the claim back: %+v, %v", back, err)
	}
	if err := st.Commit(ctx, back.Lease, idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour + time.Minute) // past the release's end; a fresh store: the record lost
	retry, err := region().Begin(ctx, k, idem.FingerprintOf(body), body)
	if err != nil || retry.Lease == nil || !retry.Lease.CreatedAt.Equal(released.CreatedAt) {
		t.Fatalf("the retry of the committed command: %+v, %v; want it taken up under %s, as dynamostore does", retry, err, released.CreatedAt)
	}
}

// releasedIn begins a fresh key's command in st and releases it. It
// returns the key, the request's body and the released lease.
func releasedIn(t *testing.T, st *memstore.Store) (idem.Key, []byte, *idem.Lease) {
	t.Helper()
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	if err := st.Release(t.Context(), begun.Lease); err != nil {
		t.Fatal(err)
	}
	return k, body, begun.Lease
}
