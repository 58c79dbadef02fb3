package idem

import (
	"context"
	"time"
)

// Ledger records which Region claimed each command, and when. Every
// Region reads it strongly consistently: dynamostore.Ledger is a table
// in multi-Region strong consistency. A Backend needs it when its
// records replicate between Regions only eventually.
//
// A Region may then fail with claims it never replicated. Another Region
// claiming such a key afresh would derive another reference. The
// provider would act twice. So a Backend with a Ledger claims a key
// there before it writes the record. It takes the CreatedAt the Ledger
// holds. A claim another Region holds gives *ClaimedElsewhereError,
// until that Region Yields.
//
// A claim never ends before its record may expire. Its Until is the
// latest the record may expire under its lease. A Region that leases
// the record again, or moves its lease later, Extends the claim before
// that lease may settle the record.
// Otherwise a Region could claim the key afresh while the record lives
// where it did not replicate.
type Ledger interface {
	// Claim records c, region's claim of key's command, unless a
	// live claim stands. It returns the live claim if region holds
	// it. A yielding holder's live claim passes to region, its Heir,
	// and is returned. Otherwise it gives *ClaimedElsewhereError and
	// records nothing. A claim is live until its End. One past it is
	// replaced if region holds it, or its holder yields: until then
	// the holder's record may still replay the key.
	Claim(ctx context.Context, key Key, c Claim) (Claim, error)
	// Extend moves the Until of key's claim created at created to
	// until, if that is later. region must hold the claim, or its
	// holder yield: region is then its Heir. Otherwise it gives
	// *ClaimedElsewhereError and records nothing. A key with no claim
	// gets region's. A Region extends the claim before any write
	// that lets the record live longer: a claim that ended first
	// would let another Region claim the key afresh. It keeps a
	// release's end: the record may stay RELEASED.
	Extend(ctx context.Context, key Key, region string, created, until time.Time) error
	// Release records that key's command created at created was
	// released by the lease token, its record kept until until
	// (Claim.ReleasedUntil, Claim.ReleasedBy). region must hold the
	// claim; otherwise it gives *ClaimedElsewhereError and records
	// nothing. A key with no claim is left as it is. A zero until
	// clears the mark: only token's, or any if token is empty. A lease
	// clears only its own: another lease's release may have recorded
	// the end since. A lease whose record is known not RELEASED clears
	// any: it may settle the command otherwise. That clear also removes
	// the Settled mark: the lease may release the command. A store then
	// reads its record: settled meanwhile, it calls Settle again. An end is
	// refused once the command Settled: it gives ErrLeaseLost, and
	// records nothing.
	Release(ctx context.Context, key Key, region string, created, until time.Time, token string) error
	// Settle records that key's command created at created settled. It
	// clears any release's end, and marks the claim Settled, in one
	// write. No lease's end is recorded after it: only a stale lease
	// could release the command. region must hold the claim, as for
	// Release. A key with no claim is left as it is.
	Settle(ctx context.Context, key Key, region string, created time.Time) error
	// Yields reports whether another Region may write the records
	// region claimed under key. That holds once region failed over
	// and its writes replicated, or were written off.
	Yields(key Key, region string) bool
	// Unreplicated is when this Region began to serve key's tenant,
	// while a Region that served it before is not drained. A record
	// of a command created before then may have changed there. Zero
	// when no Region is pending.
	Unreplicated(key Key) time.Time
}

// Claim is a Region's claim of a command in a Ledger.
type Claim struct {
	Region    string
	CreatedAt time.Time
	// Until is the latest the record may expire, under the lease its
	// Region holds. A later claim of the key names a new command.
	Until time.Time
	// Heir is the Region that inherited the claim from a yielding
	// holder. It holds the claim from then on, under Region's CreatedAt.
	Heir string
	// Fingerprint is the claimed request's. A Region takes up a claim
	// without its record only for that request. Zero on a claim
	// written before it was kept: any request takes it up.
	Fingerprint Fingerprint
	// ReleasedUntil is when the record of a released command expires.
	// Zero unless the command's last lease released it. From then on
	// the key names a new command, though Until is later.
	ReleasedUntil time.Time
	// ReleasedBy is the token of the lease whose release recorded
	// ReleasedUntil. Empty on an end recorded before it was kept.
	ReleasedBy string
	// Settled says a lease committed or failed the command (Settle).
	// A later release's end is refused. A new command's claim has none.
	Settled bool
}

// End is when the claim stops holding its key: Until, or ReleasedUntil
// if sooner.
func (c Claim) End() time.Time {
	if !c.ReleasedUntil.IsZero() && c.ReleasedUntil.Before(c.Until) {
		return c.ReleasedUntil
	}
	return c.Until
}

// Holder is the Region whose records the claim stands for: its Heir, if any.
func (c Claim) Holder() string {
	if c.Heir != "" {
		return c.Heir
	}
	return c.Region
}

// InheritedBy reports whether region's lease under c is Inherited. Once
// a claim passed on, its command may have reached the provider elsewhere.
func (c Claim) InheritedBy(region string) bool {
	return c.Region != region || c.Heir != ""
}
