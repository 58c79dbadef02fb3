package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

func reviewStores(t *testing.T, clock *idemtest.Clock) map[string]idem.Backend {
	t.Helper()
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, dynamostore.TableInput("reviewpreempt"))
	s, err := dynamostore.New(db, table, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	return map[string]idem.Backend{
		"dynamodb": s,
		"memstore": memstore.New(func(o *memstore.Options) { o.Clock = clock.Now }),
	}
}

// TestPreemptOfAZeroTimeTakesOverNothing: Preempt's created
// names the command the caller checked; a record of another command
// under the key must give ErrNotFound. With a zero time (a caller's
// unset CreatedAt) Preempt silently becomes TakeOver: it takes over
// whatever command holds the key once its lease ran out.
func TestPreemptOfAZeroTimeTakesOverNothing(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now().Truncate(time.Millisecond))
	for name, s := range reviewStores(t, clock) {
		t.Run(name, func(t *testing.T) {
			k := idemtest.UniqueKey(t, "acme")
			l := dynamotest.Begin(t, s, k, fpB) // the new intent, the one the caller never checked
			clock.Advance(time.Hour)            // its lease ran out; it waits for the reconciler
			got, err := s.Preempt(ctx, k, time.Time{})
			if !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("Preempt(key, zero time) of the command created at %v: lease %+v, err %v; want ErrNotFound (not the checked command)", l.CreatedAt, got, err)
			}
		})
	}
}

// TestPreemptCreatedPrecisionAgreesAcrossStores: the same Preempt
// must give the same answer on the DynamoDB store and on memstore, which
// claims to behave as it.
func TestPreemptCreatedPrecisionAgreesAcrossStores(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now().Truncate(time.Millisecond))
	answers := map[string]error{}
	for name, s := range reviewStores(t, clock) {
		k := idemtest.UniqueKey(t, "acme")
		l := dynamotest.Begin(t, s, k, fpA)
		_, err := s.Preempt(ctx, k, l.CreatedAt.Add(500*time.Microsecond))
		answers[name] = err
	}
	if (answers["dynamodb"] == nil) != (answers["memstore"] == nil) {
		t.Fatalf("Preempt(key, CreatedAt+500µs): dynamodb %v, memstore %v; want the same answer", answers["dynamodb"], answers["memstore"])
	}
}
