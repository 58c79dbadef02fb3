package main

import (
	"math"
	"slices"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

// summarize returns the nearest-rank percentiles of ds, which it sorts.
func summarize(ds []time.Duration) benchout.Latency {
	if len(ds) == 0 {
		return benchout.Latency{}
	}
	slices.Sort(ds)
	return benchout.Latency{
		Count: len(ds),
		P50:   ms(percentile(ds, 50)),
		P95:   ms(percentile(ds, 95)),
		P99:   ms(percentile(ds, 99)),
		Max:   ms(ds[len(ds)-1]),
	}
}

// percentile is the nearest-rank p-th percentile of sorted, non-empty ds.
// That is the smallest value at least p% of the values are no greater than.
func percentile(ds []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
