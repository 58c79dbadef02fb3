package reconcile_test

// Tracing end to end: the stack's functions traced into one in-memory
// recorder, on the emulator.

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// tracedStack is a stack whose functions all record their spans in rec.
func tracedStack(t *testing.T, opts ...func(*stackConfig)) (*stack, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newStack(t, append([]func(*stackConfig){func(c *stackConfig) { c.tracer = tracing.New(tp) }}, opts...)...), rec
}

// undelayed sends the charge function's reconcile messages at once: their
// delay is the lease's, which the test's clock, not real time, runs out.
func undelayed(c *stackConfig) {
	c.chargeSQS = append(c.chargeSQS, func(o *sqs.Options) {
		o.APIOptions = append(slices.Clip(o.APIOptions), func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("undelayed", func(
				ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler,
			) (middleware.InitializeOutput, middleware.Metadata, error) {
				if send, ok := in.Parameters.(*sqs.SendMessageInput); ok {
					send.DelaySeconds = 0
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
		})
	})
}

// tree renders the spans of the trace root belongs to below root, one line
// a span, indented by depth, children in start order; each line is the
// span's name and its outcome attribute, if any.
func tree(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan) []string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		}
	}
	var lines []string
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		line := strings.Repeat("  ", depth) + s.Name()
		for _, a := range s.Attributes() {
			if a.Key == tracing.AttrOutcome {
				line += " " + a.Value.AsString()
			}
		}
		lines = append(lines, line)
		kids := children[s.SpanContext().SpanID()]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	walk(root, 0)
	return lines
}

// lastSpan is the last ended span named name.
func lastSpan(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rec.Ended()
	for i := len(spans) - 1; i >= 0; i-- {
		if spans[i].Name() == name {
			return spans[i]
		}
	}
	t.Fatalf("no span %s among %d", name, len(spans))
	return nil
}

func wantTree(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s span tree:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// wantNoSecrets checks that no span's name, attributes, status or events
// name any of secrets.
func wantNoSecrets(t *testing.T, spans []sdktrace.ReadOnlySpan, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, a := range s.Attributes() {
			texts = append(texts, a.Value.String())
		}
		for _, e := range s.Events() {
			texts = append(texts, e.Name)
			for _, a := range e.Attributes {
				texts = append(texts, a.Value.String())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %s carries %q: %q", s.Name(), secret, text)
				}
			}
		}
	}
}

func TestSpanTreesOfAFirstChargeAndItsReplay(t *testing.T) {
	t.Parallel()
	s, rec := tracedStack(t)
	k := newKey(t)
	if resp := s.post(t, k, providersim.SourceVisa); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first charge: %d %s", resp.StatusCode, resp.Body)
	}
	first := lastSpan(t, rec, "charge")
	wantTree(t, "first charge", tree(rec.Ended(), first),
		"charge created",
		"  idem.Begin claimed",
		"    DynamoDB.PutItem",
		"  provider.Charge charged",
		"    HTTP POST",
		"  idem.Commit stored",
		"    DynamoDB.TransactWriteItems",
	)
	if resp := s.post(t, k, providersim.SourceVisa); resp.StatusCode != http.StatusCreated {
		t.Fatalf("replay: %d %s", resp.StatusCode, resp.Body)
	}
	replay := lastSpan(t, rec, "charge")
	wantTree(t, "replay", tree(rec.Ended(), replay),
		"charge replayed",
		"  idem.Begin replayed",
		"    DynamoDB.PutItem",
	)
	if replay.SpanContext().TraceID() == first.SpanContext().TraceID() {
		t.Error("the replay joined the first request's trace: each request is a trace of its own")
	}
	for _, root := range []sdktrace.ReadOnlySpan{first, replay} {
		if root.SpanKind() != trace.SpanKindServer || !hasAttr(root, tracing.AttrStatus, "201") || !hasAttr(root, tracing.AttrRoute, "POST /charges") {
			t.Errorf("invocation span %v %v, want a server span with the route and status 201", root.SpanKind(), root.Attributes())
		}
	}
	wantNoSecrets(t, rec.Ended(), k.ClientKey(), k.String(), providersim.SourceVisa, body(providersim.SourceVisa))
}

