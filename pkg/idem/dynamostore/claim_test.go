package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// crashAfterExtend is a Ledger whose Extend lands, then the caller dies:
// crash cancels the caller's context, as a Lambda timeout would.
type crashAfterExtend struct {
	*dynamostore.Ledger
	crash context.CancelFunc
}

func (c *crashAfterExtend) Extend(ctx context.Context, key idem.Key, region string, created, until time.Time) error {
	err := c.Ledger.Extend(ctx, key, region, created, until)
	if c.crash != nil {
		c.crash()
	}
	return err
}

// newLedger is a Ledger on its own table.
func newLedger(t *testing.T, db dynamostore.DynamoDBAPI) *dynamostore.Ledger {
	t.Helper()
	l, err := dynamostore.NewLedger(db, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// inRegionA places a store in Region "a", on clock, claiming through ledger.
func inRegionA(clock *idemtest.Clock, ledger idem.Ledger) func(*dynamostore.Options) {
	return func(o *dynamostore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	}
}

// mustBegin begins a new command for body, which must take a lease.
func mustBegin(t *testing.T, st *dynamostore.Store, k idem.Key, body []byte) idem.Begun {
	t.Helper()
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	return begun
}

// ttlDelete deletes k's record from table, as a TTL delete does, in this
// Region or replicated from another.
func ttlDelete(t *testing.T, db *dynamodb.Client, table string, k idem.Key) {
	t.Helper()
	item := map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: k.String()}}
	if _, err := db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: item}); err != nil {
		t.Fatal(err)
	}
}

// claimBackDyingAfterLedger claims k back; the instance dies once the
// Ledger's Extend lands, before the record's write.
func claimBackDyingAfterLedger(t *testing.T, st *dynamostore.Store, ledger *crashAfterExtend, k idem.Key, body []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ledger.crash = cancel
	defer func() { ledger.crash = nil }()
	if _, err := st.Begin(ctx, k, idem.FingerprintOf(body), body); err == nil {
		t.Fatal("the claim back that died after the Ledger: nil error")
	}
}

// wantAnotherIntentNewOnceExpired: once the release expired, another
// intent on its key must be a new command. backend.md: the claim ends with
// the release's record.
func wantAnotherIntentNewOnceExpired(t *testing.T, st *dynamostore.Store, clock *idemtest.Clock, released *idem.Record, begun idem.Begun) {
	t.Helper()
	clock.Advance(released.ExpiresAt.Add(time.Second).Sub(clock.Now())) // the release expired
	other := []byte("another intent")
	next, err := st.Begin(t.Context(), begun.Lease.Key, idem.FingerprintOf(other), other)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(begun.Lease.CreatedAt) {
		t.Fatalf("another intent once the release expired: %+v, %v; want a new command (backend.md: the claim ends with the release's record)", next, err)
	}
}

// TestAClaimBackThatDiesAfterTheLedgerLeavesTheKeyFreeAtTheReleasesEnd:
// a command is released. A retry claims it back: the Ledger's Extend
// clears the release's end, then the instance dies before the record's
// write. The record stays RELEASED, with its expiry. backend.md: the claim
// ends with the release's record, and the key names a new command,
// whatever the request. Once the release expired, another intent must be
// a new command.
func TestAClaimBackThatDiesAfterTheLedgerLeavesTheKeyFreeAtTheReleasesEnd(t *testing.T) {
	t.Parallel()
	db := dynamotest.Client(t)
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &crashAfterExtend{Ledger: newLedger(t, db)}
	st := newStore(t, db, dynamotest.Table(t, dynamostore.TableInput("regions")), inRegionA(clock, ledger))
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun := mustBegin(t, st, k, body)
	if err := st.Release(t.Context(), begun.Lease); err != nil {
		t.Fatal(err)
	}
	released, err := st.Get(t.Context(), k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the released record: %+v, %v", released, err)
	}
	clock.Advance(time.Minute)
	claimBackDyingAfterLedger(t, st, ledger, k, body)
	if rec, err := st.Get(t.Context(), k); err != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("the record after the claim back died: %+v, %v; want RELEASED, untouched", rec, err)
	}
	wantAnotherIntentNewOnceExpired(t, st, clock, released, begun)
}

// TestTheReleasedBodyAfterAClaimBackDiedIsANewCommand: as above, the
// claim back dies after the Ledger's Extend. The release expires, and TTL
// deletes its record. contract.md: a retry after a released key's expiry
// is a new command with a new reference. The released body resent must
// not take the release's CreatedAt, a reference past the provider's
// window less its margin.
func TestTheReleasedBodyAfterAClaimBackDiedIsANewCommand(t *testing.T) {
	t.Parallel()
	db := dynamotest.Client(t)
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &crashAfterExtend{Ledger: newLedger(t, db)}
	table := dynamotest.Table(t, dynamostore.TableInput("regions"))
	st := newStore(t, db, table, inRegionA(clock, ledger))
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun := mustBegin(t, st, k, body)
	if err := st.Release(t.Context(), begun.Lease); err != nil {
		t.Fatal(err)
	}
	released, err := st.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	claimBackDyingAfterLedger(t, st, ledger, k, body)
	// The release expired, and TTL deleted it.
	clock.Advance(released.ExpiresAt.Add(time.Second).Sub(clock.Now()))
	ttlDelete(t, db, table, k)
	next, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(begun.Lease.CreatedAt) {
		t.Fatalf("the released body once the release expired and was deleted: %+v, %v; want a new command, created after %s", next, err, begun.Lease.CreatedAt)
	}
}
