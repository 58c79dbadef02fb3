package dynamostore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

func wantReplay(t *testing.T, s *dynamostore.Store, k idem.Key, want idem.Response) {
	ctx := t.Context()
	t.Helper()
	b, err := s.Begin(ctx, k, fpA, nil)
	if err != nil || b.Replay == nil {
		t.Fatalf("Begin: want a replay, got %+v, %v", b, err)
	}
	if b.Replay.Status != want.Status || !bytes.Equal(b.Replay.Body, want.Body) || b.Replay.Headers["Content-Type"] != want.Headers["Content-Type"] {
		t.Fatalf("replay = %d %q %v, want %d %q %v", b.Replay.Status, b.Replay.Body, b.Replay.Headers, want.Status, want.Body, want.Headers)
	}
}

func TestLifecycleAllowedTransitions(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)

	t.Run("absent to in flight to succeeded, then replay", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		_, err := e.Store.Begin(ctx, k, fpA, nil)
		dynamotest.WantInFlight(t, err)
		if err := e.Store.Commit(ctx, l, resp); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, e.Store, k, resp)
		rec, err := e.Store.Get(ctx, k)
		if err != nil || rec.Status != idem.StatusSucceeded || string(rec.Intent) != "intent" {
			t.Fatalf("Get = %+v, %v", rec, err)
		}
	})
	t.Run("in flight to failed permanent, then replay of the failure", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		declined := idem.Response{Status: 402, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: []byte(`{"type":"card-declined"}`)}
		if err := e.Store.Fail(ctx, l, declined); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, e.Store, k, declined)
	})
	t.Run("in flight to released by fenced release, claimed again by the same request only", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		e.Clock.Advance(time.Second)
		if err := e.Store.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		rec, err := e.Store.Get(ctx, k)
		if err != nil || rec.Status != idem.StatusReleased || rec.Fingerprint != fpA.String() {
			t.Fatalf("Get after release: %+v, %v", rec, err)
		}
		if _, err := e.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
			t.Fatalf("another request on a released key: want mismatch, got %v", err)
		}
		again := dynamotest.Begin(t, e.Store, k, fpA)
		if !again.CreatedAt.Equal(l.CreatedAt) || again.Token == l.Token {
			t.Fatalf("claim after release: CreatedAt %v (was %v), token %s (was %s)", again.CreatedAt, l.CreatedAt, again.Token, l.Token)
		}
		if err := e.Store.Release(ctx, l); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the first lease after the key was claimed again: want ErrLeaseLost, got %v", err)
		}
		if err := e.Store.Commit(ctx, again, resp); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, e.Store, k, resp)
	})
	t.Run("heartbeat extends the lease", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		first := l.ExpiresAt
		e2 := *e
		e2.Clock = idemtest.NewClock(e.Clock.Now().Add(20 * time.Second))
		s2 := e2.NewStore(t)
		if err := s2.Heartbeat(ctx, l); err != nil {
			t.Fatal(err)
		}
		if !l.ExpiresAt.After(first) {
			t.Fatalf("lease not extended: %v then %v", first, l.ExpiresAt)
		}
		rec, err := e.Store.Get(ctx, k)
		if err != nil || !rec.LeaseExpiresAt.Equal(l.ExpiresAt.Truncate(time.Millisecond)) {
			t.Fatalf("stored lease %v, want %v (%v)", rec.LeaseExpiresAt, l.ExpiresAt, err)
		}
	})
}

