package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// isolationConfig is an isolation run's configuration.
type isolationConfig struct {
	target, provider, dynamoDB           string
	idemTable, chargesTable, limitsTable string
	limit, times, bRate, rounds          int
	phase, limitsMaxAge, timeout         time.Duration
	keep                                 bool
	out                                  string
}

func parseIsolationFlags(args []string, getenv func(string) string) (isolationConfig, error) {
	fs := flag.NewFlagSet("loadgen isolation", flag.ContinueOnError)
	var c isolationConfig
	fs.IntVar(&c.limit, "limit", 10, "tenant A's rate limit (requests a second), set as an operator's override")
	fs.IntVar(&c.times, "times", 10, "A sends this many times its limit")
	fs.IntVar(&c.bRate, "b-rate", 10, "tenant B's steady rate (requests a second), under the default limit")
	fs.DurationVar(&c.phase, "phase", 10*time.Second, "the length of each phase")
	fs.IntVar(&c.rounds, "rounds", 6, "rounds of three phases: B alone, B beside A at its limit, B beside A at -times it")
	fs.DurationVar(&c.limitsMaxAge, "limits-max-age", time.Minute, "the stack's LIMITS_MAX_AGE: how long to wait for it to read A's limit")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "client timeout of one request")
	fs.StringVar(&c.target, "target", "http://127.0.0.1:3000", "the charge API")
	fs.StringVar(&c.provider, "provider", "http://127.0.0.1:4010", "the provider simulator")
	fs.StringVar(&c.dynamoDB, "dynamodb", getenv("DYNAMODB_ENDPOINT"), "DynamoDB endpoint of the stack (default $DYNAMODB_ENDPOINT, else http://127.0.0.1:4566)")
	fs.StringVar(&c.idemTable, "idempotency-table", "chargeonce-idempotency", "the stack's idempotency table")
	fs.StringVar(&c.chargesTable, "charges-table", "chargeonce-charges", "the stack's charges table")
	fs.StringVar(&c.limitsTable, "limits-table", "chargeonce-limits", "the stack's limits table")
	fs.BoolVar(&c.keep, "keep", false, "keep the run's records, rows and A's override")
	fs.StringVar(&c.out, "out", "out/isolation", "write the summary to OUT.json")
	if err := fs.Parse(args); err != nil {
		return isolationConfig{}, err
	}
	if fs.NArg() > 0 {
		return isolationConfig{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.dynamoDB == "" {
		c.dynamoDB = "http://127.0.0.1:4566"
	}
	if c.limit < 1 || c.times < 2 || c.bRate < 1 || c.rounds < 1 || c.phase < time.Second {
		return isolationConfig{}, errors.New("-limit, -b-rate and -rounds must be at least 1, -times 2, -phase 1s")
	}
	for _, u := range []string{c.target, c.provider, c.dynamoDB} {
		if err := loopback(u); err != nil {
			return isolationConfig{}, err
		}
	}
	return c, nil
}

// isolationMain measures how one tenant's flood touches another:
//
//	loadgen isolation [-limit 10] [-times 10] [-b-rate 10] [-phase 10s] [-rounds 6]
//	        [-limits-max-age 1m] [stack flags] [-out out/isolation]
//
// It gives a fresh tenant A a rate limit, as an operator's override, and
// waits for the stack to read it. In each round a fresh tenant B sends new
// charges at a steady rate for three phases. In the first it is alone. In
// the second A sends at its limit; in the third, at -times it. The second
// tells A's admitted work from its refused excess. vegeta sends the load,
// open-loop, each request under a new key. Afterwards it checks both
// tenants' keys against the provider's ledger and the charges table. No
// key A was refused with may have a record. It writes OUT.json (see
// benchout.Isolation). It prints B's latencies beside A over alone as the
// figure. It exits 1 unless every check held: see failures.
func isolationMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseIsolationFlags(args, getenv)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: c.timeout, Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second}}
	if err := reachable(ctx, hc, c.target); err != nil {
		return err
	}
	s, err := runIsolation(ctx, c, hc, stderr)
	if err != nil {
		return err
	}
	printIsolation(stdout, s)
	if failed := failures(s); len(failed) > 0 {
		return fmt.Errorf("isolation: %s", strings.Join(failed, "; "))
	}
	return nil
}

// shot is what one request of an attack got, and when it was sent.
type shot struct {
	key     string
	status  int
	failure string
	sent    time.Time
	latency time.Duration
}

