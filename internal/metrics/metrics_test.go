package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/chargeonce/chargeonce/internal/metrics"
)

// datapoint is one value CloudWatch extracts from an EMF line: a metric
// under one dimension set, with its values.
type datapoint struct {
	Name   string
	Unit   string
	Dims   string // "Function=charge,Outcome=created"
	Values []float64
}

// parseEMF reads EMF lines as CloudWatch does, failing the test on a line
// CloudWatch would reject, and returns the datapoints and the lines.
func parseEMF(t *testing.T, out string) ([]datapoint, []map[string]any) {
	t.Helper()
	var points []datapoint
	var docs []map[string]any
	for l := range strings.Lines(out) {
		var doc map[string]any
		if err := json.Unmarshal([]byte(l), &doc); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		docs = append(docs, doc)
		var meta struct {
			Timestamp         *int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		}
		raw, _ := json.Marshal(doc["_aws"])
		if err := json.Unmarshal(raw, &meta); err != nil || meta.Timestamp == nil || len(meta.CloudWatchMetrics) == 0 {
			t.Fatalf("line %q: no valid _aws metadata (%v)", l, err)
		}
		for _, d := range meta.CloudWatchMetrics {
			if d.Namespace != metrics.Namespace {
				t.Fatalf("namespace %q", d.Namespace)
			}
			for _, set := range d.Dimensions {
				var dims []string
				for _, name := range set {
					v, ok := doc[name].(string)
					if !ok {
						t.Fatalf("line %q: dimension %s has no string value", l, name)
					}
					dims = append(dims, name+"="+v)
				}
				for _, m := range d.Metrics {
					points = append(points, datapoint{Name: m.Name, Unit: m.Unit, Dims: strings.Join(dims, ","), Values: values(t, doc[m.Name])})
				}
			}
		}
	}
	return points, docs
}

func values(t *testing.T, v any) []float64 {
	t.Helper()
	switch v := v.(type) {
	case float64:
		return []float64{v}
	case []any:
		if len(v) > metrics.MaxValues {
			t.Fatalf("%d values in one line, EMF takes %d", len(v), metrics.MaxValues)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			f, ok := x.(float64)
			if !ok {
				t.Fatalf("value %v is not a number", x)
			}
			out[i] = f
		}
		return out
	}
	t.Fatalf("metric value %v is neither a number nor a list of numbers", v)
	return nil
}

// total adds up the values of name under dims over all datapoints.
func total(points []datapoint, name, dims string) (sum float64, n int) {
	for _, p := range points {
		if p.Name == name && p.Dims == dims {
			for _, v := range p.Values {
				sum += v
				n++
			}
		}
	}
	return sum, n
}

// writes records each Write call.
type writes struct {
	mu    sync.Mutex
	calls []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func (w *writes) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.calls, "")
}

var at = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func emitter(w *writes, function string) *metrics.Emitter {
	return metrics.New(w, function, func(o *metrics.Options) { o.Clock = func() time.Time { return at } })
}

func TestChargeInvocationIsOneLine(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionCharge).Record()
	rec.Count(metrics.Requests, metrics.OperationRefund, metrics.OutcomeCreated)
	rec.Time(metrics.BeginLatency, 12500*time.Microsecond)
	rec.Time(metrics.ProviderLatency, 200*time.Millisecond)
	rec.Time(metrics.ProviderLatency, 300*time.Millisecond)
	rec.Time(metrics.CommitLatency, 8*time.Millisecond)
	rec.Size(metrics.StoredResponseBytes, 321)
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(w.calls) != 1 || strings.Count(w.calls[0], "\n") != 1 {
		t.Fatalf("%d writes %q, want one line in one write", len(w.calls), w.calls)
	}
	points, docs := parseEMF(t, w.all())
	want := []datapoint{
		{"Requests", "Count", "Function=charge", []float64{1}},
		{"Requests", "Count", "Function=charge,Operation=create-refund", []float64{1}},
		{"Requests", "Count", "Function=charge,Operation=create-refund,Outcome=created", []float64{1}},
		{"BeginLatency", "Milliseconds", "Function=charge", []float64{12.5}},
		{"ProviderLatency", "Milliseconds", "Function=charge", []float64{200, 300}},
		{"CommitLatency", "Milliseconds", "Function=charge", []float64{8}},
		{"StoredResponseBytes", "Bytes", "Function=charge", []float64{321}},
	}
	if !reflect.DeepEqual(points, want) {
		t.Fatalf("datapoints\n got %+v\nwant %+v", points, want)
	}
	meta := docs[0]["_aws"].(map[string]any)
	if meta["Timestamp"] != float64(at.UnixMilli()) || docs[0]["RequestId"] != "req-1" {
		t.Fatalf("line %v: want Timestamp %d and RequestId req-1", docs[0], at.UnixMilli())
	}
}

