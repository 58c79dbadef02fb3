package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

var (
	fpA  = idem.FingerprintOf([]byte(`{"amount":100}`))
	fpB  = idem.FingerprintOf([]byte(`{"amount":200}`))
	resp = idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"ch_1"}`)}
)

// counted returns a function for Do that counts its runs and answers out.
func counted(runs *atomic.Int32, out idem.Outcome, err error) func(context.Context, *idem.Lease) (idem.Outcome, error) {
	return func(context.Context, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return out, err
	}
}

func TestDoVerdicts(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	row := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("rows")}}
	declined := idem.Response{Status: 402, Body: []byte("declined")}
	busy := idem.Response{Status: 503, Body: []byte("busy")}
	cases := []struct {
		name       string
		out        idem.Outcome
		err        error
		wantStatus idem.Status
		// then: what a second Do with the same request does.
		wantReplay bool
		wantRuns   int32
		wantWrites int
	}{
		{"succeeded", idem.Succeeded(resp, row), nil, idem.StatusSucceeded, true, 1, 1},
		{"failed", idem.Failed(declined), nil, idem.StatusFailedPermanent, true, 1, 0},
		{"not applied", idem.NotApplied(busy), nil, idem.StatusReleased, false, 2, 0},
		{"unknown", idem.Unknown(busy), nil, idem.StatusInFlight, false, 1, 0},
		{"error alone", idem.Outcome{}, errors.New("boom"), idem.StatusInFlight, false, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			k := idemtest.UniqueKey(t, "acme")
			var runs atomic.Int32
			res, err := idem.Do(ctx, s, k, fpA, nil, counted(&runs, c.out, c.err))
			if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("Do error %v, want %v", err, c.err)
			}
			if res.Status != c.wantStatus || res.Replayed || res.Lease == nil || !res.Response.Equal(c.out.Response) {
				t.Fatalf("first Do = %+v", res)
			}
			again, err := idem.Do(ctx, s, k, fpA, nil, counted(&runs, c.out, nil))
			switch {
			case c.wantReplay:
				if err != nil || !again.Replayed || again.Status != c.wantStatus || !again.Response.Equal(c.out.Response) || again.Lease != nil {
					t.Fatalf("second Do = %+v, %v; want a replay", again, err)
				}
			case c.wantStatus == idem.StatusInFlight:
				dynamotest.WantInFlight(t, err)
			default:
				if err != nil || again.Lease == nil || !again.Lease.CreatedAt.Equal(res.Lease.CreatedAt) {
					t.Fatalf("second Do = %+v, %v; want fn run again under the same CreatedAt", again, err)
				}
			}
			if got := runs.Load(); got != c.wantRuns {
				t.Errorf("fn ran %d times, want %d", got, c.wantRuns)
			}
			if got := len(s.Writes()); got != c.wantWrites {
				t.Errorf("%d business writes committed, want %d", got, c.wantWrites)
			}
		})
	}
}

func TestDoRefusesAnotherRequest(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s := memstore.New()
	k := idemtest.UniqueKey(t, "acme")
	var runs atomic.Int32
	if _, err := idem.Do(ctx, s, k, fpA, nil, counted(&runs, idem.Succeeded(resp), nil)); err != nil {
		t.Fatal(err)
	}
	res, err := idem.Do(ctx, s, k, fpB, nil, counted(&runs, idem.Succeeded(resp), nil))
	var mismatch *idem.MismatchError
	if !errors.As(err, &mismatch) || res.Replayed || runs.Load() != 1 {
		t.Fatalf("another request: %+v, %v, %d runs; want *MismatchError and one run", res, err, runs.Load())
	}
}

func TestDoWaitsForATwin(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s := memstore.New()
	k := idemtest.UniqueKey(t, "acme")
	b, err := s.Begin(ctx, k, fpA, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		_ = s.Commit(ctx, b.Lease, resp)
	}()
	var runs atomic.Int32
	res, err := idem.Do(ctx, s, k, fpA, nil, counted(&runs, idem.Succeeded(resp), nil), func(o *idem.DoOptions) { o.Wait = 5 * time.Second })
	if err != nil || !res.Replayed || runs.Load() != 0 {
		t.Fatalf("Do after waiting: %+v, %v, %d runs; want the twin's replay", res, err, runs.Load())
	}

	t.Run("never past the context's deadline", func(t *testing.T) {
		k := idemtest.UniqueKey(t, "acme")
		if _, err := s.Begin(ctx, k, fpA, nil); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := idem.Do(dctx, s, k, fpA, nil, counted(&runs, idem.Succeeded(resp), nil), func(o *idem.DoOptions) { o.Wait = time.Minute })
		dynamotest.WantInFlight(t, err)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("waited %v, past the deadline less the 1s reserve", took)
		}
	})
}

// heldFor300ms begins a new key in s, and settles its lease 300 ms later:
// past three of Do's pauses. It returns the key.
func heldFor300ms(t *testing.T, s *memstore.Store, settle func(*idem.Lease) error) idem.Key {
	t.Helper()
	k := idemtest.UniqueKey(t, "acme")
	b, err := s.Begin(t.Context(), k, fpA, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = settle(b.Lease)
	}()
	return k
}

// TestDoTellsOnWaitOnceAsItStartsWaiting: a caller that counts a
// request's cost learns when the request starts waiting for another
// holder, once however many pauses follow. A request that does not wait
// is never told.
func TestDoTellsOnWaitOnceAsItStartsWaiting(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s := memstore.New()
	var runs, waits atomic.Int32
	onWait := func(o *idem.DoOptions) { o.OnWait = func(context.Context, idem.Key) bool { waits.Add(1); return true } }

	k := heldFor300ms(t, s, func(l *idem.Lease) error { return s.Commit(ctx, l, resp) })
	res, err := idem.Do(ctx, s, k, fpA, nil, counted(&runs, idem.Succeeded(resp), nil), onWait, func(o *idem.DoOptions) { o.Wait = 5 * time.Second })
	if err != nil || !res.Replayed || waits.Load() != 1 {
		t.Fatalf("Do that waited for a twin: %+v, %v, told %d times; want the replay, told once", res, err, waits.Load())
	}

	if _, err := idem.Do(ctx, s, idemtest.UniqueKey(t, "acme"), fpA, nil, counted(&runs, idem.Succeeded(resp), nil), onWait, func(o *idem.DoOptions) { o.Wait = 5 * time.Second }); err != nil {
		t.Fatal(err)
	}
	held := idemtest.UniqueKey(t, "acme")
	if _, err := s.Begin(ctx, held, fpA, nil); err != nil {
		t.Fatal(err)
	}
	_, err = idem.Do(ctx, s, held, fpA, nil, counted(&runs, idem.Succeeded(resp), nil), onWait)
	dynamotest.WantInFlight(t, err)
	if waits.Load() != 1 {
		t.Fatalf("a free key, and a held one without Wait: told %d times in all, want only the first wait's", waits.Load())
	}
}

// begins counts the Begin calls a Backend gets.
type begins struct {
	idem.Backend
	n atomic.Int32
}

func (b *begins) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	b.n.Add(1)
	return b.Backend.Begin(ctx, key, fp, intent)
}

// TestDoAnswersInFlightAtOnceWhenOnWaitRefuses: a caller may cap the
// requests waiting on one key. Refused, Do answers the holder's
// *InFlightError at once, with its retry time. It makes one more Begin,
// and never runs fn.
func TestDoAnswersInFlightAtOnceWhenOnWaitRefuses(t *testing.T) {
	t.Parallel()
	dynamo, err := dynamostore.New(dynamotest.Client(t), dynamotest.Table(t, dynamostore.TableInput("refused")))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]idem.Backend{"memstore": memstore.New(), "dynamostore": dynamo} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := idemtest.UniqueKey(t, "acme")
			if _, err := s.Begin(t.Context(), k, fpA, nil); err != nil {
				t.Fatal(err)
			}
			b := &begins{Backend: s}
			var runs, waits atomic.Int32
			start := time.Now()
			_, err := idem.Do(t.Context(), b, k, fpA, nil, counted(&runs, idem.Succeeded(resp), nil), func(o *idem.DoOptions) {
				o.Wait, o.OnWait = 5*time.Second, func(context.Context, idem.Key) bool { waits.Add(1); return false }
			})
			var inflight *idem.InFlightError
			if !errors.As(err, &inflight) || inflight.LeaseExpiresAt.IsZero() {
				t.Fatalf("Do refused a wait: %v; want *InFlightError with the lease's end", err)
			}
			if took := time.Since(start); took > 200*time.Millisecond || b.n.Load() != 2 || waits.Load() != 1 || runs.Load() != 0 {
				t.Fatalf("Do refused a wait: took %v, %d Begin, told %d times, fn ran %d; want at once, 2 Begin, told once, fn never", took, b.n.Load(), waits.Load(), runs.Load())
			}
		})
	}
}

// TestDoRefusedAWaitAnswersByTheKeyAsItIsThen (review waitcap): OnWait
// refuses, and meanwhile the holder settles or releases the key. Do's
// claim before OnWait is stale. A committed key answers its replay, not
// *InFlightError. A released one is claimed: fn runs once.
func TestDoRefusedAWaitAnswersByTheKeyAsItIsThen(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	for name, c := range map[string]struct {
		settle   func(ctx context.Context, l *idem.Lease) error
		replayed bool
		runs     int32
	}{
		"committed": {func(ctx context.Context, l *idem.Lease) error { return s.Commit(ctx, l, resp) }, true, 0},
		"released":  {s.Release, false, 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := idemtest.UniqueKey(t, "acme")
			held, err := s.Begin(t.Context(), k, fpA, nil)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			res, err := idem.Do(t.Context(), s, k, fpA, nil, counted(&runs, idem.Succeeded(resp), nil), func(o *idem.DoOptions) {
				o.Wait, o.OnWait = 5*time.Second, func(ctx context.Context, _ idem.Key) bool {
					if err := c.settle(ctx, held.Lease); err != nil {
						t.Errorf("the holder's settle: %v", err)
					}
					return false
				}
			})
			if err != nil || res.Replayed != c.replayed || runs.Load() != c.runs {
				t.Fatalf("Do refused a wait as the key was %s: %+v, %v, fn ran %d; want replayed %v, fn run %d", name, res, err, runs.Load(), c.replayed, c.runs)
			}
		})
	}
}

// TestDoMayRunFnAfterTellingOnWait: the holder releases the key (its
// effect proved not done) while the request waits. Do then claims the key
// and runs fn: new work after OnWait. A caller that gave its cost back
// there takes it again in fn. (Review 9 found the doc said it never ran.)
func TestDoMayRunFnAfterTellingOnWait(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s := memstore.New()
	var runs, waits atomic.Int32
	k := heldFor300ms(t, s, func(l *idem.Lease) error { return s.Release(ctx, l) })
	toldFirst := false
	fn := func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		toldFirst = waits.Load() == 1
		return counted(&runs, idem.Succeeded(resp), nil)(ctx, l)
	}
	res, err := idem.Do(ctx, s, k, fpA, nil, fn, func(o *idem.DoOptions) {
		o.Wait, o.OnWait = 5*time.Second, func(context.Context, idem.Key) bool { waits.Add(1); return true }
	})
	if err != nil || res.Replayed || runs.Load() != 1 || waits.Load() != 1 || !toldFirst {
		t.Fatalf("Do on a key released while it waited: %+v, %v; fn ran %d time(s), OnWait told %d time(s), before fn: %v; want fn run once, after OnWait told once",
			res, err, runs.Load(), waits.Load(), toldFirst)
	}
}

func TestDoLeaseLost(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	clock := idemtest.NewClock(time.Now())
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	k := idemtest.UniqueKey(t, "acme")
	res, err := idem.Do(ctx, s, k, fpA, nil, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		clock.Advance(time.Hour) // the attempt stalls; a reconciler settles the command
		taken, err := s.TakeOver(ctx, l.Key)
		if err != nil {
			return idem.Outcome{}, err
		}
		if err := s.Commit(ctx, taken, resp); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte("late")}), nil
	})
	if !errors.Is(err, idem.ErrLeaseLost) || res.Lease == nil || res.Status != idem.StatusInFlight {
		t.Fatalf("late settlement: %+v, %v; want ErrLeaseLost with the lease", res, err)
	}
}

func TestDoReservesTimeToSettle(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	s := memstore.New()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	outer, _ := dctx.Deadline()
	_, err := idem.Do(dctx, s, idemtest.UniqueKey(t, "acme"), fpA, nil, func(ctx context.Context, _ *idem.Lease) (idem.Outcome, error) {
		if inner, ok := ctx.Deadline(); !ok || !inner.Equal(outer.Add(-5*time.Second)) {
			t.Errorf("fn's deadline %v, want %v", inner, outer.Add(-5*time.Second))
		}
		return idem.Succeeded(resp), nil
	}, func(o *idem.DoOptions) { o.Reserve = 5 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
}
