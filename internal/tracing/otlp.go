package tracing

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpExporter posts spans to an OTLP/HTTP collector's /v1/traces as a
// protobuf ExportTraceServiceRequest, which it encodes field by field
// (protobuf's varints are encoding/binary's). It exists instead of otlptracehttp, which sends the same
// messages but links gRPC, grpc-gateway and the protobuf runtime into
// every bootstrap, traced or not: 8 MiB of the charge function's 20, and
// their package inits. The field numbers are opentelemetry-proto's (trace,
// common and resource v1), which are stable; the tests check the request
// against what OpenTelemetry's own exporter builds from the same spans.
type otlpExporter struct {
	url    string
	client *http.Client
}

// otlpTimeout bounds one export, as OTEL_EXPORTER_OTLP_TIMEOUT's default.
const otlpTimeout = 10 * time.Second

func newOTLPExporter(url string) *otlpExporter {
	return &otlpExporter{url: url, client: &http.Client{Timeout: otlpTimeout}}
}

// ExportSpans sends spans in one request. A failed export is not retried:
// the flush after each invocation runs before the function returns, and
// the collector is the Lambda layer's, on loopback.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(exportRequest(spans)))
	if err != nil {
		return fmt.Errorf("tracing: otlp export: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	res, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("tracing: otlp export: %w", err)
	}
	defer res.Body.Close()
	// Read the answer (a partial success, if any) so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("tracing: otlp export: collector answered %s", res.Status)
	}
	return nil
}

// Shutdown has nothing to release: each export is one request.
func (e *otlpExporter) Shutdown(context.Context) error { return nil }

// exportRequest encodes spans as an ExportTraceServiceRequest: one
// ResourceSpans a resource, in it one ScopeSpans an instrumentation scope,
// each in the order the spans first name it.
func exportRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeSpans struct {
		scope instrumentation.Scope
		spans []byte // Span messages, each as ScopeSpans' field 2
	}
	type resourceSpans struct {
		res    *resource.Resource
		scopes []*scopeSpans
	}
	type scopeKey struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	var resources []*resourceSpans
	byResource := map[attribute.Distinct]*resourceSpans{}
	byScope := map[scopeKey]*scopeSpans{}
	for _, s := range spans {
		rk := s.Resource().Equivalent()
		rs := byResource[rk]
		if rs == nil {
			rs = &resourceSpans{res: s.Resource()}
			byResource[rk] = rs
			resources = append(resources, rs)
		}
		sk := scopeKey{rk, s.InstrumentationScope()}
		ss := byScope[sk]
		if ss == nil {
			ss = &scopeSpans{scope: sk.scope}
			byScope[sk] = ss
			rs.scopes = append(rs.scopes, ss)
		}
		ss.spans = appendSpan(ss.spans, s)
	}

	var req []byte
	for _, rs := range resources {
		var r []byte
		r = appendLen(r, 1, keyValues(nil, 1, rs.res.Iter())) // Resource
		for _, ss := range rs.scopes {
			var m []byte
			if ss.scope != (instrumentation.Scope{}) {
				var sc []byte // InstrumentationScope
				sc = appendString(sc, 1, ss.scope.Name)
				sc = appendString(sc, 2, ss.scope.Version)
				sc = keyValues(sc, 3, ss.scope.Attributes.Iter())
				m = appendLen(m, 1, sc)
			}
			m = append(m, ss.spans...)
			m = appendString(m, 3, ss.scope.SchemaURL)
			r = appendLen(r, 2, m)
		}
		r = appendString(r, 3, rs.res.SchemaURL())
		req = appendLen(req, 1, r)
	}
	return req
}

// appendSpan appends s as a Span message, ScopeSpans' field 2.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	var m []byte
	m = appendLen(m, 1, tid[:])
	m = appendLen(m, 2, sid[:])
	m = appendString(m, 3, sc.TraceState().String())
	if psid := parent.SpanID(); psid.IsValid() {
		m = appendLen(m, 4, psid[:])
	}
	m = appendString(m, 5, s.Name())
	m = appendVarint(m, 6, uint64(spanKind(s.SpanKind())))
	m = appendFixed64(m, 7, unixNano(s.StartTime()))
	m = appendFixed64(m, 8, unixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		m = appendLen(m, 9, keyValue(kv))
	}
	m = appendVarint(m, 10, count(s.DroppedAttributes()))
	for _, e := range s.Events() {
		var ev []byte
		ev = appendFixed64(ev, 1, unixNano(e.Time))
		ev = appendString(ev, 2, e.Name)
		for _, kv := range e.Attributes {
			ev = appendLen(ev, 3, keyValue(kv))
		}
		ev = appendVarint(ev, 4, count(e.DroppedAttributeCount))
		m = appendLen(m, 11, ev)
	}
	m = appendVarint(m, 12, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		var lm []byte
		lm = appendLen(lm, 1, ltid[:])
		lm = appendLen(lm, 2, lsid[:])
		for _, kv := range l.Attributes {
			lm = appendLen(lm, 4, keyValue(kv))
		}
		lm = appendVarint(lm, 5, count(l.DroppedAttributeCount))
		lm = appendFixed32(lm, 6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		m = appendLen(m, 13, lm)
	}
	m = appendVarint(m, 14, count(s.DroppedLinks()))
	var st []byte // Status
	st = appendString(st, 2, s.Status().Description)
	st = appendVarint(st, 3, statusCode(s.Status().Code))
	m = appendLen(m, 15, st)
	m = appendFixed32(m, 16, spanFlags(sc.TraceFlags(), parent))
	return appendLen(b, 2, m)
}

