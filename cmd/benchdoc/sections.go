package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

// inputs are the make bench outputs a run reads, by path. An empty -bench,
// -roundtrips or -load keeps the sections drawn from it as they are. -bench
// draws the machine's, and -bench with -load the anchors. So the others can
// be refreshed alone. The other inputs are optional.
type inputs struct {
	bench, roundTrips, loads, coldStart, bin, sideBySide, sustain, sustainFakecloud string
	// isolation: loadgen isolation's summary, committed as
	// docs/isolation.json.
	isolation string
	// growth: loadgen growth's summaries, comma-separated, each with the
	// emulator it ran on ("NAME=PATH").
	growth string
}

// sections reads the inputs and renders, by name, every section they
// give.
func (in inputs) sections() (map[string]string, error) {
	sections := map[string]string{}

	var results []benchout.Result
	if in.bench != "" {
		var conf map[string]string
		var err error
		if results, conf, err = benchout.ReadBench(in.bench); err != nil {
			return nil, err
		}
		sections["machine"] = machine()
		sections["benchmarks"] = benchTable(results, conf)
		if sections["ratios"], err = ratios(results); err != nil {
			return nil, fmt.Errorf("%s: %w", in.bench, err)
		}
	}

	if in.roundTrips != "" {
		rt, err := os.ReadFile(in.roundTrips)
		if err != nil {
			return nil, err
		}
		sections["roundtrips"] = string(rt)
	}

	if in.loads != "" {
		var summaries []benchout.Summary
		for _, name := range strings.Split(in.loads, ",") {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, err
			}
			var s benchout.Summary
			if err := json.Unmarshal(b, &s); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			summaries = append(summaries, s)
		}
		sections["load"] = loadTable(summaries)
		if results != nil {
			var err error
			if sections["anchors"], err = anchors(results, summaries); err != nil {
				return nil, err
			}
		}
	}

	if in.coldStart != "" {
		b, err := os.ReadFile(in.coldStart)
		if err != nil {
			return nil, err
		}
		if sections["coldstart"], err = coldStartTable(string(b), in.bin); err != nil {
			return nil, fmt.Errorf("%s: %w", in.coldStart, err)
		}
	}

	if in.sideBySide != "" {
		b, err := os.ReadFile(in.sideBySide)
		if err != nil {
			return nil, err
		}
		var f benchout.SideBySide
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", in.sideBySide, err)
		}
		if sections["powertools"], err = sideBySideTable(f); err != nil {
			return nil, fmt.Errorf("%s: %w", in.sideBySide, err)
		}
	}

	if in.growth != "" {
		var err error
		if sections["growth"], err = growthSection(in.growth); err != nil {
			return nil, err
		}
	}

	if in.isolation != "" {
		var err error
		if sections["isolation"], err = isolationSection(in.isolation); err != nil {
			return nil, err
		}
	}

	for _, run := range []struct{ section, summary string }{
		{"sustain", in.sustain},
		{"sustain-fakecloud", in.sustainFakecloud},
	} {
		if run.summary == "" {
			continue
		}
		var err error
		if sections[run.section], err = sustainSection(run.summary); err != nil {
			return nil, err
		}
	}
	return sections, nil
}

// fill replaces the body of every generated section of doc named in
// sections. A section named but absent from doc is an error. Sections of
// doc not named are kept.
func fill(doc string, sections map[string]string) (string, error) {
	for _, name := range slices.Sorted(maps.Keys(sections)) {
		begin, end := "<!-- generated:"+name+" -->\n", "<!-- /generated:"+name+" -->"
		i := strings.Index(doc, begin)
		j := strings.Index(doc, end)
		if i < 0 || j < i {
			return "", fmt.Errorf("no section %q (%s … %s)", name, strings.TrimSpace(begin), end)
		}
		body := strings.TrimRight(sections[name], "\n") + "\n"
		doc = doc[:i+len(begin)] + body + doc[j:]
	}
	return doc, nil
}

