package httpapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestProblemsMatchTheSpec: the problem types the handler answers with are
// exactly those api/openapi.yaml names.
func TestProblemsMatchTheSpec(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var inSpec []string
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(httpapi.ProblemBase)+`([a-z-]+)`).FindAllStringSubmatch(string(spec), -1) {
		if !slices.Contains(inSpec, m[1]) {
			inSpec = append(inSpec, m[1])
		}
	}
	var inCode []string
	for _, p := range httpapi.Problems {
		inCode = append(inCode, p.Slug)
	}
	slices.Sort(inSpec)
	slices.Sort(inCode)
	if !slices.Equal(inSpec, inCode) {
		t.Fatalf("problem types\n in api/openapi.yaml %v\n in httpapi.Problems %v", inSpec, inCode)
	}
}
