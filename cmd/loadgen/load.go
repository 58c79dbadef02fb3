package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// loadConfig is a load run's configuration.
type loadConfig struct {
	workload
	target, provider, dynamoDB string
	idemTable, chargesTable    string
	tenant                     string
	maxInFlight                int
	timeout, settle, drain     time.Duration
	keep                       bool
	out                        string
}

func parseLoadFlags(args []string, getenv func(string) string) (loadConfig, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	c := loadFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return loadConfig{}, err
	}
	return c.finish(fs)
}

// loadFlags defines a load run's flags on fs, and returns the configuration
// they fill in. finish completes and checks it once fs is parsed.
func loadFlags(fs *flag.FlagSet, getenv func(string) string) *loadConfig {
	c := &loadConfig{}
	fs.IntVar(&c.Ops, "n", 20000, "logical charges")
	fs.Float64Var(&c.Rate, "rate", 2080, "requests per second, sent whatever the answers")
	fs.Float64Var(&c.RetryOnce, "retry-once", 0.03, "share of logical charges retried once")
	fs.Float64Var(&c.RetryTwice, "retry-twice", 0.005, "share of logical charges retried twice")
	fs.Float64Var(&c.Concurrent, "concurrent", 0.01, "share of logical charges sent twice at the same instant")
	fs.DurationVar(&c.RetryDelay, "retry-delay", 500*time.Millisecond, "time from an attempt to its retry")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the choice of retried charges")
	fs.IntVar(&c.maxInFlight, "max-inflight", 512, "most requests outstanding; more are dropped")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "client timeout of one request")
	fs.StringVar(&c.target, "target", "http://127.0.0.1:3000", "the charge API")
	fs.StringVar(&c.provider, "provider", "http://127.0.0.1:4010", "the provider simulator")
	fs.StringVar(&c.dynamoDB, "dynamodb", getenv(awsenv.EnvDynamoDBEndpoint), "DynamoDB endpoint of the stack (default $DYNAMODB_ENDPOINT, else http://127.0.0.1:4566)")
	fs.StringVar(&c.idemTable, "idempotency-table", "chargeonce-idempotency", "the stack's idempotency table")
	fs.StringVar(&c.chargesTable, "charges-table", "chargeonce-charges", "the stack's charges table")
	fs.DurationVar(&c.settle, "settle", time.Minute, "how long to wait for commands left in flight to be reconciled before checking")
	fs.DurationVar(&c.drain, "drain", 0, "how much longer than -settle to wait for charges still missing then: a stack that fell behind resolves them late, one that lost them never")
	fs.BoolVar(&c.keep, "keep", false, "keep the run's records and rows (by default they are deleted after the check)")
	fs.StringVar(&c.tenant, "tenant", "", "tenant to charge for (default load-<random>)")
	fs.StringVar(&c.out, "out", "out/load", "write the summary to OUT.json")
	return c
}

func (c *loadConfig) finish(fs *flag.FlagSet) (loadConfig, error) {
	if fs.NArg() > 0 {
		return loadConfig{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.dynamoDB == "" {
		c.dynamoDB = "http://127.0.0.1:4566"
	}
	if c.tenant == "" {
		var b [4]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		c.tenant = "load-" + hex.EncodeToString(b[:])
	}
	if err := idem.CheckTenant(c.tenant); err != nil {
		return loadConfig{}, fmt.Errorf("tenant: %w", err)
	}
	if err := c.validate(); err != nil {
		return loadConfig{}, err
	}
	if c.maxInFlight < 1 || c.timeout <= 0 || c.settle < 0 || c.drain < 0 {
		return loadConfig{}, errors.New("-max-inflight and -timeout must be positive, -settle and -drain not negative")
	}
	for _, u := range []string{c.target, c.provider, c.dynamoDB} {
		if err := loopback(u); err != nil {
			return loadConfig{}, err
		}
	}
	return *c, nil
}

// loopback refuses a URL whose host is not a loopback address or
// "localhost". The load is for the local stack only.
func loopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http URL", raw)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address: loadgen only loads the local stack", host)
}

func loadMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseLoadFlags(args, getenv)
	if err != nil {
		return err
	}
	hc := c.client()
	if err := reachable(ctx, hc, c.target); err != nil {
		return err
	}
	s, err := runLoad(ctx, c, hc, stderr)
	if err != nil {
		return err
	}
	printSummary(stdout, s)
	return failed(s.Check)
}

