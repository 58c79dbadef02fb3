package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// The DynamoDB calls one request of the seeds' mix makes on the request
// path, as TestRoundTrips asserts them. A first charge makes two (PutItem +
// TransactWriteItems), and a replay one. A concurrent twin makes one when
// its first attempt is still in flight: the 409, or a replay once it is
// done.
const (
	callsFirst = 2
	callsRetry = 1
	callsTwin  = 1
)

// keepUp is the least share of the offered rate a passing step answers.
// Answers that fall ever further behind have not reached the function's
// timeout yet, but would.
const keepUp = 0.95

// sustainConfig is a sustain run's configuration: the load flags, and the
// steps.
type sustainConfig struct {
	loadConfig
	bench          string
	from, step, to float64 // fractions of the mix's ceiling
	duration       time.Duration
	cooldown       time.Duration
	bisect         int
}

// sustainMain finds the highest offered rate the local stack sustains:
//
//	loadgen sustain -bench out/bench.txt [-from 0.4] [-step 0.1] [-to 1]
//	        [-bisect 1] [-cooldown 30s] [-duration 60s] [-settle 30s]
//	        [-drain 5m] [load flags] [-out out/sustain]
//
// The ceiling is the emulator's PutItem per second divided by the DynamoDB
// calls one request of the mix makes. The PutItem figure is the median of
// BenchmarkEmulatorPutItem/serial in -bench. The mix's ceiling is what the
// emulator takes of the mix's own calls, one at a time. A first charge
// makes a Begin and a Commit (BenchmarkBegin, BenchmarkCommit). A retry or
// twin makes one conditional PutItem (a Begin that loses). These are
// averaged over the mix's requests (see mixCeiling).
//
// It runs the seeds' mix for -duration at -from times the mix's ceiling.
// Then each step adds -step more, up to -to. It stops at the first step that
// fails. A step passes when the stack answered at least 95% of the offered
// rate over the step. Answering ever later is not sustaining it. No request
// may be dropped at the in-flight cap. None may time out or get another
// 5xx or transport error. The check must find no duplicate. It must find
// no missing charge -settle after the step. A charge still missing then is
// waited for up to -drain more. A stack that fell behind resolves it late.
// Only a charge still missing after that is lost.
//
// After a failed step it tries -bisect more rates, after a -cooldown pause
// each. Each lies halfway between the highest passing rate and the lowest
// failing one. It writes OUT.json (see benchout.Sustain), and each step's
// own summary as OUT-<offered>.json. Like a load run, it exits 1 if a step
// found a duplicate or a lost charge.
func sustainMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseSustainFlags(args, getenv)
	if err != nil {
		return err
	}
	results, _, err := benchout.ReadBench(c.bench)
	if err != nil {
		return err
	}
	var ns [3]float64
	for i, name := range []string{"BenchmarkEmulatorPutItem/serial", "BenchmarkBegin", "BenchmarkCommit"} {
		if ns[i], err = benchout.NsPerOp(results, name); err != nil {
			return fmt.Errorf("%s: %w", c.bench, err)
		}
	}
	put, begin, commit := ns[0], ns[1], ns[2]
	hc := c.client()
	if err := reachable(ctx, hc, c.target); err != nil {
		return err
	}
	out := benchout.Sustain{
		Started: time.Now().UTC().Format(time.RFC3339), LoadAvg: testkit.LoadAvg(),
		PutItemPerSecond: 1e9 / put, CallsPerRequest: callsPerRequest(c.workload), StepSeconds: c.duration.Seconds(),
		BeginMs: begin / 1e6, CommitMs: commit / 1e6,
	}
	out.Ceiling = out.PutItemPerSecond / out.CallsPerRequest
	out.MixCeiling = mixCeiling(c.workload, out.BeginMs, out.CommitMs)
	fmt.Fprintf(stderr, "loadgen sustain: ceiling %.0f req/s (%.0f PutItem/s ÷ %.2f calls per request), the mix's ceiling %.0f req/s (Begin %.2f ms, Commit %.2f ms)\n",
		out.Ceiling, out.PutItemPerSecond, out.CallsPerRequest, out.MixCeiling, out.BeginMs, out.CommitMs)

	try := func(fraction float64) (benchout.Step, error) {
		step := c.loadConfig
		step.Rate = fraction * out.MixCeiling
		step.Ops = max(1, int(math.Round(step.Rate*c.duration.Seconds()/requestsPerCharge(c.workload))))
		step.tenant = fmt.Sprintf("%s-%d", c.tenant, len(out.Steps)+1)
		step.out = fmt.Sprintf("%s-%.0f", c.out, step.Rate)
		s, err := runLoad(ctx, step, hc, stderr)
		if err != nil {
			return benchout.Step{}, err
		}
		st := stepOf(s, fraction)
		out.Steps = append(out.Steps, st)
		fmt.Fprintf(stdout, "%4.0f%% of the mix's ceiling: %.0f req/s offered, %.1f answered; %d dropped, %d timed out, %d other failures, %d duplicates, %d missing after the settle and %d after the drain: %s\n",
			100*fraction, st.Offered, st.Answered, st.Dropped, st.Timeouts, st.OtherFailures, st.Duplicates, st.MissingAtSettle, st.Missing, verdict(st))
		return st, nil
	}
	pass, fail := 0.0, 0.0
	for fraction := c.from; fraction <= c.to+1e-9; fraction += c.step {
		st, err := try(fraction)
		if err != nil {
			return err
		}
		if !st.OK {
			fail = fraction
			break
		}
		pass = fraction
	}
	for range c.bisect {
		if fail == 0 {
			break
		}
		// A failed step leaves work behind (commands to reconcile). Let
		// the stack drain it before the next.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.cooldown):
		}
		mid := (pass + fail) / 2
		st, err := try(mid)
		if err != nil {
			return err
		}
		if st.OK {
			pass = mid
		} else {
			fail = mid
		}
	}
	for _, st := range out.Steps {
		if st.OK && st.Offered > out.Sustained {
			out.Sustained, out.SustainedAnswered = st.Offered, st.Answered
		}
	}
	fmt.Fprintf(stdout, "sustained: %.0f req/s offered (%.1f answered), %.0f%% of the ceiling of %.0f req/s, %.0f%% of the mix's ceiling of %.0f req/s\n",
		out.Sustained, out.SustainedAnswered, 100*out.Sustained/out.Ceiling, out.Ceiling, 100*out.Sustained/out.MixCeiling, out.MixCeiling)
	if err := writeJSON(c.out, out); err != nil {
		return err
	}
	for _, st := range out.Steps {
		if st.Duplicates > 0 || st.Missing > 0 || st.Stray > 0 {
			return fmt.Errorf("at %.0f req/s: %d duplicates, %d missing, %d stray rows", st.Offered, st.Duplicates, st.Missing, st.Stray)
		}
	}
	return nil
}

