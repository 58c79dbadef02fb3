package dynamostore_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
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

// throttleTransact answers every TransactWriteItems with a
// ThrottlingException (a 400: DynamoDB refused it unprocessed) while armed.
type throttleTransact struct {
	mu    sync.Mutex
	armed bool
}

func (t *throttleTransact) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	armed := t.armed
	t.mu.Unlock()
	if armed && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		return idemtest.DynamoDBFault(req, "ThrottlingException"), nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// rowsTable creates a table of business rows keyed by id, and returns
// insert: the write of a new row.
func rowsTable(t *testing.T) (insert func(id string) types.TransactWriteItem) {
	t.Helper()
	table := dynamotest.Table(t, &dynamodb.CreateTableInput{
		TableName:            aws.String("rows"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	return func(id string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(table),
			Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: id}, "n": &types.AttributeValueMemberS{Value: "1"},
			},
			ConditionExpression: aws.String("attribute_not_exists(#k)"), ExpressionAttributeNames: map[string]string{"#k": "id"},
		}}
	}
}

// TestRefusedCommitDoesNotBindTheLease: a Commit DynamoDB refused
// unprocessed at every attempt (throttled, or a row over the item limit)
// applied nothing, so a later Commit of the lease with other writes (the
// row trimmed) must commit; it got ErrLeaseLost once the lease remembered
// the writes of any Commit that failed, leaving the command stuck.
func TestRefusedCommitDoesNotBindTheLease(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	run := func(t *testing.T, s idem.Backend, insert func(id string) types.TransactWriteItem, arm func(bool)) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		arm(true)
		first := s.Commit(ctx, b.Lease, resp, insert("first"))
		arm(false)
		t.Logf("first Commit (refused unprocessed on DynamoDB): %v", first)
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != idem.StatusInFlight {
			t.Fatalf("after the refused Commit the record is %s, want IN_FLIGHT", rec.Status)
		}
		err = s.Commit(ctx, b.Lease, resp, insert("second"))
		if err != nil {
			t.Errorf("a Commit with other writes after a Commit refused unprocessed: %v, want nil (nothing of the first can have been applied)", err)
		}
	}
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		tr := &throttleTransact{}
		db := dynamotest.Client(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: tr}
			o.RetryMaxAttempts = 2
		})
		s, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("refused")))
		if err != nil {
			t.Fatal(err)
		}
		run(t, s, rowsTable(t), func(a bool) { tr.mu.Lock(); tr.armed = a; tr.mu.Unlock() })
	})
	// The same with a refusal the caller mends with other writes: a
	// business row over DynamoDB's 400 KB item limit (ValidationException,
	// a 400), trimmed for the second Commit.
	t.Run("dynamodb, row too large", func(t *testing.T) {
		t.Parallel()
		db := dynamotest.Client(t)
		s, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("toolarge")))
		if err != nil {
			t.Fatal(err)
		}
		insert := rowsTable(t)
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		big := insert("row")
		big.Put.Item["note"] = &types.AttributeValueMemberS{Value: strings.Repeat("x", 500<<10)}
		first := s.Commit(ctx, b.Lease, resp, big)
		t.Logf("first Commit, row of 500 KB: %v", first)
		if first == nil {
			t.Skip("the emulator took a 500 KB item")
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight {
			t.Fatalf("after the refused Commit: %+v, %v", rec, err)
		}
		if err := s.Commit(ctx, b.Lease, resp, insert("row")); err != nil {
			t.Errorf("the Commit with the row trimmed, after DynamoDB refused the first unprocessed: %v, want nil", err)
		}
	})
}

