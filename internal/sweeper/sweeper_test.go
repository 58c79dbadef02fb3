package sweeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// fakeSender records what the sweeper queues. It fails the entries of the
// keys in fail, passes over those in queued (a message in flight), fails
// whole calls with callErr, and calls before, if set, at the start of
// each call.
type fakeSender struct {
	mu      sync.Mutex
	calls   [][]idem.Key
	fail    map[idem.Key]bool
	queued  map[idem.Key]bool
	callErr error
	before  func()
}

func (f *fakeSender) SendBatch(_ context.Context, keys []idem.Key) (queue.Batch, error) {
	if f.before != nil {
		f.before()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, slices.Clone(keys))
	if f.callErr != nil {
		return queue.Batch{Failed: slices.Clone(keys)}, f.callErr
	}
	var b queue.Batch
	for _, k := range keys {
		switch {
		case f.fail[k]:
			b.Failed = append(b.Failed, k)
		case f.queued[k]:
			b.AlreadyQueued++
		}
	}
	return b, nil
}

func (f *fakeSender) sent() []idem.Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []idem.Key
	for _, c := range f.calls {
		all = append(all, c...)
	}
	return all
}

type env struct {
	clock   *testkit.Clock
	table   string
	store   *dynamostore.Store
	sender  *fakeSender
	metrics *testkit.LogBuffer
	logs    *testkit.LogBuffer
}

