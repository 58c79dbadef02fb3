package docs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from this package's directory.
const root = "../.."

// documents lists the checked files, relative to the repository.
func documents(t *testing.T) []string {
	t.Helper()
	var docs []string
	for _, pattern := range []string{"docs/*.md", "pkg/idem/docs/*.md"} {
		found, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, found...)
	}
	files := []string{"README.md", "pkg/idem/README.md", "pkg/idem/CHANGELOG.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files)
	return files
}

// A markdown document as far as links go: its links and its headings' anchors.
type document struct {
	links   []link
	anchors map[string]bool
}

type link struct {
	line   int
	target string
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// What a heading's text loses before it becomes an anchor: markdown
	// link targets and emphasis (the link text stays).
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

func parse(text string) document {
	d := document{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case m[1] == inFence:
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			slug := slugify(m[2])
			if n := seen[slug]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
		plain := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{i + 1, m[1]})
		}
		if m := refDef.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, link{i + 1, m[1]})
		}
	}
	return d
}

// slugify is GitHub's anchor for a heading: the text as rendered, lower
// case, without punctuation other than '-' and '_', spaces as '-'.
func slugify(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func external(target string) bool {
	if strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "//") {
		return true
	}
	scheme, _, ok := strings.Cut(target, ":")
	return ok && !strings.ContainsAny(scheme, "/#.")
}

func read(t *testing.T, rel string) document {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return parse(string(b))
}

// resolve is a relative link's file (repository-relative) and anchor; ""
// for the file when the link is to an anchor of its own document.
func resolve(from, target string) (file, anchor string) {
	file, anchor, _ = strings.Cut(target, "#")
	if file == "" {
		return from, anchor
	}
	if strings.HasPrefix(file, "/") {
		return path.Clean(strings.TrimPrefix(file, "/")), anchor
	}
	return path.Join(path.Dir(from), file), anchor
}

// TestLinksResolve checks every relative link and anchor of the documents.
func TestLinksResolve(t *testing.T) {
	parsed := map[string]document{}
	get := func(rel string) document {
		if d, ok := parsed[rel]; ok {
			return d
		}
		d := read(t, rel)
		parsed[rel] = d
		return d
	}
	for _, doc := range documents(t) {
		for _, l := range get(doc).links {
			if external(l.target) {
				continue
			}
			file, anchor := resolve(doc, l.target)
			if file == ".." || strings.HasPrefix(file, "../") {
				t.Errorf("%s:%d: %s leaves the repository", doc, l.line, l.target)
				continue
			}
			if strings.HasPrefix(doc, "pkg/idem/") && !strings.HasPrefix(file, "pkg/idem/") {
				t.Errorf("%s:%d: %s leaves the pkg/idem module, which a user may hold alone", doc, l.line, l.target)
				continue
			}
			info, err := os.Stat(filepath.Join(root, filepath.FromSlash(file)))
			if err != nil {
				t.Errorf("%s:%d: %s: no file %s", doc, l.line, l.target, file)
				continue
			}
			if anchor == "" {
				continue
			}
			if info.IsDir() || !strings.HasSuffix(file, ".md") {
				t.Errorf("%s:%d: %s: an anchor into %s, which is not a Markdown file", doc, l.line, l.target, file)
				continue
			}
			if !get(file).anchors[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading #%s", doc, l.line, l.target, file, anchor)
			}
		}
	}
}

// TestDocumentsReachable checks that README.md's links lead, directly or
// through other documents, to every document checked here.
func TestDocumentsReachable(t *testing.T) {
	reached := map[string]bool{"README.md": true}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		doc := queue[0]
		queue = queue[1:]
		for _, l := range read(t, doc).links {
			if external(l.target) {
				continue
			}
			file, _ := resolve(doc, l.target)
			if !strings.HasSuffix(file, ".md") || reached[file] {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
				continue // TestLinksResolve reports it
			}
			reached[file] = true
			queue = append(queue, file)
		}
	}
	for _, doc := range documents(t) {
		if !reached[doc] {
			t.Errorf("%s: no chain of links from README.md reaches it", doc)
		}
	}
}

// TestParse holds the parser to what GitHub renders, on the cases the
// documents use.
func TestParse(t *testing.T) {
	d := parse("# chargeonce\n\n## Stuck leases: the sweeper and the reconciler\n\n### `pkg/idem` compared with Powertools\n\n## Webhooks\n\n## Webhooks\n\n" +
		"see [a](docs/a.md#x) and ![img](b.png), not `[c](c.md)`\n\n```sh\n# not a heading\n[d](d.md)\n```\n\n[e]: e.md\n<a name=\"f\"></a>\n")
	for _, a := range []string{"chargeonce", "stuck-leases-the-sweeper-and-the-reconciler", "pkgidem-compared-with-powertools", "webhooks", "webhooks-1", "f"} {
		if !d.anchors[a] {
			t.Errorf("no anchor %q in %v", a, d.anchors)
		}
	}
	if d.anchors["not-a-heading"] {
		t.Errorf("a comment in a code block became a heading")
	}
	var targets []string
	for _, l := range d.links {
		targets = append(targets, l.target)
	}
	if want := []string{"docs/a.md#x", "b.png", "e.md"}; !slices.Equal(targets, want) {
		t.Errorf("links %q, want %q", targets, want)
	}
	for target, want := range map[string]bool{"https://x.dev/a": true, "mailto:a@b": true, "docs/a.md": false, "#x": false, "../a.md": false} {
		if external(target) != want {
			t.Errorf("external(%q) = %v", target, !want)
		}
	}
}