// client is the HTTP client of a load run. It keeps one idle connection per
// request that may be in flight.
func (c loadConfig) client() *http.Client {
	return &http.Client{
		Timeout: c.timeout,
		Transport: &http.Transport{
			MaxIdleConns: c.maxInFlight, MaxIdleConnsPerHost: c.maxInFlight, IdleConnTimeout: 90 * time.Second,
		},
	}
}

// failed reports duplicate, missing and stray charges.
func failed(c benchout.Check) error {
	if c.Duplicates > 0 || c.Missing > 0 || c.Stray > 0 {
		return fmt.Errorf("%d duplicates, %d missing, %d stray rows", c.Duplicates, c.Missing, c.Stray)
	}
	return nil
}

// runLoad sends c's plan, checks the ledger and the charges table, and
// writes the summary to c.out.json. It then deletes the run's records and
// rows unless c.keep.
func runLoad(ctx context.Context, c loadConfig, hc *http.Client, stderr io.Writer) (benchout.Summary, error) {
	keys := make([]string, c.Ops)
	for op := range c.Ops {
		keys[op] = fmt.Sprintf("op-%07d", op)
	}
	plan := c.plan()
	once, twice, twins := c.counts()
	s := benchout.Summary{
		Target: c.target, Tenant: c.tenant, Started: time.Now().UTC().Format(time.RFC3339), LoadAvg: testkit.LoadAvg(),
		Logical: c.Ops, RetriedOnce: once, RetriedTwice: twice, Concurrent: twins, Requests: len(plan),
		MaxInFlight: c.maxInFlight, TargetRate: c.Rate,
	}
	fmt.Fprintf(stderr, "loadgen: %d logical charges, %d requests at %.0f/s for tenant %s against %s\n",
		c.Ops, len(plan), c.Rate, c.tenant, c.target)

	r := &runner{client: hc, url: strings.TrimRight(c.target, "/") + "/charges", tenant: c.tenant, maxInFlight: c.maxInFlight, progress: stderr}
	outcomes, elapsed := r.run(ctx, plan, func(op int) request {
		return request{key: keys[op], body: fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":"tok_visa","description":"load %d"}`, 100+op%9900, op)}
	})
	s.Seconds = elapsed.Seconds()
	tally(&s, plan, outcomes)

	db, err := dynamoClient(ctx, c.dynamoDB)
	if err != nil {
		return benchout.Summary{}, err
	}
	byOp := make([][]outcome, c.Ops)
	sent := make([]bool, c.Ops)
	for i, o := range outcomes {
		byOp[plan[i].op] = append(byOp[plan[i].op], o)
		sent[plan[i].op] = sent[plan[i].op] || o.sent
	}
	// A command's references derive from its record's creation.
	refs, ids, err := references(ctx, db, c.idemTable, c.tenant, keys, sent)
	if err != nil {
		return benchout.Summary{}, err
	}
	var sentKeys, sentIDs []string // what the cleanup deletes
	for op, ok := range sent {
		if ok {
			sentKeys, sentIDs = append(sentKeys, keys[op]), append(sentIDs, ids[op])
		}
	}
	// A command left in flight (a request that ran out of time) is
	// resolved by the stack's sweeper and reconciler. Wait for them.
	w, err := waitForCharges(ctx, c.settle, c.drain, 2*time.Second, func(ctx context.Context) (checked, error) {
		ledger, err := ledgerEntries(ctx, hc, c.provider)
		if err != nil {
			return checked{}, err
		}
		rows, err := chargeRows(ctx, db, c.chargesTable, c.tenant)
		if err != nil {
			return checked{}, err
		}
		return check(keys, refs, byOp, ledger, rows), nil
	})
	if err != nil {
		return benchout.Summary{}, err
	}
	s.Check, s.SettleSeconds, s.MissingAtSettle, s.DrainSeconds = w.check.Check, w.settle.Seconds(), w.missingAtSettle, w.drain.Seconds()
	if s.MissingAtSettle > 0 {
		fmt.Fprintf(stderr, "loadgen: %d charges missing after the %.0f s settle, %d after %.0f s more\n",
			s.MissingAtSettle, s.SettleSeconds, s.Check.Missing, s.DrainSeconds)
		if err := describeMissing(ctx, stderr, db, c.idemTable, c.tenant, keys, w.check.missing); err != nil {
			return benchout.Summary{}, err
		}
	}

	if err := writeJSON(c.out, s); err != nil {
		return benchout.Summary{}, err
	}
	if !c.keep {
		if err := cleanup(ctx, db, c.idemTable, c.chargesTable, c.tenant, sentKeys, sentIDs); err != nil {
			return benchout.Summary{}, err
		}
	}
	return s, nil
}

// waited is what waitForCharges saw.
type waited struct {
	check           checked       // the last check
	settle, drain   time.Duration // how long it waited for each
	missingAtSettle int
}

// waitForCharges checks every poll interval until nothing is missing or
// settle has passed. It notes what was missing then. While charges are
// still missing it goes on for up to drain more.
func waitForCharges(ctx context.Context, settle, drain, every time.Duration, poll func(context.Context) (checked, error)) (waited, error) {
	var w waited
	start, settled := time.Now(), false
	for {
		c, err := poll(ctx)
		if err != nil {
			return waited{}, err
		}
		w.check = c
		elapsed := time.Since(start)
		if !settled && (c.Missing == 0 || elapsed >= settle) {
			settled, w.settle, w.missingAtSettle = true, elapsed, c.Missing
		}
		if c.Missing == 0 || elapsed >= settle+drain {
			w.drain = elapsed - w.settle
			return w, nil
		}
		select {
		case <-ctx.Done():
			return waited{}, ctx.Err()
		case <-time.After(every):
		}
	}
}

// reachable fails fast when nothing answers at target.
func reachable(ctx context.Context, hc *http.Client, target string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(target, "/")+"/charges/probe", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("nothing answers at %s (start the stack with `make run`): %w", target, err)
	}
	_ = resp.Body.Close()
	return nil
}

