// Command capacity regenerates docs/capacity.md, a capacity model of the
// seeds' load on AWS. It draws on figures make bench measured. It also
// cites figures from AWS documentation and pricing pages:
//
//	go run ./cmd/capacity -roundtrips out/roundtrips.json -bench out/bench.txt
//	go run ./cmd/capacity
//
// With -roundtrips and -bench (make bench), it first updates the measured
// snapshot (docs/capacity-measured.json). It takes what the model needs
// from those make bench outputs. Without them (make capacity), it renders
// from the snapshot as committed. A change of inputs, prices or
// template.yaml needs only that. With -roundtrips alone, it takes the round
// trips again (TestRoundTrips' JSON). It keeps the snapshot's benchmarks: a
// new outcome needs no new make bench. The cited figures are in
// docs/capacity-inputs.json, each with its source. The deployment's own
// figures (memory, timeouts, schedule) are read from template.yaml.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "capacity:", err)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	roundTrips := fs.String("roundtrips", "", "TestRoundTrips' JSON figures (make bench: out/roundtrips.json)")
	bench := fs.String("bench", "", "go test -bench output (make bench: out/bench.txt)")
	measured := fs.String("measured", "docs/capacity-measured.json", "the measured snapshot: written from -roundtrips and -bench when given, read otherwise")
	inputs := fs.String("inputs", "docs/capacity-inputs.json", "the cited inputs")
	tmpl := fs.String("template", "template.yaml", "the SAM template")
	doc := fs.String("doc", "docs/capacity.md", "the document to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *roundTrips == "" && *bench != "" {
		return errors.New("-bench needs -roundtrips")
	}
	if *roundTrips != "" {
		m, err := measureRoundTrips(*measured, *roundTrips, time.Now())
		if *bench != "" {
			m, err = measure(*roundTrips, *bench, time.Now())
		}
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*measured, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	text, err := capacityDoc(*measured, *inputs, *tmpl)
	if err != nil {
		return err
	}
	return os.WriteFile(*doc, []byte(text), 0o644)
}
