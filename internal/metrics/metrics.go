package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// ErrUndefined is wrapped by Flush's error for a value it did not write:
// a metric the function does not emit, an Outcome it does not have, or a
// sample of the wrong kind for the metric's unit.
var ErrUndefined = errors.New("metrics: not defined")

// MaxValues is the most samples of one metric an EMF line carries;
// a Flush with more writes them over several lines.
const MaxValues = 100

// Options configure an Emitter.
type Options struct {
	// Clock stamps each line. Default time.Now.
	Clock func() time.Time
}

// Emitter writes one function's metrics to a writer. It is safe for
// concurrent use; build it once per process.
type Emitter struct {
	w        io.Writer
	function string
	mu       sync.Mutex // one Write at a time
	clock    func() time.Time
}

// New returns an Emitter writing function's metrics to w (os.Stdout if
// nil). function is one of the Function constants.
func New(w io.Writer, function string, optFns ...func(*Options)) *Emitter {
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if w == nil {
		w = os.Stdout
	}
	return &Emitter{w: w, function: function, clock: o.Clock}
}

// Record returns a Recorder for one invocation.
func (e *Emitter) Record() *Recorder { return &Recorder{e: e} }

// Recorder collects one invocation's metrics until Flush. It is safe for
// concurrent use. Every method of a nil *Recorder does nothing.
type Recorder struct {
	e        *Emitter
	mu       sync.Mutex
	counts   map[Outcome]map[Name]float64
	sums     map[Name]float64
	samples  map[Name][]float64
	problems []error
}

// Count adds one to name under outcome, a metric with an Outcome
// dimension (Requests).
func (r *Recorder) Count(name Name, outcome Outcome) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d, _, ok := lookup(r.e.function, name)
	if !ok || !d.ByOutcome || !slices.Contains(outcomes[r.e.function], outcome) {
		r.undefined("count %s with outcome %q", name, outcome)
		return
	}
	if r.counts == nil {
		r.counts = map[Outcome]map[Name]float64{}
	}
	if r.counts[outcome] == nil {
		r.counts[outcome] = map[Name]float64{}
	}
	r.counts[outcome][name]++
}

// Add adds n to name, a count without an Outcome dimension. Adding zero
// writes the metric with the value 0.
func (r *Recorder) Add(name Name, n int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.is(name, UnitCount) {
		r.undefined("add to %s", name)
		return
	}
	if r.sums == nil {
		r.sums = map[Name]float64{}
	}
	r.sums[name] += float64(n)
}

// Time records a duration sample of name in the metric's unit
// (milliseconds or seconds).
func (r *Recorder) Time(name Name, d time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.is(name, UnitMilliseconds):
		r.sample(name, float64(d)/float64(time.Millisecond))
	case r.is(name, UnitSeconds):
		r.sample(name, d.Seconds())
	default:
		r.undefined("time %s", name)
	}
}

// Size records a size sample of name, in bytes.
func (r *Recorder) Size(name Name, bytes int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.is(name, UnitBytes) {
		r.undefined("size %s", name)
		return
	}
	r.sample(name, float64(bytes))
}

func (r *Recorder) is(name Name, unit Unit) bool {
	d, _, ok := lookup(r.e.function, name)
	return ok && !d.ByOutcome && d.Unit == unit
}

func (r *Recorder) sample(name Name, v float64) {
	if r.samples == nil {
		r.samples = map[Name][]float64{}
	}
	r.samples[name] = append(r.samples[name], v)
}

func (r *Recorder) undefined(format string, args ...any) {
	r.problems = append(r.problems, fmt.Errorf("%w for function %q: %s", ErrUndefined, r.e.function, fmt.Sprintf(format, args...)))
}

// Flush writes what was recorded since the last Flush, in one Write, and
// starts over. It writes nothing if nothing was recorded. The error
// reports values that were not written (ErrUndefined) and a failed Write.
func (r *Recorder) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	counts, sums, samples, problems := r.counts, r.sums, r.samples, r.problems
	r.counts, r.sums, r.samples, r.problems = nil, nil, nil, nil
	r.mu.Unlock()

	var requestID string
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		requestID = lc.AwsRequestID
	}
	lines := r.e.lines(r.e.clock(), requestID, counts, sums, samples)
	if len(lines) == 0 {
		return errors.Join(problems...)
	}
	r.e.mu.Lock()
	_, err := r.e.w.Write(lines)
	r.e.mu.Unlock()
	if err != nil {
		problems = append(problems, fmt.Errorf("metrics: write: %w", err))
	}
	return errors.Join(problems...)
}