// attack sends tenant's new charges with vegeta, at rate a second for d.
// Each has a fresh key, prefix-N; it returns what each got.
func attack(ctx context.Context, hc *http.Client, target, tenant, prefix string, rate int, d time.Duration) []shot {
	var (
		mu sync.Mutex
		n  int
	)
	targeter := func(t *vegeta.Target) error {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		key := fmt.Sprintf("%s-%06d", prefix, i)
		t.Method = http.MethodPost
		// The fragment, never sent, tags the result with its key.
		t.URL = strings.TrimRight(target, "/") + "/charges#" + key
		t.Body = fmt.Appendf(nil, `{"amount":%d,"currency":"EUR","source":"tok_visa"}`, 100+i%9900)
		t.Header = http.Header{
			"Authorization": {"Bearer dev:" + tenant}, "Content-Type": {"application/json"}, "Idempotency-Key": {key},
		}
		return nil
	}
	atk := vegeta.NewAttacker(vegeta.Client(hc), vegeta.MaxBody(0))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var shots []shot
	for r := range atk.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, d, tenant) {
		s := shot{status: int(r.Code), sent: r.Timestamp, latency: r.Latency}
		if u, err := url.Parse(r.URL); err == nil {
			s.key = u.Fragment
		}
		if s.status == 0 {
			s.failure = "transport"
			if strings.Contains(r.Error, "Timeout") || strings.Contains(r.Error, "deadline") {
				s.failure = "timeout"
			}
		}
		shots = append(shots, s)
	}
	return shots
}

// runIsolation runs the phases and checks the ledger and the rows. It
// writes c.out.json. It removes what the run wrote unless c.keep.
func runIsolation(ctx context.Context, c isolationConfig, hc *http.Client, stderr io.Writer) (benchout.Isolation, error) {
	suffix := func() string {
		var b [4]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		return hex.EncodeToString(b[:])
	}
	aTenant, bTenant := "iso-a-"+suffix(), "iso-b-"+suffix()
	s := benchout.Isolation{
		Started: time.Now().UTC().Format(time.RFC3339), LoadAvg: testkit.LoadAvg(), Target: c.target, Tool: vegetaVersion(),
		PhaseSeconds: c.phase.Seconds(), Rounds: c.rounds, ALimit: c.limit, ARate: float64(c.limit * c.times), BRate: float64(c.bRate),
	}
	db, err := dynamoClient(ctx, c.dynamoDB)
	if err != nil {
		return s, err
	}
	limits, err := limit.NewTable(db, c.limitsTable)
	if err != nil {
		return s, err
	}
	if err := limits.SetOverride(ctx, aTenant, limit.Limits{Rate: c.limit}); err != nil {
		return s, err
	}
	wait := c.limitsMaxAge + time.Second
	fmt.Fprintf(stderr, "loadgen: A (%s) limited to %d a second; waiting %v for the stack to read it\n", aTenant, c.limit, wait)
	select {
	case <-ctx.Done():
		return s, ctx.Err()
	case <-time.After(wait):
	}

	// Each phase's shots apart: a phase's span bounds what A may get.
	var bAlone, bBesideLimit, bBesideFlood, aAtLimit, aFlood [][]shot
	// beside runs a phase of B beside A at rate, and returns both's shots.
	beside := func(name string, round, rate int) (b, a []shot) {
		fmt.Fprintf(stderr, "loadgen: round %d: B at %d/s beside A at %d/s for %v\n", round+1, c.bRate, rate, c.phase)
		var wg sync.WaitGroup
		wg.Go(func() {
			// Half of B's interval later, so that no request of the two
			// pacers arrives together with the other's.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second / time.Duration(2*c.bRate)):
			}
			a = attack(ctx, hc, c.target, aTenant, fmt.Sprintf("%s-%d", name, round), rate, c.phase)
		})
		b = attack(ctx, hc, c.target, bTenant, fmt.Sprintf("beside-%s-%d", name, round), c.bRate, c.phase)
		wg.Wait()
		return b, a
	}
	p99 := func(shots []shot) float64 {
		ds := make([]time.Duration, 0, len(shots))
		for _, s := range shots {
			ds = append(ds, s.latency)
		}
		return summarize(ds).P99
	}
	for round := range c.rounds {
		fmt.Fprintf(stderr, "loadgen: round %d: B alone at %d/s for %v\n", round+1, c.bRate, c.phase)
		alone := attack(ctx, hc, c.target, bTenant, fmt.Sprintf("alone-%d", round), c.bRate, c.phase)
		bLimit, a := beside("limit", round, c.limit)
		aAtLimit = append(aAtLimit, a)
		bFlood, a := beside("flood", round, c.limit*c.times)
		aFlood = append(aFlood, a)
		bAlone, bBesideLimit, bBesideFlood = append(bAlone, alone), append(bBesideLimit, bLimit), append(bBesideFlood, bFlood)
		s.RoundP99s = append(s.RoundP99s, [3]float64{p99(alone), p99(bLimit), p99(bFlood)})
	}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	seconds := float64(c.rounds) * c.phase.Seconds()
	s.BAlone, s.BBesideLimit, s.BBesideFlood = tenantRun(bTenant, bAlone, seconds), tenantRun(bTenant, bBesideLimit, seconds), tenantRun(bTenant, bBesideFlood, seconds)
	s.AAtLimit, s.AFlood = tenantRun(aTenant, aAtLimit, seconds), tenantRun(aTenant, aFlood, seconds)
	flood := s.BBesideFlood.Latency
	s.P50Ratio, s.P99Ratio = flood.P50/s.BAlone.Latency.P50, flood.P99/s.BAlone.Latency.P99
	s.ExcessP50Ratio, s.ExcessP99Ratio = flood.P50/s.BBesideLimit.Latency.P50, flood.P99/s.BBesideLimit.Latency.P99

	checks := map[string]*isolationCheck{
		aTenant: newIsolationCheck(slices.Concat(slices.Concat(aAtLimit...), slices.Concat(aFlood...))),
		bTenant: newIsolationCheck(slices.Concat(slices.Concat(bAlone...), slices.Concat(bBesideLimit...), slices.Concat(bBesideFlood...))),
	}
	for tenant, ic := range checks {
		if ic.refs, ic.ids, err = references(ctx, db, c.idemTable, tenant, ic.keys, ic.sent); err != nil {
			return s, err
		}
	}
	ledger, err := ledgerEntries(ctx, hc, c.provider)
	if err != nil {
		return s, err
	}
	for tenant, ic := range checks {
		rows, err := chargeRows(ctx, db, c.chargesTable, tenant)
		if err != nil {
			return s, err
		}
		ic.checked = check(ic.keys, ic.refs, ic.answers, ledger, rows)
	}
	s.ACheck, s.BCheck = checks[aTenant].checked.Check, checks[bTenant].checked.Check
	for i, k := range checks[aTenant].keys {
		if checks[aTenant].refused[k] && checks[aTenant].refs[i] != "" {
			s.ARefusedStored++
		}
	}
	s.OK = len(failures(s)) == 0
	if err := writeJSON(c.out, s); err != nil {
		return s, err
	}
	if !c.keep {
		for tenant, ic := range checks {
			if err := cleanup(ctx, db, c.idemTable, c.chargesTable, tenant, ic.keys, ic.ids); err != nil {
				return s, err
			}
		}
		if err := limits.DeleteOverride(ctx, aTenant); err != nil {
			return s, err
		}
	}
	return s, nil
}