// TestAmbiguousChargeIsOneTrace: the charge's provider call times out, so
// its outcome is unknown and a reconcile message is queued; the reconcile
// invocation that resolves it continues the API request's trace.
func TestAmbiguousChargeIsOneTrace(t *testing.T) {
	t.Parallel()
	s, rec := tracedStack(t, undelayed)
	k := s.ambiguous(t)
	api := lastSpan(t, rec, "charge")
	s.clock.Advance(time.Minute) // the lease runs out
	msgs, resp := s.deliver(t, s.rec, 1)
	if len(resp.BatchItemFailures) != 0 || msgs[0].MessageAttributes["traceparent"].StringValue == nil {
		t.Fatalf("failures %v; message attributes %v, want a traceparent", resp.BatchItemFailures, msgs[0].MessageAttributes)
	}
	if got := s.status(t, k); got != idem.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", got)
	}
	wantTree(t, "ambiguous charge", tree(rec.Ended(), api),
		"charge ambiguous",
		"  idem.Begin claimed",
		"    DynamoDB.PutItem",
		"  provider.Charge",
		"    HTTP POST",
		"  DynamoDB.UpdateItem", // the message's mark on the record
		"  SQS.SendMessage",
		"  reconcile",
		"    reconcile.message "+string(charge.OutcomeResolvedCharged),
		"      DynamoDB.UpdateItem", // the mark renewed past a redelivery
		"      DynamoDB.GetItem",
		"      DynamoDB.UpdateItem",
		"      provider.Lookup charged",
		"        HTTP GET",
		"      idem.Commit stored",
		"        DynamoDB.TransactWriteItems",
		"      DynamoDB.UpdateItem", // the mark removed
	)
	call := lastSpan(t, rec, "provider.Charge")
	if !hasAttr(call, tracing.AttrErrorClass, "provider_ambiguous") {
		t.Errorf("provider.Charge attributes %v, want error class provider_ambiguous", call.Attributes())
	}
	reconciled := lastSpan(t, rec, "reconcile.message")
	if !hasAttr(reconciled, tracing.AttrReceiveCount, "1") || !hasAttr(reconciled, tracing.AttrAttempts, "1") {
		t.Errorf("reconcile.message attributes %v, want receive count 1 and attempts 1", reconciled.Attributes())
	}
	wantNoSecrets(t, rec.Ended(), k.ClientKey(), k.String(), providersim.SourceTimeoutOnce, body(providersim.SourceTimeoutOnce))
}

// hasAttr reports whether s has the attribute key with the value want.
func hasAttr(s sdktrace.ReadOnlySpan, key attribute.Key, want string) bool {
	for _, a := range s.Attributes() {
		if a.Key == key && a.Value.String() == want {
			return true
		}
	}
	return false
}

// TestSweptKeyIsReconciledInTheSweepsTrace: a key the sweeper finds is
// reconciled in the sweep's trace, the one its message carries.
func TestSweptKeyIsReconciledInTheSweepsTrace(t *testing.T) {
	t.Parallel()
	s, rec := tracedStack(t)
	k := s.ambiguous(t) // its own message waits out the lease in real time
	s.lost()
	if sum := s.sweep(t); sum.Queued != 1 {
		t.Fatalf("sweep: %+v, want the key queued", sum)
	}
	sweep := lastSpan(t, rec, "sweeper")
	if !hasAttr(sweep, attribute.Key("chargeonce.sweep.queued"), "1") {
		t.Errorf("sweeper span attributes %v, want queued 1", sweep.Attributes())
	}
	if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.status(t, k); got != idem.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", got)
	}
	reconciled := lastSpan(t, rec, "reconcile.message")
	if reconciled.SpanContext().TraceID() != sweep.SpanContext().TraceID() {
		t.Errorf("reconcile.message in trace %s, want the sweep's %s", reconciled.SpanContext().TraceID(), sweep.SpanContext().TraceID())
	}
	if got := tree(rec.Ended(), sweep); !slices.Contains(got, "  SQS.SendMessageBatch") || !slices.Contains(got, "    reconcile.message "+string(charge.OutcomeResolvedCharged)) {
		t.Errorf("sweep span tree:\n%s\nwant SQS.SendMessageBatch and the reconcile below it", strings.Join(got, "\n"))
	}
}
