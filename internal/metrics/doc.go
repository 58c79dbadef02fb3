// Package metrics provides the service's CloudWatch metrics, written as
// embedded metric format (EMF) JSON lines on an io.Writer: in Lambda, the
// function's standard output, from which CloudWatch Logs extracts them. No
// API call is made and nothing is sent in the background.
//
// Every metric is in the namespace "chargeonce" (Namespace), under the
// dimension set {Function}. Requests is also under {Function, Operation}
// and {Function, Operation, Outcome}, so that refunds and charges alarm
// apart. Those are the only dimensions: never a tenant, a key or anything
// else whose values are unbounded. Definitions lists every metric the code
// emits with its unit and the functions that emit it, Operations and
// Outcomes the values of each function; the SAM template's alarms and
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
// context: the handler calls NewContext(ctx, rec), and the service calls
// FromContext(ctx).Time(...). A nil *Recorder, which FromContext returns
// for a context without one, records nothing, so callers never check.
//
// Count adds one to a count per Operation and Outcome (Requests counts
// every command a function handled, once, by what became of it; the
// charge function counts its POSTs, not reads). Add adds to a count
// without an Outcome, Time records a duration sample in the metric's unit
// (milliseconds for the latencies, seconds for OldestLeaseAgeSeconds) and
// Size a size sample in bytes. Flush writes what was recorded since the
// last Flush and starts over: one line when the invocation had at most one
// Operation and Outcome (a charge request), one line per pair otherwise (a
// reconcile batch), every line in one Write so that concurrent invocations
// never interleave. The line carries the invocation's AWS request id
// (RequestId, not a dimension) when the context is a Lambda invocation's,
// for CloudWatch Logs Insights.
//
// A metric a function does not emit by Definitions, an Operation or
// Outcome not among Operations(function) or Outcomes(function), or a
// sample of the wrong kind is not written; Flush reports it in an error
// wrapping ErrUndefined, after writing the rest.
package metrics