// TestSettlementsRecogniseTheirOwnRetriedWrite: when the SDK retries a
// fenced write whose first attempt was applied, the retry fails its own
// fence. The store must read that as its own success, not as a lost
// lease: otherwise a decline is answered "outcome pending", a release
// "still leased", and a take-over is lost to the one who made it.
func TestSettlementsRecogniseTheirOwnRetriedWrite(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	row := func(k idem.Key) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String(e.Table),
			Item:                map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}
	}
	cases := []struct {
		name, op string
		settle   func(s *dynamostore.Store, l *idem.Lease) error
		want     idem.Status
	}{
		{"commit", "TransactWriteItems", func(s *dynamostore.Store, l *idem.Lease) error { return s.Commit(ctx, l, resp, row(l.Key)) }, idem.StatusSucceeded},
		{"commit without writes", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error { return s.Commit(ctx, l, resp) }, idem.StatusSucceeded},
		{"fail", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error { return s.Fail(ctx, l, resp) }, idem.StatusFailedPermanent},
		{"release", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error { return s.Release(ctx, l) }, idem.StatusReleased},
		{"take over", "UpdateItem", func(s *dynamostore.Store, l *idem.Lease) error {
			e.Clock.Advance(time.Minute)
			taken, err := s.TakeOver(ctx, l.Key)
			if err == nil && taken.Attempts != 1 {
				t.Errorf("take over after a lost answer counted %d attempts, want 1", taken.Attempts)
			}
			return err
		}, idem.StatusInFlight},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lossy := &loseFirstAnswer{op: c.op}
			db := dynamotest.Client(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lossy} })
			s, err := dynamostore.New(db, e.Table, func(o *dynamostore.Options) { o.Clock = e.Clock.Now })
			if err != nil {
				t.Fatal(err)
			}
			k := dynamotest.Key(t, "acme")
			l := dynamotest.Begin(t, e.Store, k, fpA)
			if err := c.settle(s, l); err != nil {
				t.Fatalf("%s after a lost answer: %v", c.name, err)
			}
			if !lossy.done {
				t.Fatal("no answer was lost: the test proves nothing")
			}
			rec, err := e.Store.Get(ctx, k)
			if err != nil || rec.Status != c.want {
				t.Fatalf("record after %s: %+v, %v", c.name, rec, err)
			}
		})
	}
}

// TestCommitRetriedByTheCaller: a Commit repeated with the same arguments
// (the caller's own retry after an error) is a success, as DynamoDB's
// ClientRequestToken makes it; one with other arguments is refused.
func TestCommitRetriedByTheCaller(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	k := dynamotest.Key(t, "acme")
	l := dynamotest.Begin(t, e.Store, k, fpA)
	row := types.TransactWriteItem{Put: &types.Put{
		TableName:           aws.String(e.Table),
		Item:                map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}
	for i := range 2 {
		if err := e.Store.Commit(ctx, l, resp, row); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
	}
	other := idem.Response{Status: 201, Body: []byte(`{"id":"ch_2"}`)}
	if err := e.Store.Commit(ctx, l, other, row); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("commit with another response: want ErrLeaseLost, got %v", err)
	}
	wantReplay(t, e.Store, k, resp)
}

// loseAnswer is a DynamoDB client whose next UpdateItem, once armed, is
// applied and its answer lost.
type loseAnswer struct {
	dynamostore.DynamoDBAPI
	armed bool
}

func (d *loseAnswer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DynamoDBAPI.UpdateItem(ctx, in, optFns...)
	if d.armed && err == nil {
		d.armed = false
		return nil, errors.New("connection reset: the answer is lost")
	}
	return out, err
}

// TestAReleaseWhoseRecordsAnswerIsLostEndsItsClaimWithItsRecord: the
// record's RELEASED write lands, its answer lost. The release clears its
// end on the claim, believing the record unwritten. The record is
// RELEASED, and nothing IN_FLIGHT is left for the reconciler to retry.
// Once the release expired, another intent must be a new command:
// backend.md says the claim ends with the release's record.
func TestAReleaseWhoseRecordsAnswerIsLostEndsItsClaimWithItsRecord(t *testing.T) {
	t.Parallel()
	raw := dynamotest.Client(t)
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	db := &loseAnswer{DynamoDBAPI: raw}
	st := newStore(t, db, dynamotest.Table(t, dynamostore.TableInput("regions")), inRegionA(clock, newLedger(t, raw)))
	k := idemtest.UniqueKey(t, "acme")
	body := []byte("intent")
	begun := mustBegin(t, st, k, body)
	db.armed = true
	if err := st.Release(t.Context(), begun.Lease); err == nil {
		t.Fatal("Release, its answer lost: nil error")
	}
	released, err := st.Get(t.Context(), k)
	if err != nil || released.Status != idem.StatusReleased {
		t.Fatalf("the record after the lost answer: %+v, %v; want RELEASED", released, err)
	}
	wantAnotherIntentNewOnceExpired(t, st, clock, released, begun)
}
