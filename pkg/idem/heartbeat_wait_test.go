package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestHeartbeatShortensTheLease: Backend's doc says Heartbeat
// "extends a live lease" (backend.md: "extend a live lease, and its
// AttemptDeadline"), and run's doc that fn must not act after the lease's
// AttemptDeadline, which fn's context enforces. A Heartbeat from a
// goroutine with a context of its own (no deadline) moves the lease and
// AttemptDeadline back to DefaultLease (30s) from now, while fn's context
// still runs until the caller's deadline (10 min): 30s later a reconciler
// takes the command over and may release it while fn can still act.
func TestHeartbeatShortensTheLease(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	c, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	_, err := idem.Do(c, s, idemtest.UniqueKey(t, "acme"), fpA, nil, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		before := l.ExpiresAt
		if err := s.Heartbeat(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		fnEnd, _ := ctx.Deadline()
		if l.ExpiresAt.Before(before) || fnEnd.After(l.AttemptDeadline.Add(time.Second)) {
			t.Errorf("Heartbeat moved the lease from %s back to %s (AttemptDeadline %s), while fn's context runs until %s",
				before.Format(time.TimeOnly), l.ExpiresAt.Format(time.TimeOnly), l.AttemptDeadline.Format(time.TimeOnly), fnEnd.Format(time.TimeOnly))
		}
		return idem.Succeeded(resp), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// inFlightThenThrottled is a Backend whose Begin says the key is held
// (ErrInFlight) once, then is throttled (ErrUnavailable).
type inFlightThenThrottled struct {
	idem.Backend
	calls int
}

func (s *inFlightThenThrottled) Begin(context.Context, idem.Key, idem.Fingerprint, []byte) (idem.Begun, error) {
	s.calls++
	if s.calls == 1 {
		return idem.Begun{}, &idem.InFlightError{LeaseExpiresAt: s.Now().Add(20 * time.Second), RecordExpiresAt: s.Now().Add(24 * time.Hour)}
	}
	return idem.Begun{}, fmt.Errorf("mystore: throttled: %w", idem.ErrUnavailable)
}

// TestWaitForgetsTheHolder: Do, waiting (DoOptions.Wait) for an
// attempt that holds the key, returns the last claim's error alone. When
// that is ErrUnavailable, the caller is told (Backend's proof rule, and
// do.md's "case err != nil: // nothing ran: 503, retry") that nothing was
// done, though Do saw the key held by an attempt that may have acted.
func TestWaitForgetsTheHolder(t *testing.T) {
	t.Parallel()
	s := &inFlightThenThrottled{Backend: memstore.New()}
	_, err := idem.Do(t.Context(), s, idemtest.UniqueKey(t, "acme"), fpA, nil, func(context.Context, *idem.Lease) (idem.Outcome, error) {
		t.Fatal("fn ran")
		return idem.Outcome{}, nil
	}, func(o *idem.DoOptions) { o.Wait = time.Second })
	if errors.Is(err, idem.ErrUnavailable) && !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("Do = %v: ErrUnavailable, \"nothing was done\", after %d claims, the first of which found the key held", err, s.calls)
	}
}
