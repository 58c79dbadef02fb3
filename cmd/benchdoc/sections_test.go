package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

const benchOutput = `loadavg: 0.42 0.50 0.61
goos: linux
goarch: amd64
pkg: github.com/chargeonce/chargeonce/test/bench
cpu: AMD EPYC
=== RUN   TestRoundTrips
    roundtrip_test.go:160: 
        | outcome | answer |
--- PASS: TestRoundTrips (0.67s)
BenchmarkHandlerFirstCall-2   	     100	   8000000 ns/op	         2.000 ddb-calls/op	  119905 B/op	    1234 allocs/op
BenchmarkHandlerReplay-2      	     100	   2200000 ns/op	         1.000 ddb-calls/op	         2.100 p50-ms	         3.400 p99-ms	   64805 B/op	     712 allocs/op
BenchmarkNaiveFirstCall-2     	     100	   2000000 ns/op	         1.000 ddb-calls/op	   57472 B/op	     601 allocs/op
BenchmarkEmulatorPutItem/serial-2       	      10	   2000000 ns/op	       500.0 req/s	   50944 B/op	     426 allocs/op
BenchmarkHandlerFirstCall-2   	     100	   9000000 ns/op	         2.000 ddb-calls/op	  119905 B/op	    1234 allocs/op
BenchmarkHandlerReplay-2      	     100	   2400000 ns/op	         1.000 ddb-calls/op	         2.300 p50-ms	         3.800 p99-ms	   64805 B/op	     712 allocs/op
BenchmarkNaiveFirstCall-2     	     100	   2000000 ns/op	         1.000 ddb-calls/op	   57472 B/op	     601 allocs/op
BenchmarkEmulatorPutItem/serial-2       	      10	   2000000 ns/op	       500.0 req/s	   50944 B/op	     426 allocs/op
BenchmarkHandlerFirstCall-2   	     100	  10000000 ns/op	         2.000 ddb-calls/op	  119905 B/op	    1234 allocs/op
PASS
ok  	github.com/chargeonce/chargeonce/test/bench	2.418s
`

func TestBenchTable(t *testing.T) {
	results, conf, err := benchout.ParseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	table := benchTable(results, conf)
	for _, want := range []string{
		"Load average when the benchmarks started: 0.42 0.50 0.61. Medians of 3 runs",
		"| BenchmarkHandlerReplay | 2.30 ms | 2.20–2.40 ms | 2.20 / 3.60 ms | 1 |",
		"| BenchmarkNaiveFirstCall | 2.00 ms | 2.00–2.00 ms | – | 1 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("no %q in\n%s", want, table)
		}
	}
}

func TestRatios(t *testing.T) {
	results, _, err := benchout.ParseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ratios(results)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 9.00 ms | 2.00 ms | 4.50× |", "| 2.30 ms | 2.00 ms | 1.15× |", "took 2.00 ms", "costs 4.5 of them, the replay 1.1"} {
		if !strings.Contains(got, want) {
			t.Errorf("ratios lack %q:\n%s", want, got)
		}
	}
	if _, err := ratios(results[:1]); err == nil {
		t.Fatal("ratios without the naive benchmark")
	}
}

// TestRatiosOwnAllocs: with own-allocs/op in both first-call benchmarks,
// the ratios compare them too.
func TestRatiosOwnAllocs(t *testing.T) {
	out := `BenchmarkHandlerFirstCall-2   	     100	   8000000 ns/op	       130.0 own-allocs/op	    1177 allocs/op
BenchmarkHandlerReplay-2      	     100	   2200000 ns/op	     712 allocs/op
BenchmarkNaiveFirstCall-2     	     100	   2000000 ns/op	       100.0 own-allocs/op	     601 allocs/op
BenchmarkEmulatorPutItem/serial-2       	      10	   2000000 ns/op	     426 allocs/op
`
	results, _, err := benchout.ParseBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ratios(results)
	if err != nil {
		t.Fatal(err)
	}
	if want := "| 130 | 100 | 1.30× |"; !strings.Contains(got, want) {
		t.Errorf("ratios lack %q:\n%s", want, got)
	}
}

func TestFillSections(t *testing.T) {
	doc := "# T\n\nprose\n<!-- generated:a -->\nold a\n<!-- /generated:a -->\nmore\n<!-- generated:b -->\n<!-- /generated:b -->\nend\n"
	got, err := fill(doc, map[string]string{"a": "new a", "b": "new b\n\n"})
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\nprose\n<!-- generated:a -->\nnew a\n<!-- /generated:a -->\nmore\n<!-- generated:b -->\nnew b\n<!-- /generated:b -->\nend\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if again, _ := fill(got, map[string]string{"a": "new a", "b": "new b"}); again != got {
		t.Fatal("filling twice changed the document")
	}
	if _, err := fill(doc, map[string]string{"c": "x"}); err == nil {
		t.Fatal("a missing section was accepted")
	}
}

