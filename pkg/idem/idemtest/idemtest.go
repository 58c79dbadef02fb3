// Package idemtest checks that an idempotency store keeps pkg/idem's
// contract. RunConformance runs one suite against any idem.Backend:
// the DynamoDB store, the in-memory store of package memstore, or a
// store of your own. Clock is a settable clock to move time in tests.
package idemtest

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Clock is a settable clock, safe for concurrent use. Pass its Now as
// the store's clock (memstore.Options.Clock, dynamostore.Options.Clock).
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Subject is a store under test.
type Subject struct {
	Store idem.Backend
	// Row returns a business write creating the row named id, and
	// RowExists reports whether that row was written. Both are optional:
	// without them the suite checks Commit's writes only through the
	// record.
	Row       func(id string) types.TransactWriteItem
	RowExists func(t *testing.T, id string) bool
}

// Options are the settings a subtest needs of its store: the store's
// clock and the fields of its options of the same names. Zero fields take
// the store's defaults.
type Options struct {
	Clock                                     func() time.Time
	Retention, ReleaseRetention, DefaultLease time.Duration
	Shards                                    int
}

// NewSubject builds a fresh store with o applied after any options of its
// own.
type NewSubject func(t *testing.T, o Options) Subject

// UniqueKey returns a key of tenant that no other test uses.
func UniqueKey(t testing.TB, tenant string) idem.Key {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	k, err := idem.NewKey(tenant, "conformance", "k-"+hex.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