func TestBatchWritesOneLinePerOutcomeInOneWrite(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionReconcile).Record()
	for _, c := range []struct {
		op metrics.Operation
		o  metrics.Outcome
	}{
		{metrics.OperationCharge, metrics.OutcomeResolvedCharged}, {metrics.OperationEvent, metrics.OutcomeNothingToDo},
		{metrics.OperationCharge, metrics.OutcomeResolvedCharged}, {metrics.OperationEvent, metrics.OutcomeError},
		{metrics.OperationRefund, metrics.OutcomeDeferred}, {metrics.OperationRefund, metrics.OutcomeResolvedRefunded},
	} {
		rec.Count(metrics.Requests, c.op, c.o)
	}
	rec.Time(metrics.ProviderLatency, time.Second)
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.calls) != 1 {
		t.Fatalf("%d writes, want 1", len(w.calls))
	}
	points, docs := parseEMF(t, w.all())
	if len(docs) != 5 {
		t.Fatalf("%d lines, want one per operation and outcome (5)", len(docs))
	}
	for dims, want := range map[string]float64{
		"Function=reconcile":                                                   6,
		"Function=reconcile,Operation=create-charge":                           2,
		"Function=reconcile,Operation=create-refund":                           2,
		"Function=reconcile,Operation=provider-event":                          2,
		"Function=reconcile,Operation=create-charge,Outcome=resolved-charged":  2,
		"Function=reconcile,Operation=provider-event,Outcome=nothing-to-do":    1,
		"Function=reconcile,Operation=provider-event,Outcome=error":            1,
		"Function=reconcile,Operation=create-refund,Outcome=deferred":          1,
		"Function=reconcile,Operation=create-refund,Outcome=resolved-refunded": 1,
	} {
		if got, _ := total(points, "Requests", dims); got != want {
			t.Errorf("Requests{%s} = %v, want %v", dims, got, want)
		}
	}
	if got, n := total(points, "ProviderLatency", "Function=reconcile"); got != 1000 || n != 1 {
		t.Errorf("ProviderLatency %v over %d samples, want one of 1000 ms", got, n)
	}
}

func TestSweeperValues(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionSweeper).Record()
	rec.Add(metrics.StuckLeases, 3)
	rec.Add(metrics.Queued, 0)
	rec.Add(metrics.MaxReconcileAttempts, 2)
	rec.Time(metrics.OldestLeaseAgeSeconds, 90*time.Second)
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	points, _ := parseEMF(t, w.all())
	want := []datapoint{
		{"StuckLeases", "Count", "Function=sweeper", []float64{3}},
		{"MaxReconcileAttempts", "Count", "Function=sweeper", []float64{2}},
		{"Queued", "Count", "Function=sweeper", []float64{0}},
		{"OldestLeaseAgeSeconds", "Seconds", "Function=sweeper", []float64{90}},
	}
	if !reflect.DeepEqual(points, want) {
		t.Fatalf("datapoints\n got %+v\nwant %+v", points, want)
	}
}

