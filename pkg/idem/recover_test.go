package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// sweepStores returns both stores, the DynamoDB one on a table of its
// own: a sweep takes over every stuck lease it lists, other tests' too.
func sweepStores(t *testing.T, clock *idemtest.Clock) map[string]idem.Backend {
	t.Helper()
	dynamo, err := dynamostore.New(dynamotest.Client(t), dynamotest.Table(t, dynamostore.TableInput("sweep")), func(o *dynamostore.Options) {
		o.Clock, o.DefaultLease, o.Shards = clock.Now, 30*time.Second, 4
	})
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(func(o *memstore.Options) { o.Clock, o.DefaultLease, o.Shards = clock.Now, 30*time.Second, 4 })
	return map[string]idem.Backend{"memstore": mem, "dynamodb": dynamo}
}

// answers is a Resolver answering each key as told, and counting what it
// is asked.
type answers struct {
	mu    sync.Mutex
	by    map[idem.Key]idem.Outcome
	fail  map[idem.Key]error
	asked map[idem.Key]int
}

func (a *answers) resolve(_ context.Context, l *idem.Lease) (idem.Outcome, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.asked == nil {
		a.asked = map[idem.Key]int{}
	}
	a.asked[l.Key]++
	return a.by[l.Key], a.fail[l.Key]
}

func TestSweep(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	for name, s := range sweepStores(t, clock) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			newKey := func() idem.Key { return idemtest.UniqueKey(t, "acme") }
			claim := func(k idem.Key) *idem.Lease {
				b, err := s.Begin(ctx, k, fpA, []byte("intent"))
				if err != nil || b.Lease == nil {
					t.Fatalf("Begin: %+v, %v", b, err)
				}
				return b.Lease
			}
			succeeded, failed, released, postponed, broken := newKey(), newKey(), newKey(), newKey(), newKey()
			for _, k := range []idem.Key{succeeded, failed, released, postponed, broken} {
				claim(k) // an attempt that dies
			}
			done, freed := claim(newKey()), claim(newKey())
			if err := s.Commit(ctx, done, resp); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, freed); err != nil {
				t.Fatal(err)
			}
			clock.Advance(31 * time.Second)
			live := newKey()
			claim(live)

			errBroken := errors.New("provider down")
			a := &answers{
				by: map[idem.Key]idem.Outcome{
					succeeded: idem.Succeeded(resp),
					failed:    idem.Failed(idem.Response{Status: 402}),
					released:  idem.NotApplied(idem.Response{}),
					postponed: idem.Postponed(clock.Now().Add(10 * time.Minute)),
				},
				fail: map[idem.Key]error{broken: fmt.Errorf("looking up %s: %w", broken, errBroken)},
			}
			sweep := func() (idem.Swept, error) {
				return idem.Sweep(ctx, s, a.resolve)
			}
			sum, err := sweep()
			if sum != (idem.Swept{Found: 5, Settled: 3, Failed: 1}) || !errors.Is(err, errBroken) {
				t.Fatalf("Sweep = %+v, %v; want 5 found, 3 settled, 1 failed with the resolver's error", sum, err)
			}
			if text := err.Error(); strings.Contains(text, broken.String()) || !strings.Contains(text, broken.LogHash()) {
				t.Fatalf("the sweep's error %q names the key itself, or not by its hash", text)
			}
			want := map[idem.Key]idem.Status{
				succeeded: idem.StatusSucceeded, failed: idem.StatusFailedPermanent, released: idem.StatusReleased,
				postponed: idem.StatusInFlight, broken: idem.StatusInFlight, live: idem.StatusInFlight,
			}
			for k, status := range want {
				if rec, err := s.Get(ctx, k); err != nil || rec.Status != status {
					t.Errorf("after the sweep: %+v, %v; want %s", rec, err, status)
				}
			}
			if len(a.asked) != 5 || a.asked[live] != 0 {
				t.Fatalf("the resolver was asked for %v, want the five stuck keys once", a.asked)
			}

			// The broken key's taken-over lease and the live one run out;
			// the postponed key waits for its retry time.
			clock.Advance(31 * time.Second)
			a.by[broken], a.by[live] = idem.Succeeded(resp), idem.Succeeded(resp)
			delete(a.fail, broken)
			if sum, err := sweep(); sum != (idem.Swept{Found: 2, Settled: 2}) || err != nil {
				t.Fatalf("the second Sweep = %+v, %v; want the broken and the live key settled", sum, err)
			}
		})
	}
}