type emfMetric struct {
	Name Name `json:"Name"`
	Unit Unit `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMetadata struct {
	Timestamp         int64          `json:"Timestamp"` // epoch milliseconds
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// line is one EMF document under construction: its members, the
// metadata aside.
type line struct {
	function   string
	members    []member
	byOutcome  []emfMetric
	byFunction []emfMetric
}

// member is one of a line's top-level members. Its key is a dimension or
// metric name, an identifier that needs no escaping.
type member struct {
	key   string
	value any
}

func (l *line) set(name Name, v any, byOutcome bool) {
	d, _, _ := lookup(l.function, name)
	m := emfMetric{Name: name, Unit: d.Unit}
	if byOutcome {
		l.byOutcome = append(l.byOutcome, m)
	} else {
		l.byFunction = append(l.byFunction, m)
	}
	l.members = append(l.members, member{string(name), v})
}

// write writes the line as one JSON object, its members in key order (as
// encoding/json orders a map's), and a newline.
func (l *line) write(buf *bytes.Buffer, enc *json.Encoder) {
	slices.SortFunc(l.members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	buf.WriteByte('{')
	for i, m := range l.members {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`"` + m.key + `":`)
		// Strings, finite numbers and the metadata only: Encode cannot fail.
		_ = enc.Encode(m.value)
		buf.Truncate(buf.Len() - 1) // Encode ends the value with a newline
	}
	buf.WriteString("}\n")
}

// lines renders the recorded values as EMF lines: one per Outcome, the
// values without an Outcome on the first, and further lines for samples
// beyond MaxValues.
func (e *Emitter) lines(at time.Time, requestID string, counts map[Outcome]map[Name]float64, sums map[Name]float64, samples map[Name][]float64) []byte {
	n := len(counts)
	if len(sums) > 0 {
		n = max(n, 1)
	}
	for _, s := range samples {
		n = max(n, (len(s)+MaxValues-1)/MaxValues)
	}
	docs := make([]line, n)
	for i := range docs {
		// Room for every member a line can have: the dimensions, the
		// request id, the values, the metadata.
		docs[i].function = e.function
		docs[i].members = make([]member, 0, 4+len(sums)+len(samples)+maxLen(counts))
		docs[i].byFunction = make([]emfMetric, 0, len(sums)+len(samples))
		docs[i].members = append(docs[i].members, member{DimFunction, e.function})
		if requestID != "" {
			docs[i].members = append(docs[i].members, member{"RequestId", requestID})
		}
	}
	for i, o := range slices.Sorted(maps.Keys(counts)) {
		docs[i].byOutcome = make([]emfMetric, 0, len(counts[o]))
		docs[i].members = append(docs[i].members, member{DimOutcome, string(o)})
		for _, name := range ordered(e.function, counts[o]) {
			docs[i].set(name, counts[o][name], true)
		}
	}
	for _, name := range ordered(e.function, sums) {
		docs[0].set(name, sums[name], false)
	}
	for _, name := range ordered(e.function, samples) {
		i := 0
		for chunk := range slices.Chunk(samples[name], MaxValues) {
			if len(chunk) == 1 {
				docs[i].set(name, chunk[0], false)
			} else {
				docs[i].set(name, chunk, false)
			}
			i++
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	for _, l := range docs {
		meta := emfMetadata{Timestamp: at.UnixMilli(), CloudWatchMetrics: make([]emfDirective, 0, 2)}
		if len(l.byOutcome) > 0 {
			meta.CloudWatchMetrics = append(meta.CloudWatchMetrics, emfDirective{
				Namespace: Namespace, Dimensions: byOutcomeDimensions, Metrics: l.byOutcome,
			})
		}
		if len(l.byFunction) > 0 {
			meta.CloudWatchMetrics = append(meta.CloudWatchMetrics, emfDirective{
				Namespace: Namespace, Dimensions: byFunctionDimensions, Metrics: l.byFunction,
			})
		}
		l.members = append(l.members, member{"_aws", meta})
		l.write(&out, enc)
	}
	return out.Bytes()
}

// The dimension sets of a line's directives, shared by every line (the
// encoder only reads them).
var (
	byOutcomeDimensions  = [][]string{{DimFunction}, {DimFunction, DimOutcome}}
	byFunctionDimensions = [][]string{{DimFunction}}
)

// maxLen is the length of the longest of m's maps.
func maxLen[K comparable, V any](m map[K]map[Name]V) int {
	n := 0
	for _, v := range m {
		n = max(n, len(v))
	}
	return n
}

// ordered returns the names of m in Definitions' order.
func ordered[V any](function string, m map[Name]V) []Name {
	names := make([]Name, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b Name) int {
		_, i, _ := lookup(function, a)
		_, j, _ := lookup(function, b)
		return i - j
	})
	return names
}