func newEnv(t *testing.T, optFns ...func(*dynamostore.Options)) *env {
	t.Helper()
	e := &env{
		clock:   testkit.NewClock(time.Now().Truncate(time.Second)),
		sender:  &fakeSender{},
		metrics: &testkit.LogBuffer{},
		logs:    &testkit.LogBuffer{},
	}
	e.table = testkit.TempTable(t, dynamostore.TableInput("idem"))
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, e.table, append([]func(*dynamostore.Options){func(o *dynamostore.Options) {
		o.Clock = e.clock.Now
		o.DefaultLease = 30 * time.Second
	}}, optFns...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	return e
}

func (e *env) sweeper(t *testing.T, optFns ...func(*sweeper.Options)) *sweeper.Sweeper {
	t.Helper()
	opts := append([]func(*sweeper.Options){func(o *sweeper.Options) {
		o.Clock = e.clock.Now
		o.Metrics = e.metrics
		o.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	}}, optFns...)
	s, err := sweeper.New(e.store, e.sender, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// begin claims a new key and advances the clock a second, so leases run
// out one after the other, oldest first in creation order.
func (e *env) begin(t *testing.T) (idem.Key, *idem.Lease) {
	t.Helper()
	k, err := idem.NewKey("acme", "create-charge", testkit.UniqueName("k"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.store.Begin(context.Background(), k, idem.FingerprintOf([]byte(`{}`)), []byte(`{}`))
	if err != nil || b.Lease == nil {
		t.Fatalf("Begin: %+v, %v", b, err)
	}
	e.clock.Advance(time.Second)
	return k, b.Lease
}

// stuck creates n records whose attempts died, and lets their leases run
// out.
func (e *env) stuck(t *testing.T, n int) []idem.Key {
	t.Helper()
	keys := make([]idem.Key, n)
	for i := range keys {
		keys[i], _ = e.begin(t)
	}
	e.clock.Advance(2 * time.Minute)
	return keys
}

func sameKeys(got, want []idem.Key) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[idem.Key]int{}
	for _, k := range got {
		seen[k]++
	}
	for _, k := range want {
		if seen[k] != 1 {
			return false
		}
	}
	return true
}

// emfLine is the one metrics line a run writes.
type emfLine struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name, Unit string
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
	Function              string   `json:"Function"`
	StuckLeases           *float64 `json:"StuckLeases"`
	OldestLeaseAgeSeconds *float64 `json:"OldestLeaseAgeSeconds"`
	MaxReconcileAttempts  *float64 `json:"MaxReconcileAttempts"`
	Queued                *float64 `json:"Queued"`
}

func metricLines(t *testing.T, out string) []emfLine {
	t.Helper()
	var lines []emfLine
	for l := range strings.Lines(out) {
		var m emfLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestRunQueuesOnlyStuckLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	first := e.clock.Now()
	var want []idem.Key
	for range 3 {
		k, _ := e.begin(t)
		want = append(want, k)
	}
	_, done := e.begin(t)
	if err := e.store.Fail(ctx, done, idem.Response{Status: 402, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	_, released := e.begin(t)
	if err := e.store.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	e.begin(t) // live: its lease runs for 30 more seconds
	now := e.clock.Now()

	sum, err := e.sweeper(t).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.sender.sent(); !sameKeys(got, want) {
		t.Fatalf("queued %v, want exactly the stuck keys %v", got, want)
	}
	wantAge := now.Sub(first.Add(30 * time.Second))
	if sum.Found != 3 || sum.Queued != 3 || sum.Failed != 0 || sum.Limited || sum.OutOfTime || sum.OldestAge != wantAge {
		t.Fatalf("summary %+v, want 3 found and queued, oldest %s", sum, wantAge)
	}

	lines := metricLines(t, e.metrics.String())
	if len(lines) != 1 {
		t.Fatalf("%d metrics lines, want 1", len(lines))
	}
	m := lines[0]
	if *m.StuckLeases != 3 || *m.Queued != 3 || *m.OldestLeaseAgeSeconds != wantAge.Seconds() || m.AWS.Timestamp != now.UnixMilli() {
		t.Fatalf("metrics StuckLeases=%v Queued=%v OldestLeaseAgeSeconds=%v Timestamp=%d, want 3, 3, %v, %d",
			*m.StuckLeases, *m.Queued, *m.OldestLeaseAgeSeconds, m.AWS.Timestamp, wantAge.Seconds(), now.UnixMilli())
	}
	if !strings.Contains(e.logs.String(), `"stuck_leases":3`) {
		t.Fatalf("summary log missing: %s", e.logs.String())
	}
}

func TestMetricsLineIsEMFWithTheFunctionDimension(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.sweeper(t).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The SAM template's StuckLeasesAlarm and ReconcileAttemptsAlarm match
	// chargeonce/StuckLeases and chargeonce/MaxReconcileAttempts under the
	// dimension Function=sweeper, and nothing else: one dimension set.
	want := `{"Function":"sweeper","MaxReconcileAttempts":0,"OldestLeaseAgeSeconds":0,"Queued":0,"StuckLeases":0,"_aws":{"Timestamp":` +
		strconv.FormatInt(e.clock.Now().UnixMilli(), 10) +
		`,"CloudWatchMetrics":[{"Namespace":"chargeonce","Dimensions":[["Function"]],"Metrics":[` +
		`{"Name":"StuckLeases","Unit":"Count"},{"Name":"MaxReconcileAttempts","Unit":"Count"},{"Name":"Queued","Unit":"Count"},` +
		`{"Name":"OldestLeaseAgeSeconds","Unit":"Seconds"}]}]}}` + "\n"
	if got := e.metrics.String(); got != want {
		t.Fatalf("metrics line\n got %s\nwant %s", got, want)
	}
}

func TestRunStopsAtMaxKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := e.stuck(t, 5)
	sum, err := e.sweeper(t, func(o *sweeper.Options) { o.MaxKeys = 3 }).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sent := e.sender.sent()
	if sum.Found != 3 || sum.Queued != 3 || !sum.Limited || len(sent) != 3 {
		t.Fatalf("summary %+v, %d sent; want 3 found and sent, limited", sum, len(sent))
	}
	for _, k := range sent {
		if !slices.Contains(all, k) {
			t.Fatalf("queued unknown key %v", k)
		}
	}
}

// A run limited to one key, repeated once a minute for as many minutes as
// there are shards, reaches the oldest stuck lease of every shard.
func TestRotatingStartShardStarvesNoShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.stuck(t, 8)
	shards := e.store.Shards()
	var want []idem.Key
	for shard := range shards {
		for sl, err := range e.store.StuckLeases(ctx, shard, e.clock.Now()) {
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, sl.Key)
			break
		}
	}
	s := e.sweeper(t, func(o *sweeper.Options) { o.MaxKeys = 1 })
	for m := range shards {
		sum, err := s.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantStart := int(e.clock.Now().Unix() / 60 % int64(shards))
		if sum.StartShard != wantStart || sum.Queued != 1 {
			t.Fatalf("minute %d: summary %+v, want start shard %d and one key queued", m, sum, wantStart)
		}
		e.clock.Advance(time.Minute)
	}
	got := slices.Compact(slices.SortedFunc(slices.Values(e.sender.sent()), func(a, b idem.Key) int {
		return strings.Compare(a.String(), b.String())
	}))
	if !sameKeys(got, want) {
		t.Fatalf("over %d minutes queued %v, want the oldest of each shard %v", shards, got, want)
	}
}

func TestRunStopsBeforeDeadline(t *testing.T) {
	t.Parallel()

	t.Run("no time left at start", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.stuck(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		sum, err := e.sweeper(t).Run(ctx) // default margin 5s
		if err != nil {
			t.Fatal(err)
		}
		if !sum.OutOfTime || sum.Found != 0 || len(e.sender.sent()) != 0 {
			t.Fatalf("summary %+v, sent %d; want out of time before taking a key", sum, len(e.sender.sent()))
		}
	})

	t.Run("margin reached mid-run", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.stuck(t, 15)
		const margin = 2 * time.Second
		deadline := time.Now().Add(2 * margin)
		// The first batch takes until the stop time has passed.
		var once sync.Once
		e.sender.before = func() { once.Do(func() { time.Sleep(time.Until(deadline.Add(-margin + 50*time.Millisecond))) }) }
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		sum, err := e.sweeper(t, func(o *sweeper.Options) { o.SafetyMargin = margin }).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sum.OutOfTime || sum.Found != 10 || sum.Queued != 10 {
			t.Fatalf("summary %+v, want the first batch of 10 queued, then out of time", sum)
		}
		if !time.Now().Before(deadline) {
			t.Fatal("the run did not end before its deadline")
		}
	})
}

func TestSendFailuresAreCounted(t *testing.T) {
	t.Parallel()

	t.Run("failed entries", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		keys := e.stuck(t, 12)
		e.sender.fail = map[idem.Key]bool{keys[0]: true, keys[5]: true, keys[11]: true}
		sum, err := e.sweeper(t).Run(context.Background())
		if err != nil {
			t.Fatalf("failed entries are not a run error, got %v", err)
		}
		if sum.Found != 12 || sum.Queued != 9 || sum.Failed != 3 {
			t.Fatalf("summary %+v, want 12 found, 9 queued, 3 failed", sum)
		}
		if logs := e.logs.String(); !strings.Contains(logs, "keys not queued") || !strings.Contains(logs, `"failed":3`) {
			t.Fatalf("failures not logged: %s", logs)
		}
		if strings.Contains(e.logs.String(), keys[0].ClientKey()) {
			t.Fatal("a raw key was logged")
		}
	})

	t.Run("failed call", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.stuck(t, 3)
		errDown := errors.New("sqs down")
		e.sender.callErr = errDown
		sum, err := e.sweeper(t).Run(context.Background())
		if !errors.Is(err, errDown) {
			t.Fatalf("Run error %v, want the send error", err)
		}
		if sum.Found != 3 || sum.Failed != 3 || sum.Queued != 0 {
			t.Fatalf("summary %+v, want 3 found and failed", sum)
		}
		if lines := metricLines(t, e.metrics.String()); len(lines) != 1 || *lines[0].StuckLeases != 3 || *lines[0].Queued != 0 {
			t.Fatalf("metrics not written on a failed run: %q", e.metrics.String())
		}
	})
}

