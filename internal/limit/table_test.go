package limit_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

func newTable(t *testing.T) *limit.Table {
	t.Helper()
	db := testkit.Clients(t).DynamoDB
	name := testkit.TempTable(t, limit.TableInput("limits"))
	if _, err := db.UpdateTimeToLive(t.Context(), limit.TTLInput(name)); err != nil {
		t.Fatal(err)
	}
	table, err := limit.NewTable(db, name)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// TestTableSharesEachSecondsCount: the instances' additions to a tenant's
// second sum up, apart from other seconds and other tenants. A share
// returns the seconds before it that its item holds, last first.
func TestTableSharesEachSecondsCount(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	const w = 1_796_000_000 // the first second of an item
	type u = limit.Usage
	steps := []struct {
		tenant string
		window int64
		add    u
		want   []u
	}{
		{"acme", w, u{Requests: 5, Busy: 120 * time.Millisecond}, []u{{Requests: 5, Busy: 120 * time.Millisecond}}},
		{"acme", w, u{Requests: 3, Busy: 2 * time.Second}, []u{{Requests: 8, Busy: 2120 * time.Millisecond}}},
		{"acme", w, u{Requests: -1}, []u{{Requests: 7, Busy: 2120 * time.Millisecond}}},
		{"acme", w + 1, u{Requests: 1}, []u{{Requests: 1}, {Requests: 7, Busy: 2120 * time.Millisecond}}},
		{"acme", w + 3, u{Busy: time.Second}, []u{{Busy: time.Second}, {}, {Requests: 1}, {Requests: 7, Busy: 2120 * time.Millisecond}}},
		{"acme", w + limit.SharedSpan, u{Requests: 1}, []u{{Requests: 1}}},
		{"globex", w, u{Requests: 2}, []u{{Requests: 2}}},
	}
	for _, s := range steps {
		got, err := table.Add(t.Context(), s.tenant, s.window, s.add)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, s.want) {
			t.Fatalf("add %+v to %s at %d: %+v, want %+v", s.add, s.tenant, s.window, got, s.want)
		}
	}
	// A read of the earlier item returns its seconds as a share would,
	// and adds nothing; one of an item no share made returns zeros.
	for _, r := range []struct {
		window int64
		want   []u
	}{
		{w + 3, []u{{Busy: time.Second}, {}, {Requests: 1}, {Requests: 7, Busy: 2120 * time.Millisecond}}},
		{w + 1, []u{{Requests: 1}, {Requests: 7, Busy: 2120 * time.Millisecond}}},
		{w - 1, make([]u, limit.SharedSpan)},
	} {
		got, err := table.Read(t.Context(), "acme", r.window)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, r.want) {
			t.Fatalf("read acme at %d: %+v, want %+v", r.window, got, r.want)
		}
	}
}