func TestSweepStopsWhenItsContextEnds(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s, _, k := stuckOnMemstore(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	a := &answers{}
	sum, err := idem.Sweep(cctx, s, a.resolve)
	if sum != (idem.Swept{}) || !errors.Is(err, context.Canceled) || len(a.asked) != 0 {
		t.Fatalf("Sweep = %+v, %v, asked %v; want nothing done and the context's error", sum, err, a.asked)
	}
	if rec, err := s.Get(ctx, k); err != nil || rec.Attempts != 0 {
		t.Fatalf("record after the cancelled sweep: %+v, %v; want it untouched", rec, err)
	}
}

func TestRecoverRefuses(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s, clock, k := stuckOnMemstore(t)

	t.Run("no resolver", func(t *testing.T) {
		if _, err := idem.Recover(ctx, s, k, nil); err == nil {
			t.Fatal("Recover without a resolver succeeded")
		}
		if _, err := idem.Sweep(ctx, s, nil); err == nil {
			t.Fatal("Sweep without a resolver succeeded")
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Attempts != 0 {
			t.Fatalf("record: %+v, %v; want it untouched", rec, err)
		}
	})

	t.Run("a retry time with a verdict that settles", func(t *testing.T) {
		both := func(context.Context, *idem.Lease) (idem.Outcome, error) {
			return idem.Outcome{Status: idem.StatusSucceeded, Response: resp, RetryAt: clock.Now().Add(time.Hour)}, nil
		}
		got, err := idem.Recover(ctx, s, k, both)
		if err == nil || got.Lease == nil || got.Status != idem.StatusInFlight {
			t.Fatalf("Recover = %+v, %v; want an error, the command IN_FLIGHT", got, err)
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight {
			t.Fatalf("record: %+v, %v; want IN_FLIGHT", rec, err)
		}
	})
}

// failingGet is a store whose reads fail the way the store's errors do,
// naming the key.
type failingGet struct{ *memstore.Store }

func (failingGet) Get(_ context.Context, key idem.Key) (*idem.Record, error) {
	return nil, fmt.Errorf("idem: get %s: %w", key, idem.ErrUnavailable)
}

func TestRecoverErrorsNameTheKeyByItsHash(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	k := idemtest.UniqueKey(t, "acme")
	_, err := idem.Recover(ctx, failingGet{memstore.New()}, k, idem.ReleaseLocalEffect)
	if !errors.Is(err, idem.ErrUnavailable) {
		t.Fatalf("Recover: want the store's ErrUnavailable, got %v", err)
	}
	if text := err.Error(); strings.Contains(text, k.String()) || !strings.Contains(text, k.LogHash()) {
		t.Fatalf("Recover's error %q names the key itself, or not by its hash", text)
	}
}

// stuckOnMemstore is a memstore on a test clock with one key whose lease
// ran out an hour ago.
func stuckOnMemstore(t *testing.T) (*memstore.Store, *idemtest.Clock, idem.Key) {
	ctx := t.Context()
	t.Helper()
	clock := idemtest.NewClock(time.Now())
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	k := idemtest.UniqueKey(t, "acme")
	if _, err := s.Begin(ctx, k, fpA, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	return s, clock, k
}

// TestByOperationHandsEachLeaseToItsOperationsResolver: one sweep serves
// every operation of a table, each by its own resolver; a command of an
// operation without one is not settled, and the sweep says which.
func TestByOperationHandsEachLeaseToItsOperationsResolver(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	s := memstore.New(func(o *memstore.Options) { o.Clock, o.DefaultLease = clock.Now, 30*time.Second })
	keys := map[string]idem.Key{}
	for _, op := range []string{"send-invoice", "create-order", "ship-order"} {
		k, err := idem.NewKey("acme", op, "order-42")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Begin(ctx, k, fpA, nil); err != nil {
			t.Fatal(err)
		}
		keys[op] = k
	}
	clock.Advance(time.Minute)
	invoiced := func(context.Context, *idem.Lease) (idem.Outcome, error) { return idem.SucceededJSON("inv-1") }
	sum, err := idem.Sweep(ctx, s, idem.ByOperation(map[string]idem.Resolver{
		"send-invoice": invoiced,
		"create-order": idem.ReleaseLocalEffect,
	}))
	if sum.Found != 3 || sum.Settled != 2 || sum.Failed != 1 || err == nil || !strings.Contains(err.Error(), `"ship-order"`) {
		t.Fatalf("Sweep = %+v, %v; want two settled, and an error naming ship-order", sum, err)
	}
	for op, want := range map[string]idem.Status{"send-invoice": idem.StatusSucceeded, "create-order": idem.StatusReleased, "ship-order": idem.StatusInFlight} {
		if rec, err := s.Get(ctx, keys[op]); err != nil || rec.Status != want {
			t.Errorf("%s: %+v, %v; want %s", op, rec, err, want)
		}
	}
}

// clearFails is a Ledger whose clears of any release's end are refused,
// unapplied, while armed: the Ledger throttled.
type clearFails struct {
	*memstore.Ledger
	armed bool
}

func (c *clearFails) Release(ctx context.Context, key idem.Key, region string, created, until time.Time, token string) error {
	if c.armed && until.IsZero() && token == "" {
		return fmt.Errorf("throttled, the clear is not applied: %w", idem.ErrUnavailable)
	}
	return c.Ledger.Release(ctx, key, region, created, until, token)
}

// Settle is a commit's clear: refused, unapplied, while armed.
func (c *clearFails) Settle(ctx context.Context, key idem.Key, region string, created time.Time) error {
	if c.armed {
		return fmt.Errorf("throttled, the clear is not applied: %w", idem.ErrUnavailable)
	}
	return c.Ledger.Settle(ctx, key, region, created)
}

// TestARecoveredChargeWhoseClearFailedKeepsItsClaim: a stale lease's
// release records its end, then its Lambda dies. The reconciler's lease
// charges and commits; the commit's clear is throttled. CHANGELOG: "the
// same call again clears the end". Nothing calls it again: Recover
// redelivered finds the record SUCCEEDED and does nothing. The end stays,
// and a retry whose record a TTL delete erased is a new command.
func TestARecoveredChargeWhoseClearFailedKeepsItsClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger := &clearFails{Ledger: memstore.NewLedger(nil)}
	region := func() *memstore.Store {
		return memstore.New(func(o *memstore.Options) {
			o.Retention, o.ReleaseRetention = 24*time.Hour, time.Hour // as with Stripe
			o.Clock, o.Region, o.Ledger = clock.Now, "a", ledger
		})
	}
	st := region()
	k := idemtest.UniqueKey(t, "acme")
	begun, err := st.Begin(ctx, k, fpA, []byte("intent"))
	if err != nil || begun.Lease == nil {
		t.Fatalf("Begin: %+v, %v", begun, err)
	}
	stale := begun.Lease
	clock.Advance(stale.ExpiresAt.Add(time.Second).Sub(clock.Now()))
	var charges int
	resolve := func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		// The stale lease's Release: its end lands, then it dies.
		if err := ledger.Ledger.Release(ctx, k, "a", stale.CreatedAt, stale.CreatedAt.Add(time.Hour), stale.Token); err != nil {
			return idem.Outcome{}, err
		}
		charges++ // the reconciler's replay charges under the command's reference
		ledger.armed = true
		return idem.Succeeded(resp), nil
	}
	if _, err := idem.Recover(ctx, st, k, resolve); err == nil {
		t.Fatal("Recover whose commit's clear was throttled: nil error")
	}
	ledger.armed = false
	if _, err := idem.Recover(ctx, st, k, resolve); err != nil { // the message delivered again
		t.Fatalf("Recover again: %v", err)
	}
	if rec, err := st.Get(ctx, k); err != nil || rec.Status != idem.StatusSucceeded {
		t.Fatalf("the record: %+v, %v; want SUCCEEDED", rec, err)
	}
	// Past the stale release's end, within the charge's retention. A fresh
	// store of a: a TTL delete in the other Region erased the record.
	clock.Advance(time.Hour)
	retry, err := region().Begin(ctx, k, fpA, []byte("intent"))
	if err != nil || retry.Lease == nil || !retry.Lease.CreatedAt.Equal(stale.CreatedAt) {
		t.Fatalf("the client's retry after %d charge: %+v, %v; want the charged command taken up under %s, its reference (a new one charges twice)",
			charges, retry, err, stale.CreatedAt)
	}
}
