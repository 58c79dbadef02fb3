// Package metrics provides the service's CloudWatch metrics. They are
// written as embedded metric format (EMF) JSON lines on an io.Writer. In
// Lambda, that is the function's standard output, from which CloudWatch
// Logs extracts them. No API call is made and nothing is sent in the
// background.
//
// Every metric is in the namespace "chargeonce" (Namespace), under the
// dimension set {Function}. Requests is also under {Function, Operation}
// and {Function, Operation, Outcome}. So refunds and charges alarm apart.
// Those are the only dimensions. There is never a tenant, a key or anything
// else whose values are unbounded. Definitions lists every metric the code
// emits, with its unit and the functions that emit it. Operations and
// Outcomes list the values of each function. The SAM template's alarms and
// dashboard are checked against them (test/deploy).
//
// A handler builds one Emitter at start-up and a Recorder per invocation:
//
//	m := metrics.New(os.Stdout, metrics.FunctionCharge) // once, when wiring
//
//	rec := m.Record() // per invocation
//	defer func() { _ = rec.Flush(ctx) }()
//	rec.Count(metrics.Requests, metrics.OperationCharge, metrics.OutcomeCreated)
//	rec.Time(metrics.BeginLatency, time.Since(start))
//	rec.Size(metrics.StoredResponseBytes, len(body))
//
// Code below the handler reaches the invocation's Recorder through its
// context. The handler calls NewContext(ctx, rec), and the service calls
// FromContext(ctx).Time(...). FromContext returns a nil *Recorder for a
// context without one. It records nothing, so callers never check.
//
// Count adds one to a count per Operation and Outcome. Requests counts
// every command a function handled, once, by what became of it. The charge
// function counts its POSTs, not reads. Add adds to a count without an
// Outcome. Time records a duration sample in the metric's unit. That is
// milliseconds for the latencies, and seconds for OldestLeaseAgeSeconds.
// Size records a size sample in bytes. Flush writes what was recorded since
// the last Flush and starts over. An invocation with at most one Operation
// and Outcome gets one line: a charge request. Otherwise each pair gets a
// line: a reconcile batch. Every line goes in one Write, so that concurrent
// invocations never interleave. In a Lambda invocation, the line carries
// its AWS request id for CloudWatch Logs Insights. RequestId is not a
// dimension.
//
// Some values are not written. A metric a function does not emit by
// Definitions is one. An Operation or Outcome not among
// Operations(function) or Outcomes(function) is another. So is a sample of
// the wrong kind. Flush writes the rest, then reports them in an error
// wrapping ErrUndefined.
package metrics
