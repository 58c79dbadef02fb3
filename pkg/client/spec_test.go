package client

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestProblemMappingMatchesTheSpec: the client knows every problem type
// api/openapi.yaml names, and no other.
func TestProblemMappingMatchesTheSpec(t *testing.T) {
	spec, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var inSpec []string
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(ProblemBase)+`([a-z-]+)`).FindAllStringSubmatch(string(spec), -1) {
		if !slices.Contains(inSpec, m[1]) {
			inSpec = append(inSpec, m[1])
		}
	}
	var known []string
	for slug := range problemSentinels {
		known = append(known, slug)
	}
	slices.Sort(inSpec)
	slices.Sort(known)
	if !slices.Equal(inSpec, known) {
		t.Fatalf("problem types\n in api/openapi.yaml %v\n known to the client %v", inSpec, known)
	}
}
