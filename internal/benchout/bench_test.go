package benchout

import (
	"strings"
	"testing"
)

const benchOutput = `loadavg: 0.42 0.50 0.61
goos: linux
pkg: github.com/chargeonce/chargeonce/test/bench
cpu: AMD EPYC
=== RUN   TestRoundTrips
    roundtrip_test.go:160: 
        | outcome | answer |
--- PASS: TestRoundTrips (0.67s)
BenchmarkHandlerFirstCall-2   	     100	   8000000 ns/op	         2.000 ddb-calls/op
BenchmarkHandlerReplay-2      	     100	   2200000 ns/op	         2.100 p50-ms
BenchmarkEmulatorPutItem/serial-2       	      10	   2000000 ns/op	       500.0 req/s
BenchmarkHandlerFirstCall-2   	     100	   9000000 ns/op	         2.000 ddb-calls/op
BenchmarkHandlerReplay-2      	     100	   2400000 ns/op	         2.300 p50-ms
BenchmarkHandlerFirstCall-2   	     100	  10000000 ns/op	         2.000 ddb-calls/op
PASS
ok  	github.com/chargeonce/chargeonce/test/bench	2.418s
`

func TestParseBench(t *testing.T) {
	results, conf, err := ParseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	if conf["loadavg"] != "0.42 0.50 0.61" || conf["cpu"] != "AMD EPYC" {
		t.Fatalf("configuration %v", conf)
	}
	var names []string
	for _, r := range results {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "BenchmarkHandlerFirstCall,BenchmarkHandlerReplay,BenchmarkEmulatorPutItem/serial" {
		t.Fatalf("benchmarks %s", got)
	}
	if m, _ := results[0].Median("ns/op"); m != 9e6 || len(results[0].Values["ns/op"]) != 3 {
		t.Fatalf("first call ns/op %v, median %v", results[0].Values["ns/op"], m)
	}
	if m, _ := results[1].Median("ns/op"); m != 2.3e6 {
		t.Fatalf("replay median %v, want the mean of the middle two", m)
	}
	if _, ok := results[2].Median("p50-ms"); ok {
		t.Fatal("a median of a unit the benchmark does not report")
	}
	if v, err := NsPerOp(results, "BenchmarkEmulatorPutItem/serial"); err != nil || v != 2e6 {
		t.Fatalf("NsPerOp: %v, %v", v, err)
	}
	if _, err := NsPerOp(results, "BenchmarkBegin"); err == nil {
		t.Fatal("NsPerOp of a benchmark not run")
	}
	if v, ok := Value(results, "BenchmarkHandlerReplay", "p50-ms"); !ok || v != 2.2 {
		t.Fatalf("Value: %v, %v", v, ok)
	}
	if _, _, err := ParseBench(strings.NewReader("PASS\n")); err == nil {
		t.Fatal("no results accepted")
	}
	if _, _, err := ParseBench(strings.NewReader("BenchmarkX-2 10 5 ns/op 3\n")); err == nil {
		t.Fatal("a result with an odd field accepted")
	}
}
