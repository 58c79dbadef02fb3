package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
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

// beforeClear is a Ledger that runs hook once, just before the first
// clear of a release's end reaches the table: another request's writes
// landing between a stale release's read-back and its clear.
type beforeClear struct {
	*dynamostore.Ledger
	hook func()
}

func (b *beforeClear) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && b.hook != nil {
		hook := b.hook
		b.hook = nil
		hook()
	}
	return b.Ledger.Release(ctx, key, region, created, until, token)
}

// TestAStaleReleasesClearDoesNotEraseTheHoldersRelease: a stale lease's
// release is refused and reads the record IN_FLIGHT. Before its clear
// lands, the holding lease releases: its end, then RELEASED. The stale
// clear then removes the holder's end. backend.md: the claim ends with
// the release's record, and the key names a new command.
func TestAStaleReleasesClearDoesNotEraseTheHoldersRelease(t *testing.T) {
	t.Parallel()
	db := dynamotest.Client(t)
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	real, err := dynamostore.NewLedger(db, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	ledger := &beforeClear{Ledger: real}
	table := dynamotest.Table(t, dynamostore.TableInput("regions"))
	st, err := dynamostore.New(db, table, func(o *dynamostore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	stale := begun.Lease
	clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(clock.Now()))
	taken, err := st.TakeOver(t.Context(), k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	var holderErr error
	ledger.hook = func() { holderErr = st.Release(t.Context(), taken) }
	if err := st.Release(t.Context(), stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale lease's Release: %v; want ErrLeaseLost", err)
	}
	if holderErr != nil {
		t.Fatalf("the holding lease's Release: %v", holderErr)
	}
	released, err := st.Get(t.Context(), k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the record: %+v, %v; want RELEASED", released, err)
	}
	clock.Advance(released.ExpiresAt.Add(time.Second).Sub(clock.Now())) // the release expired
	item := map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: k.String()}}
	if _, err := db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: item}); err != nil {
		t.Fatal(err) // TTL deletes the expired release
	}
	other := []byte("another intent")
	next, err := st.Begin(t.Context(), k, idem.FingerprintOf(other), other)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(stale.CreatedAt) {
		t.Fatalf("another intent once the release expired: %+v, %v; want a new command (backend.md: the claim ends with the release's record)", next, err)
	}
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
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger, err := dynamostore.NewLedger(raw, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	db := &failGet{DynamoDBAPI: raw}
	table := dynamotest.Table(t, dynamostore.TableInput("regions"))
	st, err := dynamostore.New(db, table, func(o *dynamostore.Options) {
		o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour // as with Stripe
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	stale := begun.Lease
	clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(clock.Now()))
	taken, err := st.TakeOver(t.Context(), k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	db.armed = true
	if err := st.Release(t.Context(), stale); err == nil {
		t.Fatal("the stale lease's Release: nil error")
	}
	if err := st.Commit(t.Context(), taken, idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}); err != nil {
		t.Fatalf("the holding lease's Commit: %v", err)
	}
	settled, err := st.Get(t.Context(), k)
	if err != nil || settled.Status != idem.StatusSucceeded {
		t.Fatalf("the record: %+v, %v; want SUCCEEDED", settled, err)
	}
	clock.Advance(time.Hour + time.Minute) // past the stale release's end, within the record's life
	if !clock.Now().Before(settled.ExpiresAt) {
		t.Fatalf("the record expires at %s, before %s", settled.ExpiresAt, clock.Now())
	}
	item := map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: k.String()}}
	if _, err := raw.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: item}); err != nil {
		t.Fatal(err) // the other Region's TTL delete erases the record
	}
	retry, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || retry.Lease == nil || !retry.Lease.CreatedAt.Equal(stale.CreatedAt) {
		t.Fatalf("the retry within the charge's record life: %+v, %v; want the claim taken up under %s, its reference (a new one charges twice)", retry, err, stale.CreatedAt)
	}
}

// failClear is a Ledger whose next clear of a release's end is refused,
// unapplied: throttled.
type failClear struct {
	*dynamostore.Ledger
	armed bool
}