func TestOtherAnswers(t *testing.T) {
	got := otherAnswers(map[string]map[string]int{
		"first":      {"201": 10, "dropped": 3, "error: timeout": 1},
		"retry":      {"201 replayed": 2, "409": 1},
		"concurrent": {"201 replayed": 1, "201": 1},
	})
	want := "first dropped: 3; first error: timeout: 1; retry 409: 1; concurrent 201: 1"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if otherAnswers(map[string]map[string]int{"first": {"201": 1}}) != "none" {
		t.Fatal("only successes should read none")
	}
}

func TestColdStartTable(t *testing.T) {
	bin := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bin, "charge"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "charge", "bootstrap"), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	out := "=== RUN   TestFunctionsUnderTheRuntimeEmulator\n" +
		"    e2e_test.go:72: charge    bootstrap 9.8 MiB; REPORT Init Duration 0.41 ms; INIT REPORT 21.3 ms\n" +
		"    e2e_test.go:72: sweeper   bootstrap 9.1 MiB (9553 bytes); REPORT Init Duration 0.38 ms; INIT REPORT 5.143000 ms\n"
	got, err := coldStartTable(out, bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| charge | 3.0 MiB | 9.8 MiB | 0.41 ms | 21.3 ms |", "| sweeper | n/a | 9.1 MiB (9553 bytes) | 0.38 ms | 5.14 ms |"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if _, err := coldStartTable("PASS\n", bin); err == nil {
		t.Fatal("output without figures accepted")
	}
}

func TestAnchors(t *testing.T) {
	results, _, err := benchout.ParseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	steady := benchout.Summary{TargetRate: 10, Latency: map[string]benchout.Latency{"replay": {Count: 12, P50: 4.2, P99: 31}}}
	seeds := benchout.Summary{TargetRate: 2080, AchievedRate: 47.8, Dropped: 1540, Requests: 2100, MaxInFlight: 512}
	got, err := anchors(results, []benchout.Summary{seeds, steady})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2.30 ms on average, p99 3.60 ms", "at 10 req/s, p50 / p95 / p99: 4.20 / 0.00 / 31.0 ms (n=12)", "47.8 answered per second with 2080 offered (1540 of 2100", "takes 500 PutItem per second"} {
		if !strings.Contains(got, want) {
			t.Errorf("anchors lack %q:\n%s", want, got)
		}
	}
	if _, err := anchors(results, nil); err == nil {
		t.Fatal("no load runs accepted")
	}
}

