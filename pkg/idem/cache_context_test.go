package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestConformanceReplayCache: a ReplayCache is a Backend (backend.go
// says a ReplayCache wraps either store), so it keeps the Backend contract
// the suite checks.
func TestConformanceReplayCache(t *testing.T) {
	t.Parallel()
	idemtest.RunConformance(t, func(t *testing.T, o idemtest.Options) idemtest.Subject {
		s := memstore.New(func(m *memstore.Options) {
			m.Clock, m.Retention, m.ReleaseRetention, m.DefaultLease, m.Shards = o.Clock, o.Retention, o.ReleaseRetention, o.DefaultLease, o.Shards
		})
		return idemtest.Subject{Store: idem.NewReplayCache(s, 64)}
	})
}

// TestReplayCacheDoneContext: backend.go, "Context. A method
// called with a context already done returns an error wrapping the
// context's error". A warm ReplayCache answers Begin with a replay.
func TestReplayCacheDoneContext(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	cache := idem.NewReplayCache(memstore.New(), 8)
	k := idemtest.UniqueKey(t, "acme")
	b, err := cache.Begin(ctx, k, fpA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.Commit(ctx, b.Lease, resp); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	got, err := cache.Begin(done, k, fpA, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ReplayCache.Begin with a done context = %+v, %v; want an error wrapping context.Canceled", got, err)
	}
}