func (f *failClear) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if until.IsZero() && f.armed {
		f.armed = false
		return fmt.Errorf("throttled, the clear is not applied: %w", idem.ErrUnavailable)
	}
	return f.Ledger.Release(ctx, key, region, created, until, token)
}

// TestAClaimBackWhoseClearFailsSaysNothingWasWrittenOnlyIfSo: a retry
// claims a released command back. Its IN_FLIGHT record is written, then
// the clear of the release's end fails. backend.go: ErrUnavailable from
// Begin, without ErrUnknownClaim, proves that no record was written. The
// record is written, its lease handed to nobody: ErrUnknownClaim.
func TestAClaimBackWhoseClearFailsSaysNothingWasWrittenOnlyIfSo(t *testing.T) {
	t.Parallel()
	db := dynamotest.Client(t)
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	real, err := dynamostore.NewLedger(db, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	ledger := &failClear{Ledger: real}
	st, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("regions")), func(o *dynamostore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	if err := st.Release(t.Context(), begun.Lease); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	ledger.armed = true
	_, err = st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if !errors.Is(err, idem.ErrUnknownClaim) {
		t.Fatalf("the claim back whose clear failed: %v; want ErrUnknownClaim (backend.go: ErrUnavailable alone says no record was written)", err)
	}
	rec, err := st.Get(t.Context(), k)
	if err != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the record after Begin said its claim unknown: %+v, %v; want IN_FLIGHT, for the reconciler", rec, err)
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
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger, err := dynamostore.NewLedger(raw, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	db := &lateWrite{DynamoDBAPI: raw}
	table := dynamotest.Table(t, dynamostore.TableInput("regions"))
	st, err := dynamostore.New(db, table, func(o *dynamostore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	db.armed = true
	if err := st.Release(t.Context(), begun.Lease); err == nil {
		t.Fatal("Release, its answer lost: nil error")
	}
	released, err := st.Get(t.Context(), k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the record after the late write: %+v, %v; want RELEASED", released, err)
	}
	clock.Advance(released.ExpiresAt.Add(time.Second).Sub(clock.Now())) // the release expired
	item := map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: k.String()}}
	if _, err := raw.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: item}); err != nil {
		t.Fatal(err) // TTL deletes the expired release
	}
	other := []byte("another intent")
	next, err := st.Begin(t.Context(), k, idem.FingerprintOf(other), other)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(begun.Lease.CreatedAt) {
		t.Fatalf("another intent once the release expired: %+v, %v; want a new command (backend.md: the claim ends with the release's record)", next, err)
	}
}

// lostAnswer is a DynamoDB client whose next UpdateItem, once armed, is
// applied and its answer lost.
type lostAnswer struct {
	dynamostore.DynamoDBAPI
	armed bool
}

func (d *lostAnswer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DynamoDBAPI.UpdateItem(ctx, in, optFns...)
	if d.armed && err == nil {
		d.armed = false
		return nil, errors.New("connection reset: the answer is lost")
	}
	return out, err
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
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger, err := dynamostore.NewLedger(raw, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	db := &lostAnswer{DynamoDBAPI: raw}
	st, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("regions")), func(o *dynamostore.Options) {
		o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour
		o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun, err := st.Begin(t.Context(), k, idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	clock.Advance(2 * time.Hour) // the provider was down; the command stayed IN_FLIGHT
	taken, err := st.TakeOver(t.Context(), k)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	db.armed = true
	if err := st.Release(t.Context(), taken); err == nil {
		t.Fatal("Release, its answer lost: nil error")
	}
	other := []byte("another intent")
	next, err := st.Begin(t.Context(), k, idem.FingerprintOf(other), other)
	if err != nil || next.Lease == nil || !next.Lease.CreatedAt.After(begun.Lease.CreatedAt) {
		t.Fatalf("another intent after the release, its end long past: %+v, %v; want a new command (backend.md: a write that landed unanswered keeps the end)", next, err)
	}
}
