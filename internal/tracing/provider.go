package tracing

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// resourceOf names the service whose spans a provider records.
func resourceOf(service string) *resource.Resource {
	return resource.NewSchemaless(attribute.String("service.name", service))
}

// NewOTLP returns a Tracer exporting over OTLP/HTTP (protobuf) to
// endpoint, batching spans and flushing them after every invocation.
// endpoint is a base URL such as the ADOT collector layer's
// http://localhost:4318, as OTEL_EXPORTER_OTLP_ENDPOINT means it: spans go
// to its /v1/traces; one that is not an http or https URL is an error.
// Nothing connects before the first export, so ctx is not used, and no
// other OTEL_EXPORTER_OTLP_* variable is read.
func NewOTLP(_ context.Context, service, endpoint string) (*Tracer, error) {
	u, err := url.Parse(strings.TrimRight(endpoint, "/") + "/v1/traces")
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing: otlp endpoint %q is not an http or https URL", endpoint)
	}
	exp := newOTLPExporter(u.String())
	return New(sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(resourceOf(service)))), nil
}

// NewJSON returns a Tracer writing every span to w as one JSON line as it
// ends (stdouttrace, unbatched: nothing is left to flush or stop).
func NewJSON(w io.Writer, service string) (*Tracer, error) {
	exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
	if err != nil {
		return nil, fmt.Errorf("tracing: json exporter: %w", err)
	}
	return New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resourceOf(service)))), nil
}
