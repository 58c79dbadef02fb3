package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/tracing"
)

func recorder(t *testing.T) (*tracing.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.New(tp), rec
}

// TestOffAllocatesNothing: tracing off (a nil Tracer) is every call the
// request path makes, for no allocation.
func TestOffAllocatesNothing(t *testing.T) {
	var off *tracing.Tracer
	ctx := context.Background()
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m"}}}
	allocs := testing.AllocsPerRun(100, func() {
		ictx, span := off.StartInvocation(ctx, "charge", trace.SpanKindServer)
		sctx, child := off.Start(ictx, "idem.Begin")
		tracing.Outcome(child, "claimed")
		tracing.Int(child, tracing.AttrStatus, 201)
		tracing.Error(child, "internal")
		if tracing.MessageAttributes(sctx) != nil {
			t.Fatal("message attributes without a trace")
		}
		child.End()
		bctx, batch := off.StartBatch(ictx, "reconcile", ev)
		_, msg := off.StartMessage(bctx, "reconcile.message", 1, ev.Records[0])
		msg.End()
		off.End(bctx, batch)
		off.End(ictx, span)
	})
	if allocs != 0 {
		t.Errorf("tracing off: %v allocations, want 0", allocs)
	}
	if off.HTTPClient(nil) != nil || off.Provider() != nil {
		t.Error("tracing off instruments clients")
	}
}

// sent is a message sent from within a new trace, with its context.
func sent(t *testing.T, tr *tracing.Tracer, id string) (events.SQSMessage, trace.SpanContext) {
	t.Helper()
	ctx, span := tr.Start(context.Background(), "send "+id)
	defer span.End()
	m := events.SQSMessage{MessageId: id, MessageAttributes: map[string]events.SQSMessageAttribute{},
		Attributes: map[string]string{"ApproximateReceiveCount": "3"}}
	for k, v := range tracing.MessageAttributes(ctx) {
		m.MessageAttributes[k] = events.SQSMessageAttribute{StringValue: v.StringValue, DataType: *v.DataType}
	}
	return m, span.SpanContext()
}

func TestOneMessageBatchContinuesItsTrace(t *testing.T) {
	t.Parallel()
	tr, rec := recorder(t)
	m, sender := sent(t, tr, "a")
	ctx, batch := tr.StartBatch(context.Background(), "reconcile", events.SQSEvent{Records: []events.SQSMessage{m}})
	_, msg := tr.StartMessage(ctx, "reconcile.message", 1, m)
	msg.End()
	tr.End(ctx, batch)
	spans := rec.Ended()
	b, ms := spans[len(spans)-1], spans[len(spans)-2]
	if b.Parent().SpanID() != sender.SpanID() || b.SpanContext().TraceID() != sender.TraceID() || !b.Parent().IsRemote() {
		t.Errorf("batch span's parent %v, want the sender's %v", b.Parent(), sender)
	}
	if ms.Parent().SpanID() != b.SpanContext().SpanID() {
		t.Errorf("message span's parent %v, want the batch span", ms.Parent())
	}
	var count string
	for _, a := range ms.Attributes() {
		if a.Key == tracing.AttrReceiveCount {
			count = a.Value.AsString()
		}
	}
	if count != "3" {
		t.Errorf("receive count %q, want 3", count)
	}
}