func TestManySamplesSpanLines(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionCharge).Record()
	const n = metrics.MaxValues*2 + 5
	for i := range n {
		rec.Time(metrics.CommitLatency, time.Duration(i)*time.Millisecond)
	}
	rec.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeReplayed)
	if err := rec.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	points, docs := parseEMF(t, w.all())
	if len(docs) != 3 || len(w.calls) != 1 {
		t.Fatalf("%d lines in %d writes, want 3 in 1", len(docs), len(w.calls))
	}
	if sum, got := total(points, "CommitLatency", "Function=charge"); got != n || sum != float64(n*(n-1)/2) {
		t.Fatalf("%d samples summing to %v, want all %d", got, sum, n)
	}
	if got, _ := total(points, "Requests", "Function=charge"); got != 1 {
		t.Fatalf("Requests %v, want 1", got)
	}
}

func TestUndefinedValuesAreReportedNotWritten(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionCharge).Record()
	rec.Count(metrics.Requests, metrics.OperationCharge, "tenant-acme")                  // not an outcome
	rec.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeResolvedCharged) // the reconciler's
	rec.Count(metrics.Requests, "acme#create-charge#k1", metrics.OutcomeCreated)         // not an operation
	rec.Count(metrics.Requests, metrics.OperationEvent, metrics.OutcomeCreated)          // the reconciler's
	rec.Count(metrics.BeginLatency, metrics.OperationCharge, metrics.OutcomeCreated)     // no Outcome dimension
	rec.Add(metrics.Requests, 1)                                                         // counted by outcome only
	rec.Add(metrics.StuckLeases, 1)                                                      // the sweeper's
	rec.Time(metrics.StoredResponseBytes, time.Second)                                   // a size
	rec.Size(metrics.BeginLatency, 10)                                                   // a time
	rec.Count(metrics.Requests, metrics.OperationRefund, metrics.OutcomeMismatch)
	err := rec.Flush(context.Background())
	if !errors.Is(err, metrics.ErrUndefined) {
		t.Fatalf("Flush: %v, want ErrUndefined", err)
	}
	if n := strings.Count(err.Error(), "not defined"); n != 9 {
		t.Fatalf("Flush reports %d problems, want 9: %v", n, err)
	}
	points, _ := parseEMF(t, w.all())
	want := []datapoint{
		{"Requests", "Count", "Function=charge", []float64{1}},
		{"Requests", "Count", "Function=charge,Operation=create-refund", []float64{1}},
		{"Requests", "Count", "Function=charge,Operation=create-refund,Outcome=mismatch", []float64{1}},
	}
	if !reflect.DeepEqual(points, want) {
		t.Fatalf("datapoints %+v, want only the mismatch", points)
	}
}

func TestFlushStartsOver(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionCharge).Record()
	if err := rec.Flush(context.Background()); err != nil || len(w.calls) != 0 {
		t.Fatalf("empty Flush: %v, %d writes; want nothing written", err, len(w.calls))
	}
	rec.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeConflict)
	_ = rec.Flush(context.Background())
	_ = rec.Flush(context.Background())
	if len(w.calls) != 1 {
		t.Fatalf("%d writes, want 1: a Flush writes only what came after the last", len(w.calls))
	}
}

type failingWriter struct{}

var errDisk = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestFlushReportsWriteError(t *testing.T) {
	t.Parallel()
	rec := metrics.New(failingWriter{}, metrics.FunctionCharge).Record()
	rec.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeCreated)
	if err := rec.Flush(context.Background()); !errors.Is(err, errDisk) {
		t.Fatalf("Flush: %v, want the write error", err)
	}
}

func TestContextCarriesTheRecorder(t *testing.T) {
	t.Parallel()
	w := &writes{}
	rec := emitter(w, metrics.FunctionCharge).Record()
	ctx := metrics.NewContext(context.Background(), rec)
	metrics.FromContext(ctx).Time(metrics.BeginLatency, time.Millisecond)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, n := total(must(parseEMF(t, w.all())), "BeginLatency", "Function=charge"); n != 1 {
		t.Fatalf("the sample recorded through the context is missing: %s", w.all())
	}
	// Without a recorder, nothing is recorded and nothing fails.
	none := metrics.FromContext(context.Background())
	none.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeCreated)
	none.Add(metrics.Queued, 1)
	none.Time(metrics.BeginLatency, time.Second)
	none.Size(metrics.StoredResponseBytes, 1)
	if err := none.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func must(points []datapoint, _ []map[string]any) []datapoint { return points }