// isolationCheck is one tenant's keys, as check takes them.
type isolationCheck struct {
	keys, refs, ids []string
	sent            []bool
	answers         [][]outcome
	refused         map[string]bool // answered 429
	checked         checked
}

func newIsolationCheck(shots []shot) *isolationCheck {
	ic := &isolationCheck{refused: map[string]bool{}}
	for _, s := range shots {
		ic.keys = append(ic.keys, s.key)
		ic.sent = append(ic.sent, true)
		ic.answers = append(ic.answers, []outcome{{sent: true, status: s.status, failure: s.failure, latency: s.latency}})
		ic.refused[s.key] = s.status == http.StatusTooManyRequests
	}
	return ic
}

// tenantRun sums up tenant's shots in phases lasting seconds in all.
func tenantRun(tenant string, phases [][]shot, seconds float64) benchout.TenantRun {
	shots := slices.Concat(phases...)
	r := benchout.TenantRun{Tenant: tenant, Requests: len(shots), Answers: map[string]int{}}
	for _, p := range phases {
		r.SpanSeconds += span(p).Seconds()
	}
	ds := make([]time.Duration, 0, len(shots))
	created := 0
	for _, s := range shots {
		answer := strconv.Itoa(s.status)
		if s.status == 0 {
			answer = "error: " + s.failure
		}
		r.Answers[answer]++
		ds = append(ds, s.latency)
		if s.status == http.StatusCreated {
			created++
		}
	}
	r.Latency = summarize(ds)
	r.AdmittedPerSecond = float64(created) / seconds
	return r
}

// span is how long a phase's requests were in flight. It runs from the
// first sent to the last answered. The server admitted each within it.
func span(phase []shot) time.Duration {
	var first, last time.Time
	for _, s := range phase {
		if first.IsZero() || s.sent.Before(first) {
			first = s.sent
		}
		if end := s.sent.Add(s.latency); end.After(last) {
			last = end
		}
	}
	return last.Sub(first)
}