func benchTable(results []benchout.Result, conf map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Load average when the benchmarks started: %s. Medians of %d runs; the spread is the range over the runs.\n\n",
		orNone(conf["loadavg"]), len(results[0].Values["ns/op"]))
	b.WriteString("| benchmark | time/op (median) | spread | p50 / p99 of one op | DynamoDB calls/op | B/op | allocs/op | req/s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		ns, _ := r.Median("ns/op")
		lo, hi := slices.Min(r.Values["ns/op"]), slices.Max(r.Values["ns/op"])
		cell := func(unit, format string) string {
			if v, ok := r.Median(unit); ok {
				return fmt.Sprintf(format, v)
			}
			return "–"
		}
		pcts := "–"
		if p50, ok := r.Median("p50-ms"); ok {
			p99, _ := r.Median("p99-ms")
			pcts = fmt.Sprintf("%.2f / %.2f ms", p50, p99)
		}
		fmt.Fprintf(&b, "| %s | %.2f ms | %.2f–%.2f ms | %s | %s | %s | %s | %s |\n",
			r.Name, ns/1e6, lo/1e6, hi/1e6, pcts, cell("ddb-calls/op", "%.0f"), cell("B/op", "%.0f"), cell("allocs/op", "%.0f"), cell("req/s", "%.0f"))
	}
	return b.String()
}

// ratios compares the idempotent handler with the naive one. A first call
// is set beside a first call. A replay is set beside what a naive retry
// costs: another first call, which charges again.
func ratios(results []benchout.Result) (string, error) {
	var v [4]float64
	for i, name := range []string{"BenchmarkHandlerFirstCall", "BenchmarkHandlerReplay", "BenchmarkNaiveFirstCall", "BenchmarkEmulatorPutItem/serial"} {
		var err error
		if v[i], err = benchout.NsPerOp(results, name); err != nil {
			return "", err
		}
	}
	first, replay, naive, put := v[0], v[1], v[2], v[3]
	var b strings.Builder
	b.WriteString("| comparison | idempotent | naive | ratio |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| first call (idempotent) vs first call (naive) | %.2f ms | %.2f ms | %.2f× |\n", first/1e6, naive/1e6, first/naive)
	fmt.Fprintf(&b, "| replay (idempotent) vs a retry of the naive handler (a second charge) | %.2f ms | %.2f ms | %.2f× |\n", replay/1e6, naive/1e6, replay/naive)
	own, okFirst := benchout.Value(results, "BenchmarkHandlerFirstCall", "own-allocs/op")
	ownNaive, okNaive := benchout.Value(results, "BenchmarkNaiveFirstCall", "own-allocs/op")
	if okFirst && okNaive {
		fmt.Fprintf(&b, "| our own allocations in a first call (own-allocs/op: the SDK's and net/http's left out) | %.0f | %.0f | %.2f× |\n", own, ownNaive, own/ownNaive)
	}
	fmt.Fprintf(&b, "\nOne emulator PutItem took %.2f ms in the same run. The idempotent first call costs %.1f of them, the replay %.1f, the naive call %.1f.\n",
		put/1e6, first/put, replay/put, naive/put)
	return b.String(), nil
}

// anchors sets the measurements beside the seeds' figures. Those are a
// completed replay within 10 ms at p99, and 2,080 requests per second. The
// slowest load run offered is taken as below saturation. The fastest is
// taken as the seeds' rate.
func anchors(results []benchout.Result, ss []benchout.Summary) (string, error) {
	if len(ss) == 0 {
		return "", errors.New("no load runs")
	}
	replay, err := benchout.NsPerOp(results, "BenchmarkHandlerReplay")
	if err != nil {
		return "", err
	}
	put, err := benchout.NsPerOp(results, "BenchmarkEmulatorPutItem/serial")
	if err != nil {
		return "", err
	}
	slow, fast := ss[0], ss[0]
	for _, s := range ss {
		if s.TargetRate < slow.TargetRate {
			slow = s
		}
		if s.TargetRate > fast.TargetRate {
			fast = s
		}
	}
	var b strings.Builder
	b.WriteString("| the seeds' figure | measured here |\n|---|---|\n")
	through := fmt.Sprintf("%.2f ms on average", replay/1e6)
	for _, r := range results {
		if p99, ok := r.Median("p99-ms"); ok && r.Name == "BenchmarkHandlerReplay" {
			through += fmt.Sprintf(", p99 %.2f ms", p99)
		}
	}
	fmt.Fprintf(&b, "| a completed replay within 10 ms at p99 | through the handler, one at a time (BenchmarkHandlerReplay, medians over the runs): %s; over HTTP at %.0f req/s, p50 / p95 / p99: %s |\n",
		through, slow.TargetRate, percentiles(slow.Latency["replay"]))
	fmt.Fprintf(&b, "| 2,080 requests per second | %.1f answered per second with %.0f offered (%d of %d requests dropped at the cap of %d in flight); the emulator alone takes %.0f PutItem per second one at a time (BenchmarkEmulatorPutItem/serial) |\n",
		fast.AchievedRate, fast.TargetRate, fast.Dropped, fast.Requests, fast.MaxInFlight, 1e9/put)
	return b.String(), nil
}

