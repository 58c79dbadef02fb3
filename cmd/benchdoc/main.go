// Command benchdoc rewrites the generated sections of docs/benchmarks.md
// from the outputs of make bench, which runs it last:
//
//	go run ./cmd/benchdoc -doc docs/benchmarks.md -bench out/bench.txt \
//	    -roundtrips out/roundtrips.md -load out/load-steady.json,out/load-seeds.json \
//	    -coldstart out/e2e.txt -bin bin -sidebyside out/sidebyside.json \
//	    -sustain out/sustain.json [-sustain-fakecloud out/sustain-fakecloud.json] \
//	    [-growth "NAME=out/growth.json,..."] [-isolation docs/isolation.json]
//
// A section is the text between "<!-- generated:NAME -->" and "<!--
// /generated:NAME -->". Everything else in the document is kept. The
// sections are machine, roundtrips, benchmarks, ratios, load, anchors and
// coldstart. Options add powertools (-sidebyside), sustain (-sustain) and
// sustain-fakecloud (-sustain-fakecloud). They also add growth (-growth)
// and isolation (-isolation).
//
// It measures nothing. The figures are test/bench's, test/e2e's and
// loadgen's. The machine section describes the host it runs on. Give -bench
// "" -roundtrips "" -load "" to refresh the optional sections alone, as
// make isolation does.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchdoc:", err)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("benchdoc", flag.ContinueOnError)
	doc := fs.String("doc", "docs/benchmarks.md", "the document to update")
	var in inputs
	fs.StringVar(&in.bench, "bench", "out/bench.txt", "go test -bench output (with a loadavg: line)")
	fs.StringVar(&in.roundTrips, "roundtrips", "out/roundtrips.md", "TestRoundTrips' table")
	fs.StringVar(&in.loads, "load", "out/load.json", "comma-separated loadgen summaries")
	fs.StringVar(&in.coldStart, "coldstart", "", "go test -v output of the e2e test, for the cold-start figures (optional)")
	fs.StringVar(&in.bin, "bin", "bin", "where make build wrote <function>/bootstrap")
	fs.StringVar(&in.sideBySide, "sidebyside", "", "TestSideBySide's figures, for the comparison with Powertools (optional)")
	fs.StringVar(&in.sustain, "sustain", "", "loadgen sustain's summary, for the ceiling and the sustained rate (optional)")
	fs.StringVar(&in.sustainFakecloud, "sustain-fakecloud", "", "the same for a stack on fakecloud (optional)")
	fs.StringVar(&in.growth, "growth", "", "loadgen growth's summaries as NAME=PATH,..., for the table-size section (optional)")
	fs.StringVar(&in.isolation, "isolation", "", "loadgen isolation's summary, for the section on one tenant's flood beside another (optional)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	sections, err := in.sections()
	if err != nil {
		return err
	}
	text, err := os.ReadFile(*doc)
	if err != nil {
		return err
	}
	out, err := fill(string(text), sections)
	if err != nil {
		return fmt.Errorf("%s: %w", *doc, err)
	}
	return os.WriteFile(*doc, []byte(out), 0o644)
}
