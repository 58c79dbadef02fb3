package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// captured is an otlptrace client that keeps what it is asked to upload:
// the OpenTelemetry exporters' own conversion of spans to OTLP messages.
type captured struct{ spans []*tracepb.ResourceSpans }

func (c *captured) Start(context.Context) error { return nil }
func (c *captured) Stop(context.Context) error  { return nil }
func (c *captured) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	c.spans = append(c.spans, rs...)
	return nil
}

// decodeRequest decodes an ExportTraceServiceRequest field by field: its
// only field, 1, is a ResourceSpans.
func decodeRequest(b []byte) ([]*tracepb.ResourceSpans, error) {
	var out []*tracepb.ResourceSpans
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, fmt.Errorf("request: field %d of type %d (%d), want ResourceSpans (1, bytes)", num, typ, n)
		}
		b = b[n:]
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("request: truncated ResourceSpans (%d)", n)
		}
		b = b[n:]
		rs := &tracepb.ResourceSpans{}
		if err := proto.Unmarshal(m, rs); err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

// spansOfEveryShape are ended spans of two services and three scopes,
// with every attribute type, events, links, statuses, a trace state and
// remote and local parents.
func spansOfEveryShape(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	var spans []sdktrace.ReadOnlySpan
	for _, service := range []string{"charge", "reconcile"} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(resourceOf(service)))
		ts, err := trace.ParseTraceState("vendor=value")
		if err != nil {
			t.Fatal(err)
		}
		remoteParent := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
		})
		linked := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}, Remote: true})
		ctx, root := tp.Tracer(ScopeName).Start(trace.ContextWithRemoteSpanContext(context.Background(), remoteParent), service,
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(
				trace.Link{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.String("why", "batch")}},
				trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{10}})}))
		root.SetAttributes(
			attribute.String("s", "x"), attribute.String("empty", ""),
			attribute.Bool("t", true), attribute.Bool("f", false),
			attribute.Int64("i", -42), attribute.Int("zero", 0),
			attribute.Float64("pi", 3.25), attribute.Float64("fzero", 0),
			attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -1, 0}),
			attribute.Float64Slice("fs", []float64{0.5}), attribute.StringSlice("ss", []string{"a", ""}),
			attribute.StringSlice("none", nil), attribute.ByteSlice("bytes", []byte{0, 1, 2}),
			attribute.Slice("mixed", attribute.IntValue(1), attribute.StringValue("two"), attribute.SliceValue()),
			attribute.Map("map", attribute.Bool("nested", true), attribute.Map("deeper", attribute.Float64("x", 1))),
			attribute.KeyValue{Key: "no value"},
		)
		root.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", 2)), trace.WithTimestamp(time.Unix(1, 5)))
		root.RecordError(errors.New("boom"))
		root.SetStatus(codes.Error, "provider_ambiguous")
		_, child := tp.Tracer("go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws",
			trace.WithInstrumentationVersion("0.72.0"), trace.WithSchemaURL("https://opentelemetry.io/schemas/1.43.0"),
			trace.WithInstrumentationAttributes(attribute.String("scope.attr", "v"))).
			Start(ctx, "DynamoDB.PutItem", trace.WithSpanKind(trace.SpanKindClient))
		child.SetStatus(codes.Ok, "")
		child.End()
		_, internal := tp.Tracer(ScopeName).Start(ctx, "idem.Begin")
		internal.End()
		_, unnamed := tp.Tracer("").Start(context.Background(), "no scope", trace.WithSpanKind(trace.SpanKindProducer))
		unnamed.End()
		root.End()
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	}
	spans = rec.Ended()
	if len(spans) != 8 {
		t.Fatalf("%d spans, want 8", len(spans))
	}
	return spans
}

// TestExportRequestIsWhatTheOTLPExporterSends: the request this package
// encodes decodes to the very messages OpenTelemetry's own exporter
// builds from the same spans.
func TestExportRequestIsWhatTheOTLPExporterSends(t *testing.T) {
	t.Parallel()
	spans := spansOfEveryShape(t)
	var want captured
	if err := otlptrace.NewUnstarted(&want).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	got, err := decodeRequest(exportRequest(spans))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(want.spans) != 2 {
		t.Fatalf("%d resources, want %d, and 2", len(got), len(want.spans))
	}
	for _, g := range got {
		var match *tracepb.ResourceSpans // the exporter's order of resources is a map's
		for _, w := range want.spans {
			if proto.Equal(g.GetResource(), w.GetResource()) {
				match = w
			}
		}
		if match == nil {
			t.Fatalf("resource %v is not among the exporter's", g.GetResource())
		}
		if !proto.Equal(match, g) {
			t.Errorf("exportRequest:\n%s\notlptrace:\n%s", prototext.Format(g), prototext.Format(match))
		}
	}
}

func TestExportSpansPostsProtobufAndReportsARefusal(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		refuse   bool
		received int // spans
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); r.Method != http.MethodPost || ct != "application/x-protobuf" {
			t.Errorf("%s with Content-Type %q, want a POST of application/x-protobuf", r.Method, ct)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		got, err := decodeRequest(body)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range got {
			for _, ss := range rs.GetScopeSpans() {
				received += len(ss.GetSpans())
			}
		}
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer collector.Close()
	exp := newOTLPExporter(collector.URL + "/v1/traces")
	spans := spansOfEveryShape(t)
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if received != len(spans) {
		t.Errorf("the collector got %d spans, want %d", received, len(spans))
	}
	refuse = true
	mu.Unlock()
	if err := exp.ExportSpans(context.Background(), spans); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a 503 from the collector: %v, want an error naming it", err)
	}
}

func TestNewOTLPRefusesAnEndpointThatIsNotAnHTTPURL(t *testing.T) {
	t.Parallel()
	for _, endpoint := range []string{"localhost:4318", "grpc://localhost:4317", "http://", "http://[::1"} {
		if _, err := NewOTLP(context.Background(), "charge", endpoint); err == nil {
			t.Errorf("NewOTLP(%q): no error", endpoint)
		}
	}
}