func parseSustainFlags(args []string, getenv func(string) string) (sustainConfig, error) {
	fs := flag.NewFlagSet("loadgen sustain", flag.ContinueOnError)
	lc := loadFlags(fs, getenv)
	c := sustainConfig{}
	fs.StringVar(&c.bench, "bench", "out/bench.txt", "go test -bench output holding BenchmarkEmulatorPutItem/serial")
	fs.Float64Var(&c.from, "from", 0.5, "first offered rate, as a fraction of the mix's ceiling")
	fs.Float64Var(&c.step, "step", 0.1, "step of the offered rate, as a fraction of the mix's ceiling")
	fs.Float64Var(&c.to, "to", 1.5, "last offered rate, as a fraction of the mix's ceiling")
	fs.IntVar(&c.bisect, "bisect", 1, "rates tried between the highest passing and the lowest failing step")
	fs.DurationVar(&c.duration, "duration", time.Minute, "how long each step sends")
	fs.DurationVar(&c.cooldown, "cooldown", 30*time.Second, "pause after a failed step, for the stack to drain what it left")
	if err := fs.Set("out", "out/sustain"); err != nil {
		return sustainConfig{}, err
	}
	if err := fs.Set("settle", "30s"); err != nil {
		return sustainConfig{}, err
	}
	if err := fs.Set("drain", "5m"); err != nil {
		return sustainConfig{}, err
	}
	if err := fs.Parse(args); err != nil {
		return sustainConfig{}, err
	}
	var err error
	if c.loadConfig, err = lc.finish(fs); err != nil {
		return sustainConfig{}, err
	}
	if !(c.from > 0) || !(c.step > 0) || c.to < c.from || c.bisect < 0 || c.duration <= 0 || c.cooldown < 0 {
		return sustainConfig{}, errors.New("want 0 < -from <= -to, -step and -duration positive, -bisect and -cooldown not negative")
	}
	return c, nil
}

// requestsPerCharge is how many requests the mix sends per logical charge.
func requestsPerCharge(w workload) float64 {
	return 1 + w.RetryOnce + 2*w.RetryTwice + w.Concurrent
}

// callsPerRequest is the DynamoDB calls one request of the mix makes, on
// average.
func callsPerRequest(w workload) float64 {
	calls := callsFirst + callsRetry*(w.RetryOnce+2*w.RetryTwice) + callsTwin*w.Concurrent
	return calls / requestsPerCharge(w)
}

// mixCeiling is the requests per second the emulator takes of the mix's
// own calls, one at a time. It starts from the milliseconds a Begin and a
// Commit take. A first charge makes one of each. A retry or a twin makes
// one conditional PutItem, which costs what a Begin does. Each figure is
// measured one call at a time, so it also holds the client's side of the
// call. So it is a lower bound of what the emulator alone could take.
func mixCeiling(w workload, beginMs, commitMs float64) float64 {
	perCharge := beginMs + commitMs + beginMs*(w.RetryOnce+2*w.RetryTwice+w.Concurrent)
	return 1e3 * requestsPerCharge(w) / perCharge
}

func stepOf(s benchout.Summary, fraction float64) benchout.Step {
	st := benchout.Step{
		Fraction: fraction, Offered: s.TargetRate, Answered: s.AchievedRate, LoadAvg: s.LoadAvg,
		Requests: s.Requests, Dropped: s.Dropped,
		Duplicates: s.Check.Duplicates, MissingAtSettle: s.MissingAtSettle, Missing: s.Check.Missing, Stray: s.Check.Stray,
		First: s.Latency["first"], Replay: s.Latency["replay"],
	}
	for _, byAnswer := range s.Answers {
		for a, n := range byAnswer {
			switch {
			case a == "500" || a == "error: timeout":
				st.Timeouts += n
			case strings.HasPrefix(a, "5") || strings.HasPrefix(a, "error: "):
				st.OtherFailures += n
			}
		}
	}
	st.OK = st.Answered >= keepUp*st.Offered && st.Dropped == 0 && st.Timeouts == 0 && st.OtherFailures == 0 && st.Duplicates == 0 && st.MissingAtSettle == 0 && st.Missing == 0 && st.Stray == 0
	return st
}

func verdict(st benchout.Step) string {
	if st.OK {
		return "sustained"
	}
	return "not sustained"
}

// writeJSON writes v as OUT.json.
func writeJSON(out string, v any) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out+".json", append(js, '\n'), 0o644)
}