func TestLifecycleForbiddenTransitions(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	terminal := map[string]func(*idem.Lease) error{
		"succeeded":        func(l *idem.Lease) error { return e.Store.Commit(ctx, l, resp) },
		"failed permanent": func(l *idem.Lease) error { return e.Store.Fail(ctx, l, resp) },
	}
	for name, finish := range terminal {
		t.Run(name+" is terminal", func(t *testing.T) {
			k := dynamotest.Key(t, "acme")
			l := dynamotest.Begin(t, e.Store, k, fpA)
			if err := finish(l); err != nil {
				t.Fatal(err)
			}
			for op, again := range map[string]func() error{
				"commit":    func() error { return e.Store.Commit(ctx, l, idem.Response{Status: 500}) },
				"fail":      func() error { return e.Store.Fail(ctx, l, idem.Response{Status: 500}) },
				"release":   func() error { return e.Store.Release(ctx, l) },
				"heartbeat": func() error { return e.Store.Heartbeat(ctx, l) },
			} {
				if err := again(); !errors.Is(err, idem.ErrLeaseLost) {
					t.Errorf("%s after %s: want ErrLeaseLost, got %v", op, name, err)
				}
			}
			e.Clock.Advance(time.Hour) // even with every lease long expired
			defer e.Clock.Advance(-time.Hour)
			if _, err := e.Store.TakeOver(ctx, k); !errors.Is(err, idem.ErrCompleted) {
				t.Errorf("take over of %s: want ErrCompleted, got %v", name, err)
			}
			wantReplay(t, e.Store, k, resp) // never reopened to IN_FLIGHT
		})
	}
	t.Run("only the lease owner completes", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		impostor := *l
		impostor.Token = strings.Repeat("0", len(l.Token))
		for op, try := range map[string]func() error{
			"commit":    func() error { return e.Store.Commit(ctx, &impostor, resp) },
			"fail":      func() error { return e.Store.Fail(ctx, &impostor, resp) },
			"release":   func() error { return e.Store.Release(ctx, &impostor) },
			"heartbeat": func() error { return e.Store.Heartbeat(ctx, &impostor) },
		} {
			if err := try(); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("%s by another token: want ErrLeaseLost, got %v", op, err)
			}
		}
		if err := e.Store.Commit(ctx, l, resp); err != nil {
			t.Fatalf("the owner's commit: %v", err)
		}
	})
	t.Run("no take over of a live lease", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		dynamotest.Begin(t, e.Store, k, fpA)
		_, err := e.Store.TakeOver(ctx, k)
		dynamotest.WantInFlight(t, err)
	})
	t.Run("no take over of an absent record", func(t *testing.T) {
		if _, err := e.Store.TakeOver(ctx, dynamotest.Key(t, "acme")); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("want ErrNotFound, got %v", err)
		}
	})
}

func TestFencingAfterTakeOver(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	business := dynamotest.Table(t, &dynamodb.CreateTableInput{
		TableName:            aws.String("business"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	put := func(id, by string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String(business),
			Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}, "by": &types.AttributeValueMemberS{Value: by}},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		}}
	}

	k := dynamotest.Key(t, "acme")
	a := dynamotest.Begin(t, e.Store, k, fpA)
	e.Clock.Advance(31 * time.Second) // A's lease runs out
	b, err := e.Store.TakeOver(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token == a.Token || string(b.Intent) != "intent" || !b.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("take over lease = %+v (A's: %+v)", b, a)
	}
	if err := e.Store.Commit(ctx, b, resp, put("b-row", "B")); err != nil {
		t.Fatalf("B commit: %v", err)
	}
	// A's transaction also collides with the row B wrote: the lost lease is
	// still what it reports.
	err = e.Store.Commit(ctx, a, idem.Response{Status: 201, Body: []byte("A")}, put("a-row", "A"), put("b-row", "A"))
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("A's late commit: want ErrLeaseLost, got %v", err)
	}
	for id, want := range map[string]bool{"a-row": false, "b-row": true} {
		out, err := e.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(business), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(out.Item) > 0; got != want {
			t.Errorf("business row %s present = %v, want %v", id, got, want)
		}
	}
	wantReplay(t, e.Store, k, resp)

	t.Run("a business write's own condition names the write", func(t *testing.T) {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		err := e.Store.Commit(ctx, l, resp, put("fresh-"+k.ClientKey(), "x"), put("b-row", "dup"))
		var wce *idem.WriteConditionError
		if !errors.As(err, &wce) || wce.Index != 1 || !errors.Is(err, idem.ErrWriteCondition) {
			t.Fatalf("want WriteConditionError{1}, got %v", err)
		}
		rec, err := e.Store.Get(ctx, k)
		if err != nil || rec.Status != idem.StatusInFlight {
			t.Fatalf("record after failed commit: %+v %v", rec, err)
		}
	})
}

func TestExpiredRecordIsAbsent(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Retention = time.Hour })
	k := dynamotest.Key(t, "acme")
	l := dynamotest.Begin(t, e.Store, k, fpA)
	if err := e.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	if want := l.ExpiresAt.Add(time.Hour).Truncate(time.Second); !l.RecordExpiresAt.Equal(want) {
		t.Fatalf("retention ends %v, want an hour after the lease %v", l.RecordExpiresAt, want)
	}
	e.Clock.Advance(l.RecordExpiresAt.Sub(e.Clock.Now()) + time.Second) // moto never deletes by TTL; AWS deletes lazily
	if _, err := e.Store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get of an expired record: want ErrNotFound, got %v", err)
	}
	if _, err := e.Store.TakeOver(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("TakeOver of an expired record: want ErrNotFound, got %v", err)
	}
	next := dynamotest.Begin(t, e.Store, k, fpB) // a new command under the old key
	if !next.CreatedAt.After(l.CreatedAt) {
		t.Fatalf("the new command's CreatedAt %v does not tell it from the old one's %v", next.CreatedAt, l.CreatedAt)
	}
}

