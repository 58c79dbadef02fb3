package idem_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestUnknownClaimIsNotUnavailable: backend.go says an error
// wrapping ErrUnavailable from Begin proves no record was written, and
// that callers test errors with errors.Is alone. A claim that landed (its
// answer lost, every retry throttled) must therefore not match
// ErrUnavailable.
func TestUnknownClaimIsNotUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lossy := &idemtest.LostClaim{}
	lossy.Arm()
	db := dynamotest.Client(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lossy} })
	s, err := dynamostore.New(db, e.table, func(o *dynamostore.Options) { o.Clock = e.clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	k := key(t, "acme")
	_, err = s.Begin(ctx, k, fpA, []byte("intent"))
	rec, gerr := e.store.Get(ctx, k)
	if gerr != nil || rec.Status != idem.StatusInFlight {
		t.Fatalf("the claim did not land: %+v, %v", rec, gerr)
	}
	if errors.Is(err, idem.ErrUnavailable) {
		t.Fatalf("Begin's record landed (IN_FLIGHT), yet errors.Is(err, ErrUnavailable) = true, the contract's proof that no record was written: %v", err)
	}
}

// TestPreemptSubMillisecondCreatedAgree: Preempt with a CreatedAt
// in the record's millisecond (memstore compares whole milliseconds, as
// dynamostore's condition does) on a settled record: both stores must give
// the same sentinel.
func TestPreemptSubMillisecondCreatedAgree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mem := memstore.New(func(o *memstore.Options) { o.Clock = e.clock.Now })
	for name, s := range map[string]idem.Backend{"dynamostore": e.store, "memstore": mem} {
		k := key(t, "acme")
		l := begin(t, s, k, fpA)
		if err := s.Commit(ctx, l, resp); err != nil {
			t.Fatal(err)
		}
		_, err := s.Preempt(ctx, k, l.CreatedAt.Add(500*time.Microsecond))
		if !errors.Is(err, idem.ErrCompleted) {
			t.Errorf("%s: Preempt of a SUCCEEDED command with its CreatedAt+0.5ms: %v, want ErrCompleted (the same command: whole milliseconds)", name, err)
		}
	}
}
