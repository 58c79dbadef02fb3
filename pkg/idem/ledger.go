package idem

import (
	"context"
	"time"
)

// Ledger records which Region claimed each command, and when, in a store
// every Region reads strongly consistently (a DynamoDB table in
// multi-Region strong consistency: dynamostore.Ledger). It is what a
// Backend needs when its records replicate between Regions only
// eventually.
//
// A Region may then fail with claims it wrote but never replicated.
// Another Region that claims such a key afresh would send the provider
// a reference of another CreatedAt, and the provider would act twice.
// With a Ledger, a Backend claims a key in the Ledger before it writes
// the record, and takes the CreatedAt the Ledger holds. A claim another
// Region holds stops the Backend, with *ClaimedElsewhereError, until that
// Region Yields.
type Ledger interface {
	// Claim records region's claim of key's command, created at c.CreatedAt
	// and live until c.Until, unless a live claim stands: then it returns
	// that claim, region's own or one of a Region that Yields. A live
	// claim of a Region that does not yield gives *ClaimedElsewhereError,
	// and nothing is recorded. An expired claim is replaced.
	Claim(ctx context.Context, key Key, c Claim) (Claim, error)
	// Yields reports whether records region claimed under key may be
	// written by another Region: region has failed over and its writes
	// have all replicated, or were written off.
	Yields(key Key, region string) bool
}

// Claim is a Region's claim of a command in a Ledger.
type Claim struct {
	Region    string
	CreatedAt time.Time
	// Until is the earliest the command's record may expire: a later
	// claim of the key names a new command.
	Until time.Time
}