func TestSideBySideTable(t *testing.T) {
	run := func(first, replay float64, calls string) string {
		r := fmt.Sprintf(`"first": {"p50_ms": %g, "p99_ms": %g}, "first_own_ms": %g, "first_calls": %s`, first, 2*first, first/4, calls)
		if replay > 0 {
			r += fmt.Sprintf(`, "replay": {"p50_ms": %g, "p99_ms": %g}, "replay_own_ms": %g, "replay_calls": {"PutItem": 1}`, replay, 2*replay, replay/2)
			r += fmt.Sprintf(`, "duplicate": {"latency": {"p50_ms": %g, "p99_ms": %g}, "answers": {"409": 10}}`, replay, 4*replay)
		}
		return r
	}
	ours, pt := `{"PutItem": 1, "TransactWriteItems": 1}`, `{"PutItem": 2, "UpdateItem": 1}`
	js := fmt.Sprintf(`{"n": 10, "loadavg_at_start": "1.00 2.00 3.00", "handlers": {
		"chargeonce": {"runs": {"serial": {"concurrency": 1, %s}, "concurrent": {"concurrency": 8, %s}}, "first_wcu": 5, "first_index_wcu": 2, "replay_wcu": 1},
		"powertools": {"runs": {"serial": {"concurrency": 1, %s}, "concurrent": {"concurrency": 8, %s}}, "first_wcu": 3, "replay_wcu": 1,
			"powertools_version": "3.37.0", "sdk_version": "1.43.108", "runtime_version": "3.11.7"},
		"powertools-ts": {"runs": {"serial": {"concurrency": 1, %s}, "concurrent": {"concurrency": 8, %s}}, "first_wcu": 3, "replay_wcu": 1,
			"powertools_version": "2.35.0", "sdk_version": "3.1178.0", "runtime_version": "v20.20.2"},
		"naive": {"runs": {"serial": {"concurrency": 1, %s}, "concurrent": {"concurrency": 8, %s}}, "first_wcu": 1}}}`,
		run(10, 2, ours), run(40, 8, ours), run(20, 8, pt), run(40, 16, pt), run(40, 4, pt), run(80, 16, pt),
		run(4, 0, `{"PutItem": 1}`), run(10, 0, `{"PutItem": 1}`))
	var f benchout.SideBySide
	if err := json.Unmarshal([]byte(js), &f); err != nil {
		t.Fatal(err)
	}
	got, err := sideBySideTable(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| chargeonce | 1 | 10.0 / 20.0 ms | 2.50 ms | 2.00 / 4.00 ms | 1.00 ms | 2.00 / 8.00 ms | 409 ×10 |",
		"| Powertools TypeScript `makeIdempotent` | 8 | 80.0 / 160 ms | 20.0 ms | 16.0 / 32.0 ms | 8.00 ms | 16.0 / 64.0 ms | 409 ×10 |",
		"| naive | 8 | 10.0 / 20.0 ms | 2.50 ms | – | – (a retry is another first call) | – | – |",
		"| chargeonce | 1 PutItem + 1 TransactWriteItems / 1 PutItem / – | 5 (+2 index) / 1 | – |",
		"| Powertools Python `@idempotent` | 2 PutItem + 1 UpdateItem / 1 PutItem / – | 3 / 1 | no atomic business write",
		"| chargeonce first call ÷ Powertools Python | 0.50× (0.50×) | 1.00× (1.00×) |",
		"| chargeonce replay ÷ Powertools TypeScript | 0.50× (0.50×) | 0.50× (0.50×) |",
		"| chargeonce concurrent duplicate ÷ Powertools Python | 0.25× (0.25×) | 0.50× (0.50×) |",
		"| chargeonce own time, first call ÷ Powertools TypeScript (means) | 0.25× | 0.50× |",
		"| chargeonce first call ÷ naive first call | 2.50× (2.50×) | 4.00× (4.00×) |",
		"| chargeonce replay ÷ naive first call (its retry) | 0.50× (0.50×) | 0.80× (0.80×) |",
		"Load average when the test started: 1.00 2.00 3.00.",
		"Powertools Python 3.37.0 (boto3 1.43.108, Python 3.11.7); Powertools TypeScript 2.35.0 (AWS SDK 3.1178.0, Node v20.20.2)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	delete(f.Handlers, "powertools-ts")
	if _, err := sideBySideTable(f); err == nil {
		t.Error("a missing handler passed")
	}
}

func TestGrowthSection(t *testing.T) {
	got, err := growthSection("growing stack=" + filepath.Join(testdata, "growth.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"**growing stack**, started 2026-12-03T16:00:00Z. Each step makes 1800 logical charges at 60 req/s, then leaves 20 commands to the reconciler.",
		"| 0 | growing | 1.10 1.20 1.30 | 8.00 / 40.0 ms | 1.00× / 1.00× | 1.00 / 4.00 ms | 1.00× / 1.00× | 500 / 1000 ms | 1.00× / 1.00× | ok |",
		"| 50000 | growing | 2.00 1.50 1.40 | 10.0 / 60.0 ms | 1.25× / 1.50× | 1.50 / 4.00 ms | 1.50× / 1.00× | 600 / 1000 ms | 1.20× / 1.00× | ok |",
		"| 50000 | reference | 2.10 1.50 1.40 | 8.00 / 30.0 ms | 1.00× / 0.75× | 1.00 / 8.00 ms | 1.00× / 2.00× | 500 / 800 ms | 1.00× / 0.80× | failed |",
		"| 50000 | 1.25× / 2.00× | 1.50× / 0.50× | 1.20× / 1.25× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	for _, bad := range []string{"no-equals-sign", "x=" + filepath.Join(testdata, "missing.json")} {
		if _, err := growthSection(bad); err == nil {
			t.Errorf("-growth %q passed", bad)
		}
	}
}

func TestSustainTable(t *testing.T) {
	s := benchout.Sustain{LoadAvg: "0.5 0.6 0.7", PutItemPerSecond: 600, CallsPerRequest: 2, Ceiling: 300, StepSeconds: 60,
		BeginMs: 2.5, CommitMs: 5, MixCeiling: 150, Sustained: 240, SustainedAnswered: 239.5, Steps: []benchout.Step{
			{Fraction: 1.6, Offered: 240, Answered: 239.5, OK: true},
			{Fraction: 1.8, Offered: 270, Answered: 200, Timeouts: 12},
		}}
	got := sustainTable(s)
	for _, want := range []string{
		"**300 req/s**: 600 PutItem/s",
		"**150 req/s**: the mix's own calls one at a time, a first charge's Begin (2.50 ms, BenchmarkBegin) and Commit (5.00 ms",
		"**240 req/s** offered (239.5 answered): **80%** of the ceiling, **160%** of the mix's ceiling",
		"| 270 req/s | 90% | 180% | n/a | 200.0 req/s | 0 | 12 | 0 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	s.Sustained = 0
	if got := sustainTable(s); !strings.Contains(got, "none of the rates tried") {
		t.Errorf("no rate sustained:\n%s", got)
	}
}

func TestIsolationTable(t *testing.T) {
	got, err := isolationSection(filepath.Join(testdata, "isolation.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"vegeta v12.13.0, 6 rounds of three 10 s phases: tenant B alone, beside tenant A at its limit, beside A at 10 times it.",
		"| B beside A at its limit | 10 req/s | 600 | 201 ×600 | 10.0 req/s | 10.0 / 15.1 / 24.0 ms (n=600) | 1.05× / 1.14× |  |",
		"| B beside A's flood | 10 req/s | 600 | 201 ×600 | 10.0 req/s | 10.4 / 16.0 / 25.2 ms (n=600) | **1.09× / 1.20×** | 1.04× / 1.05× |",
		"| A's flood | 100 req/s | 6000 | 201 ×660, 429 ×5340 | 11.0 req/s |",
		"| charges on the provider's ledger | 1260 | 1800 |",
		"| keys answered 429 that have a record | 0 | – |",
		"B's p99 round by round, alone / beside A at its limit / beside A's flood, in ms: 21.0 / 24.0 / 25.2; 19.5 / 22.1 / 23.0.",
		"Every check held: **yes**.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if _, err := isolationSection(filepath.Join(testdata, "missing.json")); err == nil {
		t.Error("a missing summary passed")
	}
}

var update = flag.Bool("update", false, "rewrite testdata/doc/benchmarks.golden.md")

// TestDocGolden fills testdata/doc/benchmarks.md from the make bench
// outputs beside it, as make bench's last step does, and holds the result
// to testdata/doc/benchmarks.golden.md byte for byte, so that a change of
// any section's format shows in the golden file's diff. The machine
// section describes the host the test runs on, so only its presence is
// checked. -update rewrites the golden file.
func TestDocGolden(t *testing.T) {
	fixtures := testInputs(t)
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(testdata, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	if err := os.WriteFile(doc, src, 0o644); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"-doc", doc, "-bench", fixtures.bench, "-roundtrips", fixtures.roundTrips, "-load", fixtures.loads,
		"-coldstart", fixtures.coldStart, "-bin", fixtures.bin, "-sidebyside", fixtures.sideBySide,
		"-sustain", fixtures.sustain, "-sustain-fakecloud", fixtures.sustainFakecloud, "-growth", fixtures.growth,
		"-isolation", fixtures.isolation})
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- generated:machine -->\n", "<!-- /generated:machine -->"
	i, j := strings.Index(string(out), begin), strings.Index(string(out), end)
	if i < 0 || j < i || !strings.Contains(string(out[i:j]), "| cores (nproc) |") {
		t.Fatalf("no machine section in\n%s", out)
	}
	got := string(out[:i+len(begin)]) + "(the host the test ran on)\n" + string(out[j:])
	golden := filepath.Join(testdata, "benchmarks.golden.md")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the generated document differs from %s (go test -run TestDocGolden -update rewrites it):\n%s", golden, got)
	}
}

// TestBenchmarksDocTakesEverySection fills docs/benchmarks.md, in memory,
// with every section the fixtures give: a section marker lost from the
// document fails here rather than at the end of a make bench.
func TestBenchmarksDocTakesEverySection(t *testing.T) {
	sections, err := testInputs(t).sections()
	if err != nil {
		t.Fatal(err)
	}
	if len(sections) != 12 {
		t.Fatalf("%d sections from the fixtures, want all 12", len(sections))
	}
	doc, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fill(string(doc), sections); err != nil {
		t.Error(err)
	}
}

// testdata holds an input of every kind make bench gives benchdoc, a
// document with every section, and what benchdoc makes of them.
const testdata = "testdata/doc"

// testInputs are the inputs in testdata, with make build's bootstraps as
// sparse files of their sizes (intake has none).
func testInputs(t *testing.T) inputs {
	t.Helper()
	bin := t.TempDir()
	for fn, size := range map[string]int64{"charge": 21390950, "sweeper": 19818086} {
		if err := os.MkdirAll(filepath.Join(bin, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(bin, fn, "bootstrap"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	in := func(name string) string { return filepath.Join(testdata, name) }
	return inputs{
		bench: in("bench.txt"), roundTrips: in("roundtrips.md"), loads: in("load-steady.json") + "," + in("load-seeds.json"),
		coldStart: in("e2e.txt"), bin: bin, sideBySide: in("sidebyside.json"),
		sustain: in("sustain.json"), sustainFakecloud: in("sustain-fakecloud.json"),
		growth: "growing stack=" + in("growth.json"), isolation: in("isolation.json"),
	}
}
