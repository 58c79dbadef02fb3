package metrics

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// ErrUndefined is wrapped by Flush's error for a value it did not write.
// The metric may be one the function does not emit. The Operation or
// Outcome may be one it does not have. Or the sample is of the wrong kind
// for the metric's unit.
var ErrUndefined = errors.New("metrics: not defined")

// MaxValues is the most samples of one metric an EMF line carries. A Flush
// with more writes them over several lines.
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
func (e *Emitter) Record() *Recorder {
	r := &Recorder{e: e}
	r.reset()
	return r
}

// Recorder collects one invocation's metrics until Flush. It is safe for
// concurrent use. Every method of a nil *Recorder does nothing.
type Recorder struct {
	e        *Emitter
	mu       sync.Mutex
	counts   []count // one per outcome and metric
	sums     []value // one per metric
	samples  []value // in the order recorded
	problems []error
	// Room for an invocation's usual values, so that recording them
	// allocates nothing.
	countRoom  [2]count
	sumRoom    [4]value
	sampleRoom [8]value
}

// value is a value of the metric definitions[def].
type value struct {
	def int
	v   float64
}

// count is a value of a metric with Operation and Outcome dimensions.
type count struct {
	operation Operation
	outcome   Outcome
	value
}

// sameDims reports whether c and d are counted under the same Operation
// and Outcome.
func (c count) sameDims(d count) bool { return c.operation == d.operation && c.outcome == d.outcome }

func (r *Recorder) reset() {
	r.counts, r.sums, r.samples, r.problems = r.countRoom[:0], r.sumRoom[:0], r.sampleRoom[:0], nil
}

// Count adds one to name under operation and outcome, a metric with
// Operation and Outcome dimensions (Requests).
func (r *Recorder) Count(name Name, operation Operation, outcome Outcome) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d, def, ok := lookup(r.e.function, name)
	if !ok || !d.ByOutcome || !slices.Contains(outcomes[r.e.function], outcome) || !slices.Contains(operations[r.e.function], operation) {
		r.undefined("count %s with operation %q and outcome %q", name, operation, outcome)
		return
	}
	c := count{operation, outcome, value{def, 1}}
	for i, o := range r.counts {
		if o.sameDims(c) && o.def == def {
			r.counts[i].v++
			return
		}
	}
	r.counts = append(r.counts, c)
}

// Add adds n to name, a count without an Outcome dimension. Adding zero
// writes the metric with the value 0.
func (r *Recorder) Add(name Name, n int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	def, ok := r.is(name, UnitCount)
	if !ok {
		r.undefined("add to %s", name)
		return
	}
	for i, s := range r.sums {
		if s.def == def {
			r.sums[i].v += float64(n)
			return
		}
	}
	r.sums = append(r.sums, value{def, float64(n)})
}