// Concurrent invocations share the writer; every line stays whole.
func TestConcurrentInvocations(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer // not safe for concurrent use: the Emitter serializes writes
	e := metrics.New(&buf, metrics.FunctionCharge)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			rec := e.Record()
			rec.Count(metrics.Requests, metrics.Operations(metrics.FunctionCharge)[i%3], metrics.Outcomes(metrics.FunctionCharge)[i%5])
			rec.Time(metrics.BeginLatency, time.Duration(i)*time.Millisecond)
			_ = rec.Flush(context.Background())
		})
	}
	wg.Wait()
	points, docs := parseEMF(t, buf.String())
	if got, _ := total(points, "Requests", "Function=charge"); len(docs) != 20 || got != 20 {
		t.Fatalf("%d lines, %v requests; want 20 each", len(docs), got)
	}
}

func TestDefinitions(t *testing.T) {
	t.Parallel()
	seen := map[metrics.Name]bool{}
	for _, d := range metrics.Definitions() {
		if seen[d.Name] {
			t.Errorf("%s defined twice", d.Name)
		}
		seen[d.Name] = true
		if !slices.Contains([]metrics.Unit{metrics.UnitCount, metrics.UnitMilliseconds, metrics.UnitSeconds, metrics.UnitBytes}, d.Unit) || len(d.Functions) == 0 {
			t.Errorf("%s: unit %q, functions %v", d.Name, d.Unit, d.Functions)
		}
		for _, f := range d.Functions {
			if d.ByOutcome && (len(metrics.Outcomes(f)) == 0 || len(metrics.Operations(f)) == 0) {
				t.Errorf("%s is counted by operation and outcome, but %s has no outcomes %v or operations %v", d.Name, f, metrics.Outcomes(f), metrics.Operations(f))
			}
		}
	}
	for _, f := range []string{metrics.FunctionCharge, metrics.FunctionReconcile, metrics.FunctionIntake} {
		if o := metrics.Outcomes(f); len(slices.Compact(slices.Sorted(slices.Values(o)))) != len(o) {
			t.Errorf("%s outcomes repeat: %v", f, o)
		}
		if o := metrics.Operations(f); len(slices.Compact(slices.Sorted(slices.Values(o)))) != len(o) {
			t.Errorf("%s operations repeat: %v", f, o)
		}
	}
	want := []metrics.Name{
		metrics.Requests, metrics.BeginLatency, metrics.ProviderLatency, metrics.CommitLatency, metrics.StoredResponseBytes,
		metrics.StuckLeases, metrics.OldestLeaseAgeSeconds, metrics.MaxReconcileAttempts, metrics.Queued,
	}
	if got := slices.Sorted(maps.Keys(seen)); !reflect.DeepEqual(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("defined %v, want every Name constant %v", got, want)
	}
}

func ExampleRecorder() {
	m := metrics.New(nil, metrics.FunctionCharge, func(o *metrics.Options) {
		o.Clock = func() time.Time { return time.UnixMilli(1767268800000) }
	})
	rec := m.Record()
	rec.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeCreated)
	rec.Time(metrics.BeginLatency, 4*time.Millisecond)
	if err := rec.Flush(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"BeginLatency":4,"Function":"charge","Operation":"create-charge","Outcome":"created","Requests":1,"_aws":{"Timestamp":1767268800000,"CloudWatchMetrics":[{"Namespace":"chargeonce","Dimensions":[["Function"],["Function","Operation"],["Function","Operation","Outcome"]],"Metrics":[{"Name":"Requests","Unit":"Count"}]},{"Namespace":"chargeonce","Dimensions":[["Function"]],"Metrics":[{"Name":"BeginLatency","Unit":"Milliseconds"}]}]}}
}