func loadTable(ss []benchout.Summary) string {
	var b strings.Builder
	b.WriteString("| run | load avg at start | requests (planned / sent / dropped) | offered | answered | first call p50 / p95 / p99 | replay p50 / p95 / p99 | concurrent twin p99 | other answers | ledger charges / rows / logical | duplicates | missing |\n")
	b.WriteString("|---|---|---|---:|---:|---|---|---:|---|---|---:|---:|\n")
	for _, s := range ss {
		fmt.Fprintf(&b, "| %d logical at %.0f req/s, cap %d | %s | %d / %d / %d | %.0f req/s | %.1f req/s | %s | %s | %s | %s | %d / %d / %d | %d | %d |\n",
			s.Logical, s.TargetRate, s.MaxInFlight, orNone(s.LoadAvg), s.Requests, s.Sent, s.Dropped, s.TargetRate, s.AchievedRate,
			percentiles(s.Latency["first"]), percentiles(s.Latency["replay"]), tail(s.Latency["concurrent"]),
			otherAnswers(s.Answers), s.Check.LedgerCharges, s.Check.Rows, s.Check.Logical, s.Check.Duplicates, s.Check.Missing)
	}
	return b.String()
}

// otherAnswers lists, by kind of request, the answers that are neither a
// 201 to a first call nor a replay.
func otherAnswers(answers map[string]map[string]int) string {
	var parts []string
	for _, k := range []string{"first", "retry", "concurrent"} {
		for _, a := range slices.Sorted(maps.Keys(answers[k])) {
			if (k == "first" && a == "201") || (k != "first" && a == "201 replayed") {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s: %d", k, a, answers[k][a]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// percentiles is "p50 / p95 / p99 ms (n=N)". No values give a dash.
func percentiles(l benchout.Latency) string {
	if l.Count == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s / %s ms (n=%d)", num(l.P50), num(l.P95), num(l.P99), l.Count)
}

// tail is "p99 ms (n=N)", or a dash for no values.
func tail(l benchout.Latency) string {
	if l.Count == 0 {
		return "–"
	}
	return fmt.Sprintf("%s ms (n=%d)", num(l.P99), l.Count)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func orNone(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

// machine describes the host from /proc.
func machine() string {
	cpu, mem := "unknown", "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	kernel := "unknown"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("| | |\n|---|---|\n| CPU | %s |\n| cores (nproc) | %d |\n| memory | %s |\n| OS | %s/%s, Linux %s |\n| Go | %s |\n| generated | %s |\n",
		cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, kernel, runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}

// millis rounds a duration logged as "N ms" as num does.
func millis(s string) string {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, " ms"), 64)
	if err != nil || !strings.HasSuffix(s, " ms") {
		return s
	}
	return num(v) + " ms"
}

var coldStartLine = regexp.MustCompile(`(\w+)\s+bootstrap (.+?); REPORT Init Duration (.+?); INIT REPORT (.+?)\s*$`)

// coldStartTable combines two sources per function. One is the size of the
// Lambda bootstrap make build wrote under bin. The other is what the e2e
// test logged: its host-architecture build's size and the Runtime Interface
// Emulator's two init durations.
func coldStartTable(e2e, bin string) (string, error) {
	var b strings.Builder
	b.WriteString("| function | bootstrap (make build, linux/arm64) | bootstrap (e2e build, host arch) | RIE REPORT Init Duration | RIE INIT REPORT |\n|---|---:|---:|---:|---:|\n")
	n := 0
	for l := range strings.Lines(e2e) {
		m := coldStartLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		size := "n/a"
		if fi, err := os.Stat(filepath.Join(bin, m[1], "bootstrap")); err == nil {
			size = fmt.Sprintf("%.1f MiB", float64(fi.Size())/(1<<20))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", m[1], size, m[2], millis(m[3]), millis(m[4]))
		n++
	}
	if n == 0 {
		return "", errors.New("no cold-start lines (name bootstrap SIZE; REPORT Init Duration D; INIT REPORT D)")
	}
	return b.String(), nil
}

// sustainSection reads a sustain run's summary. It sets out the ceilings,
// the sustained rate and every step.
func sustainSection(summary string) (string, error) {
	b, err := os.ReadFile(summary)
	if err != nil {
		return "", err
	}
	var s benchout.Sustain
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("%s: %w", summary, err)
	}
	return sustainTable(s), nil
}

func sustainTable(s benchout.Sustain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Started %s, load average %s; %.0f s a step.\n\n", orNone(s.Started), orNone(s.LoadAvg), s.StepSeconds)
	fmt.Fprintf(&b, "| | |\n|---|---|\n| the emulator's ceiling | **%.0f req/s**: %.0f PutItem/s (BenchmarkEmulatorPutItem/serial) ÷ %.2f DynamoDB calls per request of the mix |\n", s.Ceiling, s.PutItemPerSecond, s.CallsPerRequest)
	fmt.Fprintf(&b, "| the mix's ceiling | **%.0f req/s**: the mix's own calls one at a time, a first charge's Begin (%.2f ms, BenchmarkBegin) and Commit (%.2f ms, BenchmarkCommit), a retry's or twin's one conditional PutItem (as a Begin) |\n", s.MixCeiling, s.BeginMs, s.CommitMs)
	if s.Sustained > 0 {
		fmt.Fprintf(&b, "| the highest rate sustained | **%.0f req/s** offered (%.1f answered): **%.0f%%** of the ceiling, **%.0f%%** of the mix's ceiling |\n\n", s.Sustained, s.SustainedAnswered, 100*s.Sustained/s.Ceiling, 100*s.Sustained/s.MixCeiling)
	} else {
		b.WriteString("| the highest rate sustained | none of the rates tried |\n\n")
	}
	b.WriteString("| offered | of the ceiling | of the mix's ceiling | load avg at start | answered | dropped | timed out | other failures | first call p50 / p95 / p99 | replay p50 / p95 / p99 | duplicates | missing after the settle / the drain | sustained |\n")
	b.WriteString("|---:|---:|---:|---|---:|---:|---:|---:|---|---|---:|---:|---|\n")
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "| %.0f req/s | %.0f%% | %.0f%% | %s | %.1f req/s | %d | %d | %d | %s | %s | %d | %d / %d | %s |\n",
			st.Offered, 100*st.Offered/s.Ceiling, 100*st.Fraction, orNone(st.LoadAvg), st.Answered, st.Dropped, st.Timeouts, st.OtherFailures,
			percentiles(st.First), percentiles(st.Replay), st.Duplicates, st.MissingAtSettle, st.Missing, map[bool]string{true: "yes", false: "no"}[st.OK])
	}
	return b.String()
}

// What the Powertools handlers do not do, and chargeonce does.
const powertoolsLacks = "no atomic business write (the charge row and the record's completion are two writes: a crash between them leaves a charge whose record says in progress); no fencing (a stale holder can still complete a record another took over); no reconciliation (an in-progress record whose outcome is unknown just expires, and the next retry charges again)"

// sideBySideHandlers are the handlers compared, in the tables' order. Each
// carries what it does not do.
var sideBySideHandlers = []struct{ id, name, lacks string }{
	{"chargeonce", "chargeonce", "–"},
	{"powertools", "Powertools Python `@idempotent`", powertoolsLacks},
	{"powertools-ts", "Powertools TypeScript `makeIdempotent`", "as Powertools Python"},
	{"naive", "naive", "no idempotency: a retry charges again"},
}

// peers are the handlers chargeonce's ratios are taken against.
var peers = []struct{ id, name string }{{"powertools", "Powertools Python"}, {"powertools-ts", "Powertools TypeScript"}}

func sideBySideTable(f benchout.SideBySide) (string, error) {
	for _, h := range sideBySideHandlers {
		fig, ok := f.Handlers[h.id]
		if !ok {
			return "", fmt.Errorf("no figures for %s", h.id)
		}
		for _, mode := range []string{"serial", "concurrent"} {
			if _, ok := fig.Runs[mode]; !ok {
				return "", fmt.Errorf("no %s run for %s", mode, h.id)
			}
		}
	}
	var b strings.Builder
	py, ts := f.Handlers["powertools"], f.Handlers["powertools-ts"]
	fmt.Fprintf(&b, "Load average when the test started: %s. %d first calls, %d replays and %d concurrent duplicates per handler and concurrency. "+
		"Powertools Python %s (boto3 %s, Python %s); Powertools TypeScript %s (AWS SDK %s, Node %s). Latencies p50 / p99; "+
		"*own*: the mean time of a call less its mean time at the emulator.\n\n",
		orNone(f.LoadAvg), f.N, f.N, f.N, orNone(py.PowertoolsVersion), orNone(py.SDKVersion), orNone(py.RuntimeVersion),
		orNone(ts.PowertoolsVersion), orNone(ts.SDKVersion), orNone(ts.RuntimeVersion))
	b.WriteString("| handler | concurrency | first call | own | replay | own | concurrent duplicate | its answers |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|\n")
	lat := func(l *benchout.SideLatency) string {
		if l == nil {
			return "–"
		}
		return fmt.Sprintf("%s / %s ms", num(l.P50), num(l.P99))
	}
	for _, h := range sideBySideHandlers {
		for _, mode := range []string{"serial", "concurrent"} {
			r := f.Handlers[h.id].Runs[mode]
			replayOwn, dup, answers := "–", "–", "–"
			if r.Replay != nil {
				replayOwn = num(r.ReplayOwnMs) + " ms"
			}
			if r.Duplicate != nil {
				dup, answers = lat(&r.Duplicate.Latency), counts(r.Duplicate.Answers)
			}
			if h.id == "naive" {
				replayOwn = "– (a retry is another first call)"
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s ms | %s | %s | %s | %s |\n", h.name, r.Concurrency, lat(&r.First), num(r.FirstOwnMs),
				lat(r.Replay), replayOwn, dup, answers)
		}
	}

	b.WriteString("\n| handler | DynamoDB calls: first / replay / duplicate pair | WCU: first / replay | what it does not do |\n|---|---|---:|---|\n")
	calls := func(c map[string]float64) string {
		if len(c) == 0 {
			return "–"
		}
		var parts []string
		for _, op := range slices.Sorted(maps.Keys(c)) {
			parts = append(parts, fmt.Sprintf("%s %s", strconv.FormatFloat(c[op], 'f', -1, 64), op))
		}
		return strings.Join(parts, " + ")
	}
	for _, h := range sideBySideHandlers {
		fig := f.Handlers[h.id]
		r := fig.Runs["serial"]
		wcu := fmt.Sprintf("%d / %d", fig.FirstWCU, fig.ReplayWCU)
		if fig.FirstIndexWCU > 0 {
			wcu = fmt.Sprintf("%d (+%d index) / %d", fig.FirstWCU, fig.FirstIndexWCU, fig.ReplayWCU)
		}
		if h.id == "naive" {
			wcu = fmt.Sprintf("%d / –", fig.FirstWCU)
		}
		fmt.Fprintf(&b, "| %s | %s / %s / %s | %s | %s |\n", h.name, calls(r.FirstCalls), calls(r.ReplayCalls), calls(r.DuplicateCalls), wcu, h.lacks)
	}

	b.WriteString("\n| ratio, p50 (p99) | one at a time | concurrent |\n|---|---:|---:|\n")
	ours, naive := f.Handlers["chargeonce"], f.Handlers["naive"]
	row := func(name string, get func(mode string) (a, b *benchout.SideLatency)) {
		cells := []string{name}
		for _, mode := range []string{"serial", "concurrent"} {
			x, y := get(mode)
			if x == nil || y == nil {
				cells = append(cells, "–")
				continue
			}
			cells = append(cells, fmt.Sprintf("%.2f× (%.2f×)", x.P50/y.P50, x.P99/y.P99))
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	ownRow := func(name string, get func(r benchout.SideRun) float64, peer benchout.SideHandler) {
		cells := []string{name}
		for _, mode := range []string{"serial", "concurrent"} {
			cells = append(cells, fmt.Sprintf("%.2f×", get(ours.Runs[mode])/get(peer.Runs[mode])))
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	dupOf := func(r benchout.SideRun) *benchout.SideLatency {
		if r.Duplicate == nil {
			return nil
		}
		return &r.Duplicate.Latency
	}
	for _, p := range peers {
		peer := f.Handlers[p.id]
		row("chargeonce first call ÷ "+p.name, func(m string) (a, b *benchout.SideLatency) {
			x, y := ours.Runs[m].First, peer.Runs[m].First
			return &x, &y
		})
		row("chargeonce replay ÷ "+p.name, func(m string) (a, b *benchout.SideLatency) { return ours.Runs[m].Replay, peer.Runs[m].Replay })
		row("chargeonce concurrent duplicate ÷ "+p.name, func(m string) (a, b *benchout.SideLatency) { return dupOf(ours.Runs[m]), dupOf(peer.Runs[m]) })
		ownRow("chargeonce own time, first call ÷ "+p.name+" (means)", func(r benchout.SideRun) float64 { return r.FirstOwnMs }, peer)
		ownRow("chargeonce own time, replay ÷ "+p.name+" (means)", func(r benchout.SideRun) float64 { return r.ReplayOwnMs }, peer)
	}
	row("chargeonce first call ÷ naive first call", func(m string) (a, b *benchout.SideLatency) {
		x, y := ours.Runs[m].First, naive.Runs[m].First
		return &x, &y
	})
	row("chargeonce replay ÷ naive first call (its retry)", func(m string) (a, b *benchout.SideLatency) {
		y := naive.Runs[m].First
		return ours.Runs[m].Replay, &y
	})
	return b.String(), nil
}

// counts renders answer counts in name order: "409 ×200".
func counts(c map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// growthSection renders loadgen growth's summaries, given as
// "NAME=PATH,NAME=PATH". Each gets a table of the steps. Every figure
// stands beside its ratio to the first step's. A run with a reference stack
// adds the growing stack's ratios to it, in the same minutes.
func growthSection(list string) (string, error) {
	var b strings.Builder
	for _, entry := range strings.Split(list, ",") {
		name, path, ok := strings.Cut(entry, "=")
		if !ok {
			return "", fmt.Errorf("-growth %q: want NAME=PATH", entry)
		}
		js, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		var g benchout.Growth
		if err := json.Unmarshal(js, &g); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if len(g.Steps) == 0 {
			return "", fmt.Errorf("%s: no steps", path)
		}
		fmt.Fprintf(&b, "**%s**, started %s. Each step makes %d logical charges at %.0f req/s, then leaves %d commands to the reconciler.\n\n",
			name, orNone(g.Started), g.Logical, g.Rate, g.Reconciles)
		b.WriteString("| charges before | stack | load avg at start | first call p50 / p99 | ÷ first step | replay p50 / p99 | ÷ first step | reconcile p50 / p99 | ÷ first step | check |\n")
		b.WriteString("|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n")
		first := g.Steps[0]
		for _, st := range g.Steps {
			b.WriteString(growthRow(st.Charges, "growing", st.Stack, first.Stack))
			if st.Reference != nil && first.Reference != nil {
				b.WriteString(growthRow(st.Charges, "reference", *st.Reference, *first.Reference))
			}
		}
		if first.Reference == nil {
			b.WriteString("\n")
			continue
		}
		b.WriteString("\n| charges before | first call, growing ÷ reference | replay, growing ÷ reference | reconcile, growing ÷ reference |\n|---:|---:|---:|---:|\n")
		for _, st := range g.Steps {
			if st.Reference == nil {
				continue
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", st.Charges, latencyRatio(st.Stack.First, st.Reference.First),
				latencyRatio(st.Stack.Replay, st.Reference.Replay), latencyRatio(st.Stack.Reconcile, st.Reference.Reconcile))
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// growthRow is one stack's row of a growth table.
func growthRow(charges int, stack string, r, first benchout.GrowthRun) string {
	pair := func(l benchout.Latency) string { return fmt.Sprintf("%s / %s ms", num(l.P50), num(l.P99)) }
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", charges, stack, orNone(r.LoadAvg),
		pair(r.First), latencyRatio(r.First, first.First), pair(r.Replay), latencyRatio(r.Replay, first.Replay),
		pair(r.Reconcile), latencyRatio(r.Reconcile, first.Reconcile), map[bool]string{true: "ok", false: "failed"}[r.OK])
}

// latencyRatio is "P50 ratio× / P99 ratio×" of l to base.
func latencyRatio(l, base benchout.Latency) string {
	if base.P50 == 0 || base.P99 == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× / %.2f×", l.P50/base.P50, l.P99/base.P99)
}
