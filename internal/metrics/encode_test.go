package metrics

import (
	"encoding/json"
	"math"
	"testing"
)

// The EMF lines are written by hand (appendString, appendFloat) to spare
// an invocation encoding/json's allocations; CloudWatch reads them as
// JSON, so each must write what encoding/json writes. make fuzz runs both
// targets beyond their seeds.

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "charge", "created", "req-0f3a", `a"b`, `a\b`, "<&>", "<b>", "a>b", "tab\there", "\x00\x1f\x7f", "é", "\u2028", "\xff\xfe", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s; encoding/json writes %s", s, got[1:], want)
		}
	})
}

func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, -1e21, 123456789012, 1.5e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, 2.5e-10} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Skip("EMF values are finite; encoding/json refuses these")
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat([]byte("x"), v); string(got) != "x"+string(want) {
			t.Errorf("appendFloat(%v) = %s; encoding/json writes %s", v, got[1:], want)
		}
	})
}