func TestLargerBatchLinksEveryMessagesTrace(t *testing.T) {
	t.Parallel()
	tr, rec := recorder(t)
	a, senderA := sent(t, tr, "a")
	b, senderB := sent(t, tr, "b")
	untraced := events.SQSMessage{MessageId: "c"}
	ev := events.SQSEvent{Records: []events.SQSMessage{a, b, untraced}}
	ctx, batch := tr.StartBatch(context.Background(), "reconcile", ev)
	for _, m := range ev.Records {
		_, s := tr.StartMessage(ctx, "reconcile.message", len(ev.Records), m)
		s.End()
	}
	tr.End(ctx, batch)
	spans := rec.Ended()
	bs := spans[len(spans)-1]
	if bs.Parent().IsValid() || len(bs.Links()) != 2 ||
		bs.Links()[0].SpanContext.SpanID() != senderA.SpanID() || bs.Links()[1].SpanContext.SpanID() != senderB.SpanID() {
		t.Errorf("batch span: parent %v, links %v; want a root linked to both senders", bs.Parent(), bs.Links())
	}
	for i, want := range []trace.SpanContext{senderA, senderB, bs.SpanContext()} {
		ms := spans[len(spans)-4+i]
		if ms.Parent().SpanID() != want.SpanID() || ms.SpanContext().TraceID() != want.TraceID() {
			t.Errorf("message %d's parent %v, want %v", i, ms.Parent(), want)
		}
		if links := ms.Links(); i < 2 && (len(links) != 1 || links[0].SpanContext.SpanID() != bs.SpanContext().SpanID()) {
			t.Errorf("message %d's links %v, want the batch span", i, links)
		}
	}
}

// TestHTTPClientRequestsAreClientSpans: each request is a client span, a
// child of the caller's, whose context the server receives; it ends once
// the body is read, and a 4xx or a failed request marks it failed with
// neither the URL nor the error's text.
func TestHTTPClientRequestsAreClientSpans(t *testing.T) {
	t.Parallel()
	tr, rec := recorder(t)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Traceparent-Seen", r.Header.Get("traceparent"))
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer server.Close()
	hc := tr.HTTPClient(&http.Client{Timeout: 5 * time.Second})
	ctx, parent := tr.Start(context.Background(), "provider.Charge")
	for _, path := range []string{"/charges?key=secret", "/missing"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		ended := len(rec.Ended())
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(res.Body); err != nil {
			t.Fatal(err)
		}
		if len(rec.Ended()) != ended+1 {
			t.Fatalf("%s: the span had not ended once the body was read", path)
		}
		_ = res.Body.Close()
		if req.Header.Get("traceparent") != "" {
			t.Errorf("%s: the caller's request was given a traceparent", path)
		}
		span := rec.Ended()[len(rec.Ended())-1]
		if got := res.Header.Get("Traceparent-Seen"); !strings.Contains(got, span.SpanContext().SpanID().String()) {
			t.Errorf("%s: the server got traceparent %q, want the client span's %s", path, got, span.SpanContext().SpanID())
		}
		if span.Name() != "HTTP POST" || span.SpanKind() != trace.SpanKindClient || span.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: span %q, kind %v, parent %v; want HTTP POST, a client span of provider.Charge", path, span.Name(), span.SpanKind(), span.Parent())
		}
		wantStatus := map[string]string{"/missing": "404"}[path]
		if wantStatus == "" {
			wantStatus = "200"
		}
		if !hasAttr(span, tracing.AttrStatus, wantStatus) || !hasAttr(span, "http.request.method", "POST") || !hasAttr(span, "server.address", "127.0.0.1") {
			t.Errorf("%s: attributes %v, want the method, server and status %s", path, span.Attributes(), wantStatus)
		}
		if failed := span.Status().Code == codes.Error; failed != (path == "/missing") {
			t.Errorf("%s: status %v", path, span.Status())
		}
	}
	parent.End()

	server.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.URL+"/charges/secret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Do(req); err == nil {
		t.Fatal("a request to a closed server succeeded")
	}
	span := rec.Ended()[len(rec.Ended())-1]
	if span.Name() != "HTTP GET" || span.Status().Code != codes.Error || span.Status().Description != "" || !hasAttr(span, "error.type", "*net.OpError") {
		t.Errorf("failed request: span %q, status %v, attributes %v; want HTTP GET failed with error.type and no text", span.Name(), span.Status(), span.Attributes())
	}
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.String(), "secret") {
				t.Errorf("span %s carries the URL: %s=%s", s.Name(), a.Key, a.Value.String())
			}
		}
	}
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
