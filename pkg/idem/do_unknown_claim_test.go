package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// lostRead is a DynamoDB client whose next GetItem, once armed, is lost
// to a connection reset: unavailable.
type lostRead struct {
	dynamostore.DynamoDBAPI
	armed atomic.Bool
}

func (d *lostRead) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if d.armed.Swap(false) {
		return nil, &smithyhttp.RequestSendError{Err: errors.New("connection reset: the read is lost")}
	}
	return d.DynamoDBAPI.GetItem(ctx, in, optFns...)
}

// readLostAfterClear is a Ledger that arms db once a lease's clear of
// any end lands: the claim back's read that follows is lost.
type readLostAfterClear struct {
	*dynamostore.Ledger
	db *lostRead
}

func (l *readLostAfterClear) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	err := l.Ledger.Release(ctx, key, region, created, until, token)
	if until.IsZero() && token == "" && err == nil {
		l.db.armed.Store(true)
	}
	return err
}

// TestDoAnswersAClaimBackItsReadLostAsUnknownAfterWaiting: Do waits on a
// holder, which releases. Do's next Begin claims the key back: its
// record is IN_FLIGHT, its clear landed, and its read of the record is
// lost. The store answers *UnknownClaimError: the record is written, its
// lease handed to nobody. Do must pass that on, so the caller queues the
// key (backend.go). Do's wait turns any error wrapping ErrUnavailable
// into the holder's *InFlightError instead. Leased's error wraps one.
func TestDoAnswersAClaimBackItsReadLostAsUnknownAfterWaiting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := dynamotest.Client(t)
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	real, err := dynamostore.NewLedger(raw, dynamotest.Table(t, dynamostore.LedgerTableInput("ledger")))
	if err != nil {
		t.Fatal(err)
	}
	db := &lostRead{DynamoDBAPI: raw}
	st, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("regions")), func(o *dynamostore.Options) {
		o.Clock, o.Region, o.Ledger = clock.Now, "a", &readLostAfterClear{Ledger: real, db: db}
	})
	if err != nil {
		t.Fatal(err)
	}
	k := idemtest.UniqueKey(t, "acme")
	held, err := st.Begin(ctx, k, fpA, []byte("intent"))
	if err != nil || held.Lease == nil {
		t.Fatalf("the holder's Begin: %+v, %v", held, err)
	}
	var runs atomic.Int32
	_, err = idem.Do(ctx, st, k, fpA, []byte("intent"), counted(&runs, idem.Succeeded(resp), nil), func(o *idem.DoOptions) {
		o.Wait = 5 * time.Second
		// The holder releases while Do waits: Do claims the key back.
		o.OnWait = func(context.Context, idem.Key) bool {
			if err := st.Release(ctx, held.Lease); err != nil {
				t.Errorf("the holder's Release: %v", err)
			}
			return true
		}
	})
	rec, gerr := st.Get(ctx, k)
	if gerr != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken == held.Lease.Token {
		t.Fatalf("the record: %+v, %v; want IN_FLIGHT under the claim back's lease", rec, gerr)
	}
	if runs.Load() != 0 {
		t.Fatalf("fn ran %d times; want 0", runs.Load())
	}
	if !errors.Is(err, idem.ErrUnknownClaim) {
		t.Fatalf("Do whose claim back's read was lost: %v (in flight: %t); want ErrUnknownClaim: its record is IN_FLIGHT under a lease nobody holds, and the caller must queue the key", err, errors.Is(err, idem.ErrInFlight))
	}
}
