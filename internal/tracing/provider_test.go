package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/tracing"
)

// TestOTLPExportsEachInvocationAsItEnds: a collector at the endpoint (as
// the ADOT layer's listens) receives an invocation's spans at /v1/traces
// by the time End returns, before Lambda could freeze the process.
func TestOTLPExportsEachInvocationAsItEnds(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		paths []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	tr, err := tracing.NewOTLP(context.Background(), "charge", collector.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tr.StartInvocation(context.Background(), "charge", trace.SpanKindServer)
	_, child := tr.Start(ctx, "idem.Begin")
	child.End()
	tr.End(ctx, span)
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "POST /v1/traces" {
		t.Fatalf("the collector got %v, want one POST /v1/traces", paths)
	}
}
