package main

import (
	"math"
	"testing"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

func TestCallsPerRequestOfTheSeedsMix(t *testing.T) {
	w := workload{RetryOnce: 0.03, RetryTwice: 0.005, Concurrent: 0.01}
	// 2 calls a first attempt, 1 a retry or twin: (2 + 0.04 + 0.01) / 1.05.
	if got := callsPerRequest(w); math.Abs(got-2.05/1.05) > 1e-9 {
		t.Fatalf("calls per request %v", got)
	}
	if got := requestsPerCharge(w); math.Abs(got-1.05) > 1e-9 {
		t.Fatalf("requests per charge %v", got)
	}
}

func TestMixCeilingOfTheSeedsMix(t *testing.T) {
	w := workload{RetryOnce: 0.03, RetryTwice: 0.005, Concurrent: 0.01}
	// 1.05 requests a charge cost 2 + 6 ms, and 0.05 more Begins at 2 ms.
	if got, want := mixCeiling(w, 2, 6), 1e3*1.05/(8+0.05*2); math.Abs(got-want) > 1e-9 {
		t.Fatalf("mix ceiling %v, want %v", got, want)
	}
}

func TestStepPassesOnlyWhenItKeepsUpCleanly(t *testing.T) {
	clean := benchout.Summary{TargetRate: 100, AchievedRate: 99, Answers: map[string]map[string]int{
		"first": {"201": 5000}, "retry": {"201 replayed": 200, "409": 3}, "concurrent": {"409": 50},
	}}
	if st := stepOf(clean, 0.5); !st.OK || st.Timeouts != 0 || st.OtherFailures != 0 {
		t.Fatalf("clean step %+v", st)
	}
	for name, mutate := range map[string]func(*benchout.Summary){
		"behind":     func(s *benchout.Summary) { s.AchievedRate = 90 },
		"dropped":    func(s *benchout.Summary) { s.Dropped = 1 },
		"timeout":    func(s *benchout.Summary) { s.Answers["first"]["500"] = 1 },
		"client":     func(s *benchout.Summary) { s.Answers["retry"]["error: timeout"] = 1 },
		"503":        func(s *benchout.Summary) { s.Answers["first"]["503"] = 1 },
		"transport":  func(s *benchout.Summary) { s.Answers["first"]["error: transport"] = 1 },
		"duplicate":  func(s *benchout.Summary) { s.Check.Duplicates = 1 },
		"missing":    func(s *benchout.Summary) { s.Check.Missing = 1 },
		"late":       func(s *benchout.Summary) { s.MissingAtSettle = 1 },
		"stray rows": func(s *benchout.Summary) { s.Check.Stray = 1 },
	} {
		s := clean
		s.Answers = map[string]map[string]int{}
		for k, v := range clean.Answers {
			s.Answers[k] = map[string]int{}
			for a, n := range v {
				s.Answers[k][a] = n
			}
		}
		mutate(&s)
		if st := stepOf(s, 0.5); st.OK {
			t.Errorf("%s: step passed: %+v", name, st)
		}
	}
	st := stepOf(benchout.Summary{TargetRate: 10, AchievedRate: 10, Answers: map[string]map[string]int{"first": {"500": 2, "error: timeout": 1, "503": 4}}}, 1)
	if st.Timeouts != 3 || st.OtherFailures != 4 {
		t.Fatalf("timeouts %d, other failures %d", st.Timeouts, st.OtherFailures)
	}
}

func TestParseSustainFlags(t *testing.T) {
	c, err := parseSustainFlags([]string{"-from", "0.5", "-duration", "10s"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.from != 0.5 || c.step != 0.1 || c.to != 1.5 || c.bisect != 1 || c.duration.Seconds() != 10 || c.cooldown.Seconds() != 30 || c.out != "out/sustain" || c.settle.Seconds() != 30 {
		t.Fatalf("config %+v", c)
	}
	for _, args := range [][]string{{"-from", "0"}, {"-from", "0.8", "-to", "0.5"}, {"-step", "0"}, {"-bisect", "-1"}, {"-cooldown", "-1s"}, {"-target", "http://10.0.0.1"}} {
		if _, err := parseSustainFlags(args, func(string) string { return "" }); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