func TestMismatchNeverReplays(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	k := dynamotest.Key(t, "acme")
	l := dynamotest.Begin(t, e.Store, k, fpA)
	if _, err := e.Store.Begin(ctx, k, fpB, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("in flight, other body: want mismatch, got %v", err)
	}
	if err := e.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	b, err := e.Store.Begin(ctx, k, fpB, nil)
	if !errors.Is(err, idem.ErrMismatch) || b.Replay != nil || b.Lease != nil {
		t.Fatalf("completed, other body: want mismatch and nothing else, got %+v %v", b, err)
	}
}

func TestTenantsDoNotShareKeys(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	ka := dynamotest.Key(t, "tenant-a")
	kb, _ := idem.NewKey("tenant-b", ka.Operation(), ka.ClientKey())
	l := dynamotest.Begin(t, e.Store, ka, fpA)
	if err := e.Store.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	dynamotest.Begin(t, e.Store, kb, fpA) // same client key and body, other tenant: a new command
}

func TestCallsPerOperation(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	k := dynamotest.Key(t, "acme")
	e.Calls.Snapshot()
	check := func(what string, want map[string]int) {
		t.Helper()
		got := e.Calls.Snapshot()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: DynamoDB calls %v, want %v", what, got, want)
		}
	}
	l := dynamotest.Begin(t, e.Store, k, fpA)
	check("Begin, new", map[string]int{"PutItem": 1})
	_, _ = e.Store.Begin(ctx, k, fpA, nil)
	check("Begin, in flight", map[string]int{"PutItem": 1})
	_, _ = e.Store.Begin(ctx, k, fpB, nil)
	check("Begin, mismatch", map[string]int{"PutItem": 1})
	row := types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(e.Table),
		Item:      map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}},
	}}
	if err := e.Store.Commit(ctx, l, resp, row); err != nil {
		t.Fatal(err)
	}
	check("Commit with a business write", map[string]int{"TransactWriteItems": 1})
	wantReplay(t, e.Store, k, resp)
	check("Begin, replay", map[string]int{"PutItem": 1})

	big := idem.Response{Status: 201, Body: make([]byte, 500*1024)}
	rand.NewChaCha8([32]byte{}).Read(big.Body) // incompressible
	l2 := dynamotest.Begin(t, e.Store, dynamotest.Key(t, "acme"), fpA)
	e.Calls.Snapshot()
	if err := e.Store.Commit(ctx, l2, big); !errors.Is(err, idem.ErrTooLarge) {
		t.Fatalf("oversized response: want ErrTooLarge, got %v", err)
	}
	check("Commit refused before writing", map[string]int{})
	if err := e.Store.Commit(ctx, l2, resp); err != nil {
		t.Fatal(err)
	}
	check("Commit without business writes", map[string]int{"UpdateItem": 1})
}

func TestLargeResponseIsCompressedAndReplayedExactly(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	k := dynamotest.Key(t, "acme")
	l := dynamotest.Begin(t, e.Store, k, fpA)
	body := []byte(strings.Repeat(`{"line":"a fairly repetitive response body"}`, 5000)) // ~220 KB, compresses well
	big := idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: body}
	if err := e.Store.Commit(ctx, l, big); err != nil {
		t.Fatal(err)
	}
	wantReplay(t, e.Store, k, big)
}