// TestKeysAlreadyQueuedAreNotCountedAsQueued: a key whose message is in
// flight is found, not queued, and the run says so.
func TestKeysAlreadyQueuedAreNotCountedAsQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keys := e.stuck(t, 4)
	e.sender.queued = map[idem.Key]bool{keys[1]: true, keys[2]: true}
	sum, err := e.sweeper(t).Run(context.Background())
	if err != nil || sum.Found != 4 || sum.Queued != 2 || sum.AlreadyQueued != 2 || sum.Failed != 0 {
		t.Fatalf("summary %+v, %v; want 4 found, 2 queued, 2 already queued", sum, err)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"queued":2,"already_queued":2`) {
		t.Fatalf("the run's log does not say so: %s", logs)
	}
	if lines := metricLines(t, e.metrics.String()); len(lines) != 1 || *lines[0].Queued != 2 {
		t.Fatalf("Queued metric: %q, want 2", e.metrics.String())
	}
}

func TestNewRefusesMissingDependencies(t *testing.T) {
	t.Parallel()
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, "unused")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		index  sweeper.Index
		sender sweeper.Sender
	}{
		"nil index":  {nil, &fakeSender{}},
		"nil sender": {store, nil},
	} {
		if _, err := sweeper.New(tc.index, tc.sender); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestKeysThatKeepFailingShowInTheMetrics: every reconcile attempt on a
// key is counted on its record, and the sweep reports the most any stuck
// key has had, for the alarm on keys that keep failing.
func TestKeysThatKeepFailingShowInTheMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	k, _ := e.begin(t)
	e.begin(t) // another stuck key, never attempted
	for range 3 {
		e.clock.Advance(time.Hour)
		if _, err := e.store.TakeOver(ctx, k); err != nil { // an attempt that dies
			t.Fatal(err)
		}
	}
	e.clock.Advance(time.Hour)
	sum, err := e.sweeper(t).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Found != 2 || sum.MaxAttempts != 3 {
		t.Fatalf("summary %+v, want 2 stuck keys, the most attempts 3", sum)
	}
	if m := metricLines(t, e.metrics.String()); len(m) != 1 || *m[0].MaxReconcileAttempts != 3 {
		t.Fatalf("metrics %q, want MaxReconcileAttempts 3", e.metrics.String())
	}
}

// TestRunPassesOverAnUnreadableItem: an item of the stuck-lease index that
// does not decode is counted and logged by its key's hash, and the stuck
// leases listed after it in its shard are still queued.
func TestRunPassesOverAnUnreadableItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(o *dynamostore.Options) { o.Shards = 1 }) // every key after the unreadable item
	const secret = "not a key: secret-order-4242"
	if _, err := testkit.Clients(t).DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
		dynamostore.AttrPK:             &types.AttributeValueMemberS{Value: secret},
		dynamostore.AttrLeaseShard:     &types.AttributeValueMemberN{Value: "0"},
		dynamostore.AttrLeaseExpiresAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(e.clock.Now().UnixMilli(), 10)},
	}}); err != nil {
		t.Fatal(err)
	}
	var want []idem.Key
	for range 3 {
		k, _ := e.begin(t)
		want = append(want, k)
	}
	e.clock.Advance(2 * time.Minute)
	sum, err := e.sweeper(t).Run(ctx)
	if err != nil || sum.Unreadable != 1 || !sameKeys(e.sender.sent(), want) {
		t.Fatalf("summary %+v, %v, queued %v; want 1 unreadable and the 3 stuck keys queued", sum, err, e.sender.sent())
	}
	if logs := e.logs.String(); strings.Contains(logs, "secret-order") || !strings.Contains(logs, `"unreadable":1`) {
		t.Fatalf("logs name the raw key, or no count: %s", logs)
	}
}
