package testkit

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// SpecRouter is api/openapi.yaml as a router that matches on paths alone,
// wherever the API runs. It is loaded and validated once per test process.
// Every test holds its answers to it.
func SpecRouter(t testing.TB) routers.Router {
	t.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile(filepath.Join(RepoRoot(), "api", "openapi.yaml"))
		if err != nil {
			specErr = err
			return
		}
		if err = doc.Validate(loader.Context); err != nil {
			specErr = err
			return
		}
		doc.Servers = nil
		specRouter, specErr = legacy.NewRouter(doc)
	})
	if specErr != nil {
		t.Fatalf("openapi: %v", specErr)
	}
	return specRouter
}

// CheckAnswer holds one answer, its status, headers and body, to what
// api/openapi.yaml says of the request method path with reqHeaders.
func CheckAnswer(t testing.TB, method, path string, reqHeaders map[string]string, status int, header map[string]string, body string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://localhost"+path, nil)
	for k, v := range reqHeaders {
		req.Header.Set(k, v)
	}
	route, params, err := SpecRouter(t).FindRoute(req)
	if err != nil {
		t.Fatalf("openapi: no route for %s %s: %v", method, path, err)
	}
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  status,
		Header:  h,
		Body:    io.NopCloser(strings.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: answer %d %s violates api/openapi.yaml: %v", method, path, status, body, err)
	}
}
