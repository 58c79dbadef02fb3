package main

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

func TestSummarizeNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	want := benchout.Latency{Count: 100, P50: 50, P95: 95, P99: 99, Max: 100}
	if got != want {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if one := summarize([]time.Duration{1500 * time.Microsecond}); one.P50 != 1.5 || one.P99 != 1.5 {
		t.Fatalf("one value: %+v", one)
	}
	if (summarize(nil) != benchout.Latency{}) {
		t.Fatal("no values should summarise to zero")
	}
}
