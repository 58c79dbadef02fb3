package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestParseBench(t *testing.T) {
	results, conf, err := parseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	if conf["loadavg"] != "0.42 0.50 0.61" || conf["cpu"] != "AMD EPYC" {
		t.Fatalf("configuration %v", conf)
	}
	var names []string
	for _, r := range results {
		names = append(names, r.name)
	}
	if got := strings.Join(names, ","); got != "BenchmarkHandlerFirstCall,BenchmarkHandlerReplay,BenchmarkNaiveFirstCall,BenchmarkEmulatorPutItem/serial" {
		t.Fatalf("benchmarks %s", got)
	}
	if m, _ := results[0].median("ns/op"); m != 9e6 || len(results[0].values["ns/op"]) != 3 {
		t.Fatalf("first call ns/op %v, median %v", results[0].values["ns/op"], m)
	}
	if m, _ := results[1].median("ns/op"); m != 2.3e6 {
		t.Fatalf("replay median %v, want the mean of the middle two", m)
	}
	if table := benchTable(results, conf); !strings.Contains(table, "| BenchmarkHandlerReplay | 2.30 ms | 2.20–2.40 ms | 2.20 / 3.60 ms | 1 |") || !strings.Contains(table, "| BenchmarkNaiveFirstCall | 2.00 ms | 2.00–2.00 ms | – | 1 |") {
		t.Fatalf("table:\n%s", table)
	}
	if _, _, err := parseBench(strings.NewReader("PASS\n")); err == nil {
		t.Fatal("no results accepted")
	}
}

func TestRatios(t *testing.T) {
	results, _, err := parseBench(strings.NewReader(benchOutput))
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
	results, _, err := parseBench(strings.NewReader(out))
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
	results, _, err := parseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	steady := Summary{TargetRate: 10, Latency: map[string]Latency{"replay": {Count: 12, P50: 4.2, P99: 31}}}
	seeds := Summary{TargetRate: 2080, AchievedRate: 47.8, Dropped: 1540, Requests: 2100, MaxInFlight: 512}
	got, err := anchors(results, []Summary{seeds, steady})
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