// failures names each check of the run that did not hold. No check
// depends on the machine's speed: B's latencies beside A are a figure.
// B must get 201 for every charge, never a 429. A must get only 201 or
// 429, with 429s in its flood. Its 201s must fit its limit over the time
// its requests were in flight. Both ledgers must match the answers, and
// no refusal may store a key.
func failures(s benchout.Isolation) []string {
	var failed []string
	fail := func(format string, args ...any) { failed = append(failed, fmt.Sprintf(format, args...)) }
	for _, r := range []struct {
		name string
		run  benchout.TenantRun
	}{{"B alone", s.BAlone}, {"B beside A at its limit", s.BBesideLimit}, {"B beside A's flood", s.BBesideFlood}} {
		if r.run.Requests != r.run.Answers["201"] {
			fail("%s: %d of %d charges not answered 201 (%v)", r.name, r.run.Requests-r.run.Answers["201"], r.run.Requests, r.run.Answers)
		}
	}
	for _, r := range []struct {
		name string
		run  benchout.TenantRun
	}{{"A at its limit", s.AAtLimit}, {"A's flood", s.AFlood}} {
		if other := r.run.Requests - r.run.Answers["201"] - r.run.Answers["429"]; other > 0 {
			fail("%s: %d answers neither 201 nor 429 (%v)", r.name, other, r.run.Answers)
		}
		// The limiter's bucket is a second deep. So each phase may take one
		// second's worth more than its span allows.
		if most := float64(s.ALimit) * (r.run.SpanSeconds + float64(s.Rounds)); float64(r.run.Answers["201"]) > most {
			fail("%s: %d answered 201, more than its limit allows in %.1f s (%.0f)", r.name, r.run.Answers["201"], r.run.SpanSeconds, most)
		}
	}
	if s.AFlood.Answers["429"] == 0 {
		fail("A's flood: no 429")
	}
	for _, t := range []struct {
		name string
		c    benchout.Check
	}{{"A", s.ACheck}, {"B", s.BCheck}} {
		c := t.c
		if c.Duplicates != 0 || c.Missing != 0 || c.Stray != 0 || c.LedgerCharges != c.Created || c.Rows != c.Created {
			fail("%s's ledger: %d answered 201, %d charges, %d rows, %d duplicates, %d missing, %d stray",
				t.name, c.Created, c.LedgerCharges, c.Rows, c.Duplicates, c.Missing, c.Stray)
		}
	}
	if s.BCheck.Created != s.BCheck.Logical {
		fail("B: %d keys, %d charged", s.BCheck.Logical, s.BCheck.Created)
	}
	if s.ARefusedStored > 0 {
		fail("A: %d keys answered 429 have a record", s.ARefusedStored)
	}
	return failed
}

// vegetaVersion is the load generator and the version this binary was
// built with.
func vegetaVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tsenart/vegeta/v12" {
				return "vegeta " + d.Version
			}
		}
	}
	return "vegeta"
}

func printIsolation(w io.Writer, s benchout.Isolation) {
	fmt.Fprintf(w, "%s, %d rounds of three %.0f s phases; A limited to %d/s, flooding at %.0f/s; B at %.0f/s\n", s.Tool, s.Rounds, s.PhaseSeconds, s.ALimit, s.ARate, s.BRate)
	for _, r := range []struct {
		name string
		run  benchout.TenantRun
	}{{"B alone", s.BAlone}, {"B, A at limit", s.BBesideLimit}, {"B, A flooding", s.BBesideFlood}, {"A at limit", s.AAtLimit}, {"A flooding", s.AFlood}} {
		l := r.run.Latency
		fmt.Fprintf(w, "%-13s n=%-5d p50 %7.2f ms  p99 %7.2f ms  admitted %.1f/s  answers %v\n", r.name, r.run.Requests, l.P50, l.P99, r.run.AdmittedPerSecond, r.run.Answers)
	}
	fmt.Fprintf(w, "B beside A's flood over B alone (the figure, not a check): p50 %.2f×, p99 %.2f×; over B beside A at its limit: p50 %.2f×, p99 %.2f×\n",
		s.P50Ratio, s.P99Ratio, s.ExcessP50Ratio, s.ExcessP99Ratio)
	for _, t := range []struct {
		name string
		c    benchout.Check
	}{{"A", s.ACheck}, {"B", s.BCheck}} {
		fmt.Fprintf(w, "%s: %d keys, %d answered 201; ledger %d charges in %d calls; %d rows; %d duplicates, %d missing, %d stray\n",
			t.name, t.c.Logical, t.c.Created, t.c.LedgerCharges, t.c.ProviderCalls, t.c.Rows, t.c.Duplicates, t.c.Missing, t.c.Stray)
	}
	fmt.Fprintf(w, "A's keys answered 429 with a record: %d; ok=%t\n", s.ARefusedStored, s.OK)
}