func TestStuckLeaseIndex(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t, func(o *dynamostore.Options) { o.Shards = 2 })
	stuck := map[string]bool{}
	for i := 0; i < 6; i++ {
		k := dynamotest.Key(t, "acme")
		l := dynamotest.Begin(t, e.Store, k, fpA)
		switch i % 3 {
		case 0:
			stuck[k.String()] = true
		case 1:
			if err := e.Store.Commit(ctx, l, resp); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := e.Store.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	found := func(before time.Time) map[string]bool {
		got := map[string]bool{}
		for shard := range e.Store.Shards() {
			for sl, err := range e.Store.StuckLeases(ctx, shard, before) {
				if err != nil {
					t.Fatal(err)
				}
				got[sl.Key.String()] = true
			}
		}
		return got
	}
	if got := found(e.Clock.Now()); len(got) != 0 {
		t.Fatalf("live leases listed as stuck: %v", got)
	}
	if got := found(e.Clock.Now().Add(time.Minute)); fmt.Sprint(got) != fmt.Sprint(stuck) {
		t.Fatalf("stuck = %v, want %v", got, stuck)
	}
}

// TestStuckLeasesAtASubMillisecondBoundary: memstore lists the same stuck
// leases as the DynamoDB store. A lease ends at a whole millisecond
// (lease_expires_at is stored in ms). Asked for the leases that ended
// before a time 0.5 ms after that, the DynamoDB store cuts the bound to its
// millisecond (lexp < ms(before): not listed), and so must memstore: Sweep
// passes its clock's time as it is, and the two stores' sweeps must find
// the same keys. The conformance suite's clock ticks in whole milliseconds
// and never sees it.
func TestStuckLeasesAtASubMillisecondBoundary(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	list := func(t *testing.T, s idem.Backend) int {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := b.Lease.ExpiresAt.Add(500 * time.Microsecond) // the lease has run out by then
		n := 0
		for sl, err := range s.StuckLeases(ctx, 0, before) {
			if err != nil {
				t.Fatal(err)
			}
			if sl.Key == k {
				n++
			}
		}
		return n
	}
	start := time.Now().Truncate(time.Millisecond)
	dClock, mClock := idemtest.NewClock(start), idemtest.NewClock(start)
	ds, err := dynamostore.New(dynamotest.Client(t), dynamotest.Table(t, dynamostore.TableInput("stuckms")),
		func(o *dynamostore.Options) { o.Clock, o.Shards = dClock.Now, 1 })
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(func(o *memstore.Options) { o.Clock, o.Shards = mClock.Now, 1 })
	d, m := list(t, ds), list(t, ms)
	t.Logf("listed 0.5 ms after the lease's end: DynamoDB %d, memstore %d", d, m)
	if d != m {
		t.Fatalf("the stores list different stuck leases for one bound: DynamoDB %d, memstore %d", d, m)
	}
}

// loseFirstAnswer forwards every request, but for the first one whose
// X-Amz-Target ends with op it throws the answer away and reports a 500:
// the write was applied and the caller does not know.
type loseFirstAnswer struct {
	op   string
	mu   sync.Mutex
	done bool
}

func (l *loseFirstAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+l.op) {
		return resp, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return resp, err
	}
	l.done = true
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return &http.Response{
		StatusCode: http.StatusInternalServerError, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Errortype": {"InternalServerError"}},
		Body:    io.NopCloser(strings.NewReader(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost"}`)),
		Request: req,
	}, nil
}

// TestBeginRecognisesItsOwnRetriedPut: when the SDK retries a claim whose
// first attempt was applied, the conditional put fails on the caller's own
// record; Begin must see its own token and hand out the lease, not report
// the key in flight to the one attempt that holds it.
func TestBeginRecognisesItsOwnRetriedPut(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	lossy := &loseFirstAnswer{op: "PutItem"}
	db := dynamotest.Client(t, e.Calls.Option(), func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: lossy}
	})
	s, err := dynamostore.New(db, e.Table, func(o *dynamostore.Options) { o.Clock = e.Clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	k := dynamotest.Key(t, "acme")
	b, err := s.Begin(ctx, k, fpA, []byte("intent"))
	if err != nil || b.Lease == nil {
		t.Fatalf("Begin after a lost answer: %+v, %v", b, err)
	}
	if !lossy.done {
		t.Fatal("the answer was not lost: the test proves nothing")
	}
	if err := s.Commit(ctx, b.Lease, resp); err != nil {
		t.Fatalf("the owner's commit: %v", err)
	}
	wantReplay(t, e.Store, k, resp)
}

// TestBeginWhoseAnswerIsLostIsUnknown: a claim that landed, its answer
// lost and every retry throttled, is *UnknownClaimError with the lease the
// record holds: never a refusal the caller could take for "nothing ran".
func TestBeginWhoseAnswerIsLostIsUnknown(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	lossy := &idemtest.LostClaim{}
	lossy.Arm()
	db := dynamotest.Client(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: lossy} })
	s, err := dynamostore.New(db, e.Table, func(o *dynamostore.Options) { o.Clock = e.Clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	k := dynamotest.Key(t, "acme")
	_, err = s.Begin(ctx, k, fpA, []byte("intent"))
	var unknown *idem.UnknownClaimError
	if !errors.As(err, &unknown) || errors.Is(err, idem.ErrUnavailable) {
		t.Fatalf("Begin whose answer was lost: %v, want *UnknownClaimError, never ErrUnavailable (which proves no record was written)", err)
	}
	rec, gerr := e.Store.Get(ctx, k)
	if gerr != nil || rec.Status != idem.StatusInFlight || !rec.LeaseExpiresAt.Equal(unknown.LeaseExpiresAt) {
		t.Fatalf("the record the claim left: %+v, %v; the error says lease until %v", rec, gerr, unknown.LeaseExpiresAt)
	}
}

// overFaultyConnection is a store on e's table whose every call meets
// fault, with the SDK's retries but not its pauses.
func overFaultyConnection(t *testing.T, e *dynamotest.Env, fault idemtest.ConnectionFault) (*dynamostore.Store, *dynamodb.Client) {
	t.Helper()
	db := dynamotest.Client(t, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: idemtest.FaultyConnection{Fault: fault}}
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxBackoff, so.RateLimiter = time.Millisecond, ratelimit.None })
	})
	s, err := dynamostore.New(db, e.Table, func(o *dynamostore.Options) { o.Clock = e.Clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

// TestCallsOverAFailedConnection: a refused connection proves that the
// request never left; a reset or an answer cut short proves nothing. So
// a claim is ErrUnavailable, "no record was written", only when refused,
// and *UnknownClaimError otherwise. A read is ErrUnavailable whatever
// failed: it wrote nothing.
func TestCallsOverAFailedConnection(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	for _, fault := range idemtest.ConnectionFaults {
		t.Run(string(fault), func(t *testing.T) {
			t.Parallel()
			s, _ := overFaultyConnection(t, e, fault)
			k := dynamotest.Key(t, "acme")
			_, err := s.Begin(ctx, k, fpA, []byte("intent"))
			var claim *idem.UnknownClaimError
			unknown := errors.As(err, &claim)
			if fault == idemtest.Refused && (unknown || !errors.Is(err, idem.ErrUnavailable)) {
				t.Errorf("Begin over a refused connection: %v, want ErrUnavailable: nothing was sent", err)
			}
			if fault != idemtest.Refused && !unknown {
				t.Errorf("Begin over a connection %s after DynamoDB applied it: %v, want *UnknownClaimError", fault, err)
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrUnavailable) {
				t.Errorf("Get over a connection %s: %v, want ErrUnavailable", fault, err)
			}
		})
	}
}

// TestATakeOverOverAFailedConnection: a take-over is a claim of a lease.
// Refused, it took nothing; reset or cut short, it may have landed, and
// is *UnknownClaimError, never "nothing was written".
func TestATakeOverOverAFailedConnection(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	stuck := map[idemtest.ConnectionFault]idem.Key{}
	for _, fault := range idemtest.ConnectionFaults {
		stuck[fault] = dynamotest.Key(t, "acme")
		if _, err := e.Store.Begin(ctx, stuck[fault], fpA, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.Clock.Advance(time.Hour) // every lease ran out
	for _, fault := range idemtest.ConnectionFaults {
		t.Run(string(fault), func(t *testing.T) {
			t.Parallel()
			s, _ := overFaultyConnection(t, e, fault)
			_, err := s.TakeOver(ctx, stuck[fault])
			var claim *idem.UnknownClaimError
			unknown := errors.As(err, &claim)
			if fault == idemtest.Refused && (unknown || !errors.Is(err, idem.ErrUnavailable)) {
				t.Errorf("TakeOver over a refused connection: %v, want ErrUnavailable: nothing was sent", err)
			}
			if fault != idemtest.Refused && (!unknown || errors.Is(err, idem.ErrUnavailable)) {
				t.Errorf("TakeOver over a connection %s after DynamoDB applied it: %v, want *UnknownClaimError", fault, err)
			}
		})
	}
}

// TestAttemptsTellAWriteNeverSent: a caller's own write beside the store
// is known not to have been applied only when its connection was refused
// at every attempt. Its error is ErrUnavailable whatever the fault.
func TestAttemptsTellAWriteNeverSent(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	for _, fault := range idemtest.ConnectionFaults {
		t.Run(string(fault), func(t *testing.T) {
			t.Parallel()
			_, db := overFaultyConnection(t, e, fault)
			var tries dynamostore.Attempts
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:                 aws.String(e.Table),
				Key:                       map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: dynamotest.UniqueName("row")}},
				UpdateExpression:          aws.String("SET n = :one"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
			}, tries.Option)
			if !errors.Is(dynamostore.AsUnavailable(err), idem.ErrUnavailable) {
				t.Errorf("a write over a connection %s: %v, want ErrUnavailable", fault, err)
			}
			if got, want := tries.Refused(), fault == idemtest.Refused; got != want {
				t.Errorf("a write over a connection %s: Refused() = %v, want %v", fault, got, want)
			}
		})
	}
}
