package testkit

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// SpecRouter is api/openapi.yaml, loaded and validated once per test
// process, as a router that matches on paths alone, wherever the API runs:
// what every test holds an answer to.
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
