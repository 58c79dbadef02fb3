package main

import (
	"math"
	"slices"
	"time"
)

// Latency summarises a group of latencies, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// summarize returns the nearest-rank percentiles of ds, which it sorts.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{
		Count: len(ds),
		P50:   ms(percentile(ds, 50)),
		P95:   ms(percentile(ds, 95)),
		P99:   ms(percentile(ds, 99)),
		Max:   ms(ds[len(ds)-1]),
	}
}

// percentile is the nearest-rank p-th percentile of sorted, non-empty ds:
// the smallest value at least p% of the values are no greater than.
func percentile(ds []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