// tally fills in the counts, rates and latencies of s.
func tally(s *benchout.Summary, plan []send, outcomes []outcome) {
	groups := map[string][]time.Duration{"first": nil, "replay": nil, "concurrent": nil}
	s.Answers = map[string]map[string]int{}
	answered := 0
	var lag time.Duration
	for i, o := range outcomes {
		k := plan[i].kind.String()
		if s.Answers[k] == nil {
			s.Answers[k] = map[string]int{}
		}
		s.Answers[k][o.answer()]++
		if !o.sent {
			s.Dropped++
			continue
		}
		s.Sent++
		lag = max(lag, o.lag)
		if o.status == 0 {
			continue
		}
		answered++
		switch {
		case plan[i].kind == kindFirst && o.status == http.StatusCreated && !o.replayed:
			groups["first"] = append(groups["first"], o.latency)
		case plan[i].kind == kindRetry && o.status == http.StatusCreated && o.replayed:
			groups["replay"] = append(groups["replay"], o.latency)
		case plan[i].kind == kindConcurrent:
			groups["concurrent"] = append(groups["concurrent"], o.latency)
		}
	}
	if s.Seconds > 0 {
		s.AchievedRate = float64(answered) / s.Seconds
	}
	s.MaxLagMs = ms(lag)
	s.Latency = map[string]benchout.Latency{}
	for name, ds := range groups {
		s.Latency[name] = summarize(ds)
	}
}

func dynamoClient(ctx context.Context, endpoint string) (*dynamodb.Client, error) {
	// Loopback only: the emulator takes any credentials.
	cfg, err := awsenv.Config(ctx, true)
	if err != nil {
		return nil, err
	}
	return awsenv.New(cfg, awsenv.Endpoints{DynamoDB: endpoint}).DynamoDB, nil
}

func printSummary(w io.Writer, s benchout.Summary) {
	fmt.Fprintf(w, "requests: %d planned, %d sent, %d dropped at the in-flight cap of %d\n", s.Requests, s.Sent, s.Dropped, s.MaxInFlight)
	fmt.Fprintf(w, "rate: %.0f req/s offered, %.1f req/s answered over %.1f s (send lag at most %.1f ms)\n", s.TargetRate, s.AchievedRate, s.Seconds, s.MaxLagMs)
	for _, g := range []string{"first", "replay", "concurrent"} {
		l := s.Latency[g]
		fmt.Fprintf(w, "%-10s n=%-6d p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms  max %8.2f ms\n", g, l.Count, l.P50, l.P95, l.P99, l.Max)
	}
	for _, k := range []string{"first", "retry", "concurrent"} {
		fmt.Fprintf(w, "answers to %-10s %v\n", k, s.Answers[k])
	}
	c := s.Check
	fmt.Fprintf(w, "check: %d logical, %d created, %d unanswered; ledger %d charges in %d provider calls; %d rows; %d duplicates, %d missing, %d stray; ok=%t\n",
		c.Logical, c.Created, c.Unanswered, c.LedgerCharges, c.ProviderCalls, c.Rows, c.Duplicates, c.Missing, c.Stray, c.OK)
}
