package dynamotest

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// Env is a DynamoDB store on a table of its own. Its calls are counted,
// and its clock is the test's to move.
type Env struct {
	Table string
	DB    *dynamodb.Client
	Calls *idemtest.CallCounter
	Clock *idemtest.Clock
	Store *dynamostore.Store
}

// NewEnv returns an Env whose store has a 30-second lease, then optFns.
func NewEnv(t testing.TB, optFns ...func(*dynamostore.Options)) *Env {
	t.Helper()
	e := &Env{Calls: &idemtest.CallCounter{}, Clock: idemtest.NewClock(time.Now())}
	e.Table = Table(t, dynamostore.TableInput("idem"))
	e.DB = Client(t, e.Calls.Option())
	e.Store = e.NewStore(t, optFns...)
	return e
}

// NewStore returns another store on e's table, client and clock.
func (e *Env) NewStore(t testing.TB, optFns ...func(*dynamostore.Options)) *dynamostore.Store {
	t.Helper()
	opts := append([]func(*dynamostore.Options){func(o *dynamostore.Options) {
		o.Clock = e.Clock.Now
		o.DefaultLease = 30 * time.Second
	}}, optFns...)
	s, err := dynamostore.New(e.DB, e.Table, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Key returns a new key of tenant's.
func Key(t testing.TB, tenant string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, "create-charge", UniqueName("k"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Begin claims k on s, and fails the test without a new lease.
func Begin(t testing.TB, s idem.Backend, k idem.Key, fp idem.Fingerprint) *idem.Lease {
	t.Helper()
	b, err := s.Begin(t.Context(), k, fp, []byte("intent"))
	if err != nil || b.Lease == nil {
		t.Fatalf("Begin: want a new lease, got %+v, %v", b, err)
	}
	return b.Lease
}

// WantInFlight fails the test unless err is an *idem.InFlightError.
func WantInFlight(t testing.TB, err error) {
	t.Helper()
	var inflight *idem.InFlightError
	if !errors.As(err, &inflight) || !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("want *InFlightError, got %v", err)
	}
}
