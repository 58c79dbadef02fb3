package tracing

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/chargeonce/chargeonce"

// Span attributes set by the service.
const (
	// AttrOutcome is what became of a request, a message or a store call
	// (charge.Outcome's vocabulary, or the store call's own).
	AttrOutcome = attribute.Key("chargeonce.outcome")
	// AttrErrorClass names a failure without its text (charge.ErrorClass).
	AttrErrorClass = attribute.Key("chargeonce.error_class")
	// AttrAttempts counts a command's reconcile take-overs.
	AttrAttempts = attribute.Key("chargeonce.attempts")
	// AttrReceiveCount is how often SQS has delivered the message.
	AttrReceiveCount = attribute.Key("messaging.sqs.receive_count")
	// AttrRoute and AttrStatus are the HTTP route and response status.
	AttrRoute  = attribute.Key("http.route")
	AttrStatus = attribute.Key("http.response.status_code")
)

// Tracer starts the service's spans on one TracerProvider. A nil *Tracer
// traces nothing.
type Tracer struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
	flush    func(context.Context) error
}

// flusher is what sdktrace.TracerProvider offers to export buffered spans.
type flusher interface {
	ForceFlush(ctx context.Context) error
}

// New returns a Tracer on tp; nil tp returns nil, tracing off. If tp can
// flush (an SDK provider with a batching processor), End flushes it after
// every invocation, before Lambda freezes the process.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	t := &Tracer{provider: tp, tracer: tp.Tracer(ScopeName)}
	if f, ok := tp.(flusher); ok {
		t.flush = f.ForceFlush
	}
	return t
}

// Provider is the TracerProvider, for the instrumentation installed on
// the AWS SDK clients (otelaws); nil when t is.
func (t *Tracer) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Start starts an internal span named name as a child of ctx's span.
func (t *Tracer) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name)
}

// StartInvocation starts the span of one invocation of a function whose
// trigger is of the given kind (server for API Gateway, consumer for SQS,
// internal for a schedule).
func (t *Tracer) StartInvocation(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// StartBatch starts the invocation span of an SQS batch. A batch of one
// message continues that message's trace; a larger batch starts a new
// trace linked to each message's.
func (t *Tracer) StartBatch(ctx context.Context, name string, ev events.SQSEvent) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if len(ev.Records) == 1 {
		ctx = remote(ctx, ev.Records[0])
	} else {
		opts = append(opts, trace.WithNewRoot())
		for _, m := range ev.Records {
			if sc := trace.SpanContextFromContext(remote(ctx, m)); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
	}
	return t.tracer.Start(ctx, name, opts...)
}

// StartMessage starts the span of one message of the batch whose span ctx
// holds: its child when the batch is the one message, otherwise a child of
// the message's sender's span, linked to the batch's.
func (t *Tracer) StartMessage(ctx context.Context, name string, batch int, m events.SQSMessage) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if batch > 1 {
		if rctx := remote(ctx, m); trace.SpanContextFromContext(rctx).IsValid() {
			opts = append(opts, trace.WithLinks(trace.LinkFromContext(ctx)))
			ctx = rctx
		}
	}
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.message.id", m.MessageId))
		if n, ok := m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)]; ok {
			span.SetAttributes(AttrReceiveCount.String(n))
		}
	}
	return ctx, span
}

// End ends an invocation's span and exports what the invocation recorded:
// Lambda may freeze the process as soon as the handler returns.
func (t *Tracer) End(ctx context.Context, span trace.Span) {
	span.End()
	if t != nil && t.flush != nil {
		_ = t.flush(context.WithoutCancel(ctx))
	}
}

// HTTPClient returns a copy of hc (nil: a new client) whose requests are
// client spans; t nil returns hc itself.
func (t *Tracer) HTTPClient(hc *http.Client) *http.Client {
	if t == nil {
		return hc
	}
	c := http.Client{}
	if hc != nil {
		c = *hc
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = &clientTransport{base: base, tracer: t.tracer}
	return &c
}

// clientTransport makes each request a client span named "HTTP <method>"
// carrying its trace context, as otelhttp's Transport does. It is written
// here because otelhttp also links its metrics, its server handler and its
// semantic-convention tables, an eighth of a MiB of every bootstrap, for
// the few attributes below; it records neither the URL nor an error's text
// (either may name a key).
type clientTransport struct {
	base   http.RoundTripper
	tracer trace.Tracer
}

// HTTP client span attributes (OpenTelemetry's semantic conventions).
const (
	attrMethod     = attribute.Key("http.request.method")
	attrServer     = attribute.Key("server.address")
	attrServerPort = attribute.Key("server.port")
	attrErrorType  = attribute.Key("error.type")
)

func (t *clientTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, span := t.tracer.Start(r.Context(), "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrMethod.String(r.Method), attrServer.String(r.URL.Hostname())))
	if port, err := strconv.Atoi(r.URL.Port()); err == nil {
		span.SetAttributes(attrServerPort.Int(port))
	}
	r = r.Clone(ctx) // a RoundTripper must not change the caller's request
	propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
	res, err := t.base.RoundTrip(r)
	if err != nil {
		span.SetAttributes(attrErrorType.String(fmt.Sprintf("%T", err)))
		span.SetStatus(codes.Error, "")
		span.End()
		return res, err
	}
	span.SetAttributes(AttrStatus.Int(res.StatusCode))
	if res.StatusCode >= http.StatusBadRequest {
		span.SetStatus(codes.Error, "")
	}
	res.Body = &spanBody{ReadCloser: res.Body, span: span}
	return res, nil
}

// spanBody ends the request's span when its response body is read to the
// end or closed, whichever comes first.
type spanBody struct {
	io.ReadCloser
	span trace.Span
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.span.End()
	}
	return n, err
}

func (b *spanBody) Close() error {
	b.span.End()
	return b.ReadCloser.Close()
}

// Outcome sets span's outcome.
func Outcome(span trace.Span, outcome string) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
	}
}

// Int sets an integer attribute on span.
func Int(span trace.Span, key attribute.Key, n int) {
	if span.IsRecording() {
		span.SetAttributes(key.Int(n))
	}
}

// String sets a string attribute on span. value must never be a key, a
// tenant, a card source or a body.
func String(span trace.Span, key attribute.Key, value string) {
	if span.IsRecording() {
		span.SetAttributes(key.String(value))
	}
}

// Error marks span failed with err's class, never err's text (which may
// name a key).
func Error(span trace.Span, class string) {
	if span.IsRecording() {
		span.SetAttributes(AttrErrorClass.String(class))
		span.SetStatus(codes.Error, class)
	}
}

// propagator is W3C Trace Context, whatever the global propagator is.
var propagator = propagation.TraceContext{}

// MessageAttributes are the SQS message attributes carrying ctx's trace
// context; nil when ctx carries none (tracing off).
func MessageAttributes(ctx context.Context) map[string]sqstypes.MessageAttributeValue {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	attrs := make(map[string]sqstypes.MessageAttributeValue, len(carrier))
	for k, v := range carrier {
		attrs[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return attrs
}

// remote is ctx with the trace context m's sender put in its attributes,
// if any, as the remote parent.
func remote(ctx context.Context, m events.SQSMessage) context.Context {
	carrier := propagation.MapCarrier{}
	for _, k := range propagator.Fields() {
		if a, ok := m.MessageAttributes[k]; ok && a.StringValue != nil {
			carrier[k] = *a.StringValue
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, carrier)
}
