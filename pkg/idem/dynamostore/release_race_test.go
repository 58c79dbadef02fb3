package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// race is a store in Region "a" whose client may fail, as with Stripe:
// records kept a day, a release an hour. Its Ledger is on the raw
// client. It has begun a command of a fresh key.
type race struct {
	clock *idemtest.Clock
	table string
	st    *dynamostore.Store
	begun idem.Begun
	body  []byte
}

// newRace builds a race whose store calls db, and whose Ledger raw.
func newRace(t *testing.T, raw, db dynamostore.DynamoDBAPI) race {
	t.Helper()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	table := dynamotest.Table(t, dynamostore.TableInput("regions"))
	st := newStore(t, db, table, inRegionA(clock, newLedger(t, raw)), func(o *dynamostore.Options) {
		o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour
	})
	body := []byte("intent")
	return race{clock: clock, table: table, st: st, begun: mustBegin(t, st, idemtest.UniqueKey(t, "acme"), body), body: body}
}

// failGet is a DynamoDB client whose GetItem fails while armed: a read
// lost to a timeout.
type failGet struct {
	dynamostore.DynamoDBAPI
	armed bool
}

func (d *failGet) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if d.armed {
		d.armed = false
		return nil, errors.New("connection reset: the read is lost")
	}
	return d.DynamoDBAPI.GetItem(ctx, in, optFns...)
}

// TestAStaleReleasesUnreadEndDoesNotOutliveTheHoldersCharge: a stale
// lease's release is refused, and its read-back is lost: the end stays.
// The holding lease then charges and commits SUCCEEDED. regions.md: a
// claim lasts as long as a settled record would, so a retry whose record
// a TTL delete erased takes the claim up under the same reference. Here
// the claim ends at the stale release's end, within the record's life,
// and the retry is a new command: a second charge.
func TestAStaleReleasesUnreadEndDoesNotOutliveTheHoldersCharge(t *testing.T) {
	t.Parallel()
	raw := dynamotest.Client(t)
	db := &failGet{DynamoDBAPI: raw}
	r := newRace(t, raw, db)
	k, stale := r.begun.Lease.Key, r.begun.Lease
	r.clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(r.clock.Now()))
	taken, err := r.st.TakeOver(t.Context(), k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	db.armed = true
	if err := r.st.Release(t.Context(), stale); err == nil {
		t.Fatal("the stale lease's Release: nil error")
	}
	if err := r.st.Commit(t.Context(), taken, idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}); err != nil {
		t.Fatalf("the holding lease's Commit: %v", err)
	}
	settled, err := r.st.Get(t.Context(), k)
	if err != nil || settled.Status != idem.StatusSucceeded {
		t.Fatalf("the record: %+v, %v; want SUCCEEDED", settled, err)
	}
	r.clock.Advance(time.Hour + time.Minute) // past the stale release's end, within the record's life
	if !r.clock.Now().Before(settled.ExpiresAt) {
		t.Fatalf("the record expires at %s, before %s", settled.ExpiresAt, r.clock.Now())
	}
	ttlDelete(t, raw, r.table, k) // the other Region's TTL delete erases the record
	retry, err := r.st.Begin(t.Context(), k, idem.FingerprintOf(r.body), r.body)
	if err != nil || retry.Lease == nil || !retry.Lease.CreatedAt.Equal(stale.CreatedAt) {
		t.Fatalf("the retry within the charge's record life: %+v, %v; want the claim taken up under %s, its reference (a new one charges twice)", retry, err, stale.CreatedAt)
	}
}

// lateWrite is a DynamoDB client whose next UpdateItem, once armed, times
// out unanswered and lands later: after the next consistent read.
type lateWrite struct {
	dynamostore.DynamoDBAPI
	armed bool
	late  *dynamodb.UpdateItemInput
}

func (d *lateWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if d.armed {
		d.armed, d.late = false, in
		return nil, errors.New("request timed out: the answer is lost")
	}
	return d.DynamoDBAPI.UpdateItem(ctx, in, optFns...)
}

func (d *lateWrite) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := d.DynamoDBAPI.GetItem(ctx, in, optFns...)
	if d.late != nil {
		late := d.late
		d.late = nil
		if _, err := d.DynamoDBAPI.UpdateItem(ctx, late); err != nil {
			return nil, err
		}
	}
	return out, err
}

// TestAReleaseWhoseRecordLandsAfterItsReadBackEndsItsClaimWithItsRecord:
// the RELEASED write times out, and lands just after the read-back saw
// IN_FLIGHT. The release clears its end. backend.md: a write that landed
// unanswered keeps the end, and the claim ends with the release's record.
func TestAReleaseWhoseRecordLandsAfterItsReadBackEndsItsClaimWithItsRecord(t *testing.T) {
	t.Parallel()
	raw := dynamotest.Client(t)
	db := &lateWrite{DynamoDBAPI: raw}
	r := newRace(t, raw, db)
	k := r.begun.Lease.Key
	db.armed = true
	if err := r.st.Release(t.Context(), r.begun.Lease); err == nil {
		t.Fatal("Release, its answer lost: nil error")
	}
	released, err := r.st.Get(t.Context(), k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the record after the late write: %+v, %v; want RELEASED", released, err)
	}
	ttlDelete(t, raw, r.table, k) // TTL deletes the release once expired
	wantAnotherIntentNewOnceExpired(t, r.st, r.clock, released, r.begun)
}

// TestAnOldReleaseWhoseAnswerIsLostKeepsItsEnd: the reconciler releases
// a command older than ReleaseRetention; its RELEASED write lands, its
// answer lost. The read-back finds the record past its retention and
// takes it for gone: it clears the end. backend.md: a write that landed
// unanswered keeps the end, and the key names a new command. Here the
// claim holds it for another Retention: another intent is told to wait.
func TestAnOldReleaseWhoseAnswerIsLostKeepsItsEnd(t *testing.T) {
	t.Parallel()
	raw := dynamotest.Client(t)
	db := &loseAnswer{DynamoDBAPI: raw}
	r := newRace(t, raw, db)
	r.clock.Advance(2 * time.Hour) // the provider was down; the command stayed IN_FLIGHT
	taken, err := r.st.TakeOver(t.Context(), r.begun.Lease.Key)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	db.armed = true
	if err := r.st.Release(t.Context(), taken); err == nil {
		t.Fatal("Release, its answer lost: nil error")
	}
	other := []byte("another intent")
	next, err := r.st.Begin(t.Context(), r.begun.Lease.Key, idem.FingerprintOf(other), other)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(r.begun.Lease.CreatedAt) {
		t.Fatalf("another intent after the release, its end long past: %+v, %v; want a new command (backend.md: a write that landed unanswered keeps the end)", next, err)
	}
}