// spanKind is k as OTLP's SpanKind, whose numbers trace.SpanKind shares.
func spanKind(k trace.SpanKind) trace.SpanKind {
	if k < trace.SpanKindInternal || k > trace.SpanKindConsumer {
		return trace.SpanKindUnspecified
	}
	return k
}

// statusCode is c as OTLP's StatusCode, which numbers OK 1 and ERROR 2
// (codes.Code has them the other way round).
func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

// spanFlags are OTLP's SpanFlags: the W3C trace flags, and whether the
// parent (or the linked span) is remote.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	const hasIsRemote, isRemote = 0x100, 0x200
	flags := uint32(tf) | hasIsRemote
	if parent.IsRemote() {
		flags |= isRemote
	}
	return flags
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

func count(n int) uint64 { return uint64(min(max(0, n), math.MaxUint32)) }

// keyValues appends every attribute of it as a KeyValue message, field num.
func keyValues(b []byte, num uint64, it attribute.Iterator) []byte {
	for it.Next() {
		b = appendLen(b, num, keyValue(it.Attribute()))
	}
	return b
}

// keyValue is kv as a KeyValue message.
func keyValue(kv attribute.KeyValue) []byte {
	b := appendString(nil, 1, string(kv.Key))
	return appendLen(b, 2, anyValue(kv.Value))
}

// anyValue is v as an AnyValue message. Its value is a oneof, so a zero
// value is written too: it is what tells false or 0 from no value.
func anyValue(v attribute.Value) []byte {
	var b []byte
	switch v.Type() {
	case attribute.STRING:
		b = appendLen(b, 1, v.AsString())
	case attribute.BOOL:
		var x uint64
		if v.AsBool() {
			x = 1
		}
		b = binary.AppendUvarint(appendTag(b, 2, wireVarint), x)
	case attribute.INT64:
		b = binary.AppendUvarint(appendTag(b, 3, wireVarint), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = binary.LittleEndian.AppendUint64(appendTag(b, 4, wireFixed64), math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		b = appendLen(b, 7, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = arrayValue(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		b = arrayValue(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		b = arrayValue(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		b = arrayValue(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		b = arrayValue(b, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		var kvs []byte // KeyValueList
		for _, kv := range v.AsMap() {
			kvs = appendLen(kvs, 1, keyValue(kv))
		}
		b = appendLen(b, 6, kvs)
	case attribute.EMPTY:
	default:
		b = appendLen(b, 1, "INVALID")
	}
	return b
}

// arrayValue appends elems as an AnyValue's ArrayValue, field 5.
func arrayValue[E any](b []byte, elems []E, value func(E) attribute.Value) []byte {
	var arr []byte
	for _, e := range elems {
		arr = appendLen(arr, 1, anyValue(value(e)))
	}
	return appendLen(b, 5, arr)
}

// Protobuf's wire types, the low three bits of a field's tag.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireLen     = 2
	wireFixed32 = 5
)

func appendTag(b []byte, num, wire uint64) []byte { return binary.AppendUvarint(b, num<<3|wire) }

// appendLen appends field num holding v, length first: a string, bytes or
// an encoded message.
func appendLen[T string | []byte](b []byte, num uint64, v T) []byte {
	b = binary.AppendUvarint(appendTag(b, num, wireLen), uint64(len(v)))
	return append(b, v...)
}

// The scalar appends leave out a zero value, as proto3 encodes it.

func appendString(b []byte, num uint64, s string) []byte {
	if s == "" {
		return b
	}
	return appendLen(b, num, s)
}

func appendVarint(b []byte, num uint64, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(appendTag(b, num, wireVarint), v)
}

func appendFixed64(b []byte, num uint64, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendTag(b, num, wireFixed64), v)
}

func appendFixed32(b []byte, num uint64, v uint32) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint32(appendTag(b, num, wireFixed32), v)
}
