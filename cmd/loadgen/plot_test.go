package main

import (
	"testing"
	"time"
)

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ top, step, max float64 }{
		{7.3, 1, 8}, {42, 10, 50}, {130, 20, 140}, {0.35, 0.05, 0.35}, {0, 1, 1},
	} {
		step, top := niceScale(tc.top)
		if !near(step, tc.step) || !near(top, tc.max) {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.top, step, top, tc.step, tc.max)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestPlotDrawsEverySeries(t *testing.T) {
	fast, slow := make([]time.Duration, 1000), make([]time.Duration, 1000)
	for i := range fast {
		fast[i] = time.Duration(i) * time.Microsecond
		slow[i] = time.Duration(i) * 20 * time.Microsecond
	}
	ss := []series{{name: "fast", color: rgb(255, 0, 0), sorted: fast}, {name: "slow", color: rgb(0, 0, 255), sorted: slow}, {name: "none", color: rgb(0, 255, 0)}}
	img := plotPercentiles("title", ss)
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() != plotH {
		t.Fatalf("size %v", b)
	}
	count := map[[3]uint8]int{}
	for i := 0; i < len(img.Pix); i += 4 {
		count[[3]uint8{img.Pix[i], img.Pix[i+1], img.Pix[i+2]}]++
	}
	// A line spans the plot's width, three pixels thick; a legend box is
	// about a hundred pixels; an empty series draws nothing.
	if count[[3]uint8{255, 0, 0}] < plotW || count[[3]uint8{0, 0, 255}] < plotW {
		t.Fatalf("series pixels: red %d, blue %d", count[[3]uint8{255, 0, 0}], count[[3]uint8{0, 0, 255}])
	}
	if count[[3]uint8{0, 255, 0}] != 0 {
		t.Fatalf("the empty series drew %d pixels", count[[3]uint8{0, 255, 0}])
	}
}
