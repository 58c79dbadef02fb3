package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestPreemptSubMillisecondCreatedAgree: Preempt with a CreatedAt
// in the record's millisecond (memstore compares whole milliseconds, as
// dynamostore's condition does) on a settled record: both stores must give
// the same sentinel.
func TestPreemptSubMillisecondCreatedAgree(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	mem := memstore.New(func(o *memstore.Options) { o.Clock = e.Clock.Now })
	for name, s := range map[string]idem.Backend{"dynamostore": e.Store, "memstore": mem} {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, s, k, fpA)
		if err := s.Commit(ctx, l, resp); err != nil {
			t.Fatal(err)
		}
		_, err := s.Preempt(ctx, k, l.CreatedAt.Add(500*time.Microsecond))
		if !errors.Is(err, idem.ErrCompleted) {
			t.Errorf("%s: Preempt of a SUCCEEDED command with its CreatedAt+0.5ms: %v, want ErrCompleted (the same command: whole milliseconds)", name, err)
		}
	}
}