func TestTableKeepsOverrides(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	ctx := t.Context()
	// Counts in the same table are not overrides.
	if _, err := table.Add(ctx, "acme", 1_796_000_000, limit.Usage{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	for tenant, l := range map[string]limit.Limits{"acme": {Rate: 500, Concurrency: 60}, "globex": {Rate: 5}} {
		if err := table.SetOverride(ctx, tenant, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := table.SetOverride(ctx, "acme", limit.Limits{Rate: 400, Concurrency: 60}); err != nil {
		t.Fatal(err)
	}
	got, err := table.Overrides(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]limit.Limits{"acme": {Rate: 400, Concurrency: 60}, "globex": {Rate: 5}}
	if len(got) != len(want) || got["acme"] != want["acme"] || got["globex"] != want["globex"] {
		t.Fatalf("overrides %v, want %v", got, want)
	}
	if err := table.DeleteOverride(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if got, err = table.Overrides(ctx); err != nil || len(got) != 1 || got["globex"] != want["globex"] {
		t.Fatalf("after deleting acme's: %v, %v; want globex's alone", got, err)
	}
	for _, bad := range []limit.Limits{{}, {Rate: -1}, {Concurrency: -5, Rate: 3}, {Rate: limit.MaxRate + 1}, {Concurrency: limit.MaxConcurrency + 1}} {
		if err := table.SetOverride(ctx, "acme", bad); err == nil {
			t.Errorf("override %+v accepted", bad)
		}
	}
	if err := table.SetOverride(ctx, "a#b", limit.Limits{Rate: 1}); err == nil {
		t.Error("an override for a tenant with '#' accepted")
	}
}

// TestAnOverrideWrittenByHandPastTheMaximumIsHeldToIt: a rate past an
// int, set in the console, is held to the maximum; one that is no number
// sets nothing. Neither costs another tenant its override.
func TestAnOverrideWrittenByHandPastTheMaximumIsHeldToIt(t *testing.T) {
	t.Parallel()
	db := testkit.Clients(t).DynamoDB
	name := testkit.TempTable(t, limit.TableInput(testkit.UniqueName("limits")))
	table, err := limit.NewTable(db, name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := table.SetOverride(ctx, "globex", limit.Limits{Rate: 5}); err != nil {
		t.Fatal(err)
	}
	for tenant, rate := range map[string]types.AttributeValue{
		"acme":    &types.AttributeValueMemberN{Value: "100000000000000000000"},
		"initech": &types.AttributeValueMemberS{Value: "fast"},
	} {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: map[string]types.AttributeValue{
			limit.AttrPK: &types.AttributeValueMemberS{Value: "override"},
			limit.AttrSK: &types.AttributeValueMemberS{Value: tenant},
			"rate":       rate,
		}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := table.Overrides(ctx)
	if err != nil {
		t.Fatalf("overrides with two written by hand: %v", err)
	}
	want := map[string]limit.Limits{"globex": {Rate: 5}, "acme": {Rate: limit.MaxRate}, "initech": {}}
	if !maps.Equal(got, want) {
		t.Fatalf("overrides %+v, want %+v", got, want)
	}
}

// TestTableTakesMaxWaitersAWindow: the waits on one thing in flight are
// counted by window. Past most, the window refuses; the next window, or
// another thing, grants again. A table that fails grants nothing.
func TestTableTakesMaxWaitersAWindow(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	w := time.Unix(1_796_000_000, 0)
	steps := []struct {
		tenant, on string
		start      time.Time
		want       bool
	}{
		{"acme", "k1", w, true},
		{"acme", "k1", w, true},
		{"acme", "k1", w, false},
		{"acme", "k1", w, false},
		{"acme", "k2", w, true},
		{"globex", "k1", w, true},
		{"acme", "k1", w.Add(2 * time.Second), true},
	}
	for _, s := range steps {
		got, err := table.TakeWait(t.Context(), s.tenant, s.on, s.start, 2*time.Second, 2)
		if err != nil || got != s.want {
			t.Fatalf("a wait of %s on %s at %v: %v, %v; want %v", s.tenant, s.on, s.start.Sub(w), got, err, s.want)
		}
	}
	missing, err := limit.NewTable(testkit.Clients(t).DynamoDB, "no-such-table")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := missing.TakeWait(t.Context(), "acme", "k1", w, 2*time.Second, 2); got || err == nil {
		t.Fatalf("a wait on a table that fails: %v, %v; want refused, with the error", got, err)
	}
}

// throttledUpdates stands in front of the emulator: it answers every
// UpdateItem as DynamoDB throttling it, and counts the attempts.
type throttledUpdates struct{ attempts atomic.Int64 }

func (f *throttledUpdates) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") {
		f.attempts.Add(1)
		return idemtest.DynamoDBFault(req, "ThrottlingException"), nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestAThrottledCallIsOneAttemptAndNoTimeout (review 18): the SDK's
// default retryer sleeps up to a second before retrying a throttled
// call. A call on a request's path would then reach its 50 ms deadline,
// and mark the request hung. docs/operations.md: "A call refused at once,
// as a throttled write is, stops no later call." So each is one attempt.
func TestAThrottledCallIsOneAttemptAndNoTimeout(t *testing.T) {
	t.Parallel()
	f := &throttledUpdates{}
	db := testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: f} }).DynamoDB
	table, err := limit.NewTable(db, testkit.TempTable(t, limit.TableInput(testkit.UniqueName("limits"))))
	if err != nil {
		t.Fatal(err)
	}
	const fast = 25 * time.Millisecond // half a call's deadline: no backoff slept
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = table.Add(ctx, "acme", 1_796_000_000, limit.Usage{Requests: 1})
	if took := time.Since(began); err == nil || errors.Is(err, context.DeadlineExceeded) || took >= fast || f.attempts.Load() != 1 {
		t.Errorf("a throttled share: %v after %v and %d attempts; want the throttling error at once, one attempt", err, took.Round(time.Millisecond), f.attempts.Load())
	}
	l, err := limit.New(t.Context(), table)
	if err != nil {
		t.Fatal(err)
	}
	tk := mustAdmit(t.Context(), t, l, "acme") // quiet: no share
	attempts, began := f.attempts.Load(), time.Now()
	if l.Wait(t.Context(), tk, "k1", inflightWait, false) {
		t.Fatal("a wait on a throttled table: granted")
	}
	if took := time.Since(began); took >= fast || f.attempts.Load() != attempts+1 {
		t.Errorf("a throttled wait's write: refused after %v and %d attempts; want at once, one attempt", took.Round(time.Millisecond), f.attempts.Load()-attempts)
	}
	attempts = f.attempts.Load()
	l.Wait(t.Context(), tk, "k2", inflightWait, false)
	if f.attempts.Load() == attempts {
		t.Error("a request whose wait's write was throttled asked no table for its next wait: its throttled call was taken for a timeout")
	}
}
