package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// synopses are the command lines of a usage text, their descriptions cut.
// A line indented six spaces continues the command line above it.
func synopses(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		switch {
		case strings.HasPrefix(line, "  chargectl "):
			out = append(out, cmd)
		case strings.HasPrefix(line, "      (") && len(out) > 0:
			out[len(out)-1] += " " + cmd
		}
	}
	return out
}

// TestDocShowsTheUsage holds doc.go's Usage block to the usage texts the
// command prints: each command line, in the same order. The admin
// commands stand in for the line that points to them.
func TestDocShowsTheUsage(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for line := range strings.Lines(string(src)) {
		if l, ok := strings.CutPrefix(line, "//\tchargectl "); ok {
			doc = append(doc, "chargectl "+strings.TrimSpace(l))
		}
	}
	var want []string
	for _, s := range synopses(usage) {
		if strings.HasPrefix(s, "chargectl admin COMMAND") {
			want = append(want, synopses(adminUsage)...)
			continue
		}
		want = append(want, s)
	}
	if !slices.Equal(doc, want) {
		t.Errorf("doc.go's usage:\n%s\nthe usage texts:\n%s", strings.Join(doc, "\n"), strings.Join(want, "\n"))
	}
}