// Time records a duration sample of name in the metric's unit
// (milliseconds or seconds).
func (r *Recorder) Time(name Name, d time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if def, ok := r.is(name, UnitMilliseconds); ok {
		r.samples = append(r.samples, value{def, float64(d) / float64(time.Millisecond)})
	} else if def, ok := r.is(name, UnitSeconds); ok {
		r.samples = append(r.samples, value{def, d.Seconds()})
	} else {
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
	def, ok := r.is(name, UnitBytes)
	if !ok {
		r.undefined("size %s", name)
		return
	}
	r.samples = append(r.samples, value{def, float64(bytes)})
}

// is returns the position of name's definition if the function emits it
// in unit, without an Outcome.
func (r *Recorder) is(name Name, unit Unit) (int, bool) {
	d, def, ok := lookup(r.e.function, name)
	return def, ok && !d.ByOutcome && d.Unit == unit
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
	var requestID string
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		requestID = lc.AwsRequestID
	}
	r.mu.Lock()
	lines := r.e.lines(r.e.clock(), requestID, r.counts, r.sums, r.samples)
	problems := r.problems
	r.reset()
	r.mu.Unlock()
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

// member is one of an EMF line's top-level members. It is a dimension
// (str), a metric's value (num) or values (an array of more than one), or
// the metadata. Its key is a dimension or metric name, an identifier that
// needs no escaping.
type member struct {
	key    string
	kind   memberKind
	str    string
	num    float64
	values []value
}

type memberKind int

const (
	memberStr memberKind = iota
	memberNum
	memberValues
	memberMeta
)

// lines renders the recorded values as EMF lines, one per Operation and
// Outcome. The values without an Outcome go on the first. Samples beyond
// MaxValues go on further lines. Every line's metrics are in Definitions'
// order. In its metadata, the sums come before the samples. Its members are
// in key order, as encoding/json orders a map's. It sorts the values it is
// given.
func (e *Emitter) lines(at time.Time, requestID string, counts []count, sums, samples []value) []byte {
	slices.SortFunc(counts, func(a, b count) int {
		return cmp.Or(strings.Compare(string(a.operation), string(b.operation)), strings.Compare(string(a.outcome), string(b.outcome)), a.def-b.def)
	})
	byDef := func(a, b value) int { return a.def - b.def }
	slices.SortFunc(sums, byDef)
	slices.SortStableFunc(samples, byDef) // a metric's samples in the order recorded
	n := 0
	for i, c := range counts {
		if i == 0 || !c.sameDims(counts[i-1]) {
			n++
		}
	}
	if len(sums) > 0 {
		n = max(n, 1)
	}
	for rest := samples; len(rest) > 0; {
		var run []value
		run, rest = nextRun(rest)
		n = max(n, (len(run)+MaxValues-1)/MaxValues)
	}
	// A charge invocation's line is about 600 bytes: room for it
	// spares the appends growing out again and again.
	out := make([]byte, 0, n*lineRoom)
	for i := range n {
		// Room for every member a line usually has: the dimensions, the
		// request id, the values, the metadata.
		var room [16]member
		members := append(room[:0], member{key: DimFunction, str: e.function})
		if requestID != "" {
			members = append(members, member{key: "RequestId", str: requestID})
		}
		var byOutcome []count // this line's counts, all of one Operation and Outcome
		if len(counts) > 0 {
			end := 1
			for end < len(counts) && counts[end].sameDims(counts[0]) {
				end++
			}
			byOutcome, counts = counts[:end], counts[end:]
			members = append(members, member{key: DimOperation, str: string(byOutcome[0].operation)},
				member{key: DimOutcome, str: string(byOutcome[0].outcome)})
			for _, c := range byOutcome {
				members = append(members, member{key: string(definitions[c.def].Name), kind: memberNum, num: c.v})
			}
		}
		var fnRoom [16]value
		byFunction := fnRoom[:0] // a value of each of this line's metrics without an Outcome
		if i == 0 {
			for _, v := range sums {
				members = append(members, member{key: string(definitions[v.def].Name), kind: memberNum, num: v.v})
			}
			byFunction = append(byFunction, sums...)
		}
		for rest := samples; len(rest) > 0; {
			var run []value
			run, rest = nextRun(rest)
			if i*MaxValues >= len(run) {
				continue
			}
			chunk := run[i*MaxValues : min((i+1)*MaxValues, len(run))]
			m := member{key: string(definitions[chunk[0].def].Name), kind: memberValues, values: chunk}
			if len(chunk) == 1 {
				m.kind, m.num = memberNum, chunk[0].v
			}
			members = append(members, m)
			byFunction = append(byFunction, chunk[0])
		}
		members = append(members, member{key: "_aws", kind: memberMeta})
		slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
		out = append(out, '{')
		for j, m := range members {
			if j > 0 {
				out = append(out, ',')
			}
			out = append(append(append(out, '"'), m.key...), `":`...)
			switch m.kind {
			case memberStr:
				out = appendString(out, m.str)
			case memberNum:
				out = appendFloat(out, m.num)
			case memberValues:
				out = append(out, '[')
				for k, v := range m.values {
					if k > 0 {
						out = append(out, ',')
					}
					out = appendFloat(out, v.v)
				}
				out = append(out, ']')
			case memberMeta:
				out = appendMetadata(out, at, byOutcome, byFunction)
			}
		}
		out = append(out, "}\n"...)
	}
	return out
}

// lineRoom is the room lines makes for each line.
const lineRoom = 1024

// nextRun splits off the values of vs's first metric (vs is in
// definitions' order).
func nextRun(vs []value) (run, rest []value) {
	end := 1
	for end < len(vs) && vs[end].def == vs[0].def {
		end++
	}
	return vs[:end], vs[end:]
}

// appendMetadata appends a line's _aws member: its time and its directives.
// One covers its metrics by Operation and Outcome (the counts). One covers
// those by Function alone, if it has any. The counts are also totalled by
// Function and by Operation. They are never totalled by Outcome alone, to
// keep the metrics CloudWatch bills for few. Every name in it is an
// identifier: none needs escaping.
func appendMetadata(out []byte, at time.Time, byOutcome []count, byFunction []value) []byte {
	out = strconv.AppendInt(append(out, `{"Timestamp":`...), at.UnixMilli(), 10)
	out = append(out, `,"CloudWatchMetrics":[`...)
	if len(byOutcome) > 0 {
		out = append(out, `{"Namespace":"`+Namespace+`","Dimensions":[["`+DimFunction+`"],["`+DimFunction+`","`+DimOperation+`"],["`+DimFunction+`","`+DimOperation+`","`+DimOutcome+`"]],"Metrics":[`...)
		for i, c := range byOutcome {
			out = appendMetric(out, i, c.def)
		}
		out = append(out, "]}"...)
		if len(byFunction) > 0 {
			out = append(out, ',')
		}
	}
	if len(byFunction) > 0 {
		out = append(out, `{"Namespace":"`+Namespace+`","Dimensions":[["`+DimFunction+`"]],"Metrics":[`...)
		for i, v := range byFunction {
			out = appendMetric(out, i, v.def)
		}
		out = append(out, "]}"...)
	}
	return append(out, "]}"...)
}

// appendMetric appends the i-th metric of a directive, definitions[def].
func appendMetric(out []byte, i, def int) []byte {
	if i > 0 {
		out = append(out, ',')
	}
	d := definitions[def]
	out = append(append(append(out, `{"Name":"`...), d.Name...), `","Unit":"`...)
	return append(append(out, d.Unit...), `"}`...)
}

// appendString appends s as encoding/json writes it. Printable ASCII
// needing no escaping is written as it is, quoted. The function, the
// outcome and a request id are such. Anything else goes through
// encoding/json.
func appendString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(out, b...)
		}
	}
	return append(append(append(out, '"'), s...), '"')
}

// appendFloat appends a finite f as encoding/json writes a float64, as
// ECMAScript does. The exponent form is used only below 1e-6 or from 1e21
// on. The exponent has no padding.
func appendFloat(out []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if n := len(out); format == 'e' && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
		out[n-2] = out[n-1] // e-07 is e-7
		out = out[:n-1]
	}
	return out
}
