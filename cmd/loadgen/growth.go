package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// growthConfig is a growth run's configuration. It holds the load flags,
// the table sizes and how to reach them, and the reference stack, if any.
type growthConfig struct {
	loadConfig
	sizes      []int
	fillers    int
	reconciles int
	// reference is the load configuration for the reference stack; its
	// target is "" without one.
	reference loadConfig
}

// growthMain measures the same fixed-rate run as the tables grow:
//
//	loadgen growth [-sizes 0,10000,50000] [-fillers 16] [-reconciles 20]
//	        [-reference-target URL -reference-provider URL -reference-dynamodb URL]
//	        [load flags, here -n 1800 -rate 60 -retry-once 0.2 by default]
//	        [-out out/growth]
//
// Before each step it makes charges until the stack has made that many
// since the run began. The steps' own charges count too. It makes them as
// fast as -fillers clients get them answered.
//
// A step is the seeds' mix at the fixed rate (first calls and replays).
// Then come -reconciles commands whose provider call loses its answer
// (tok_timeout_once). Each is timed from when its reconcile message was due
// to its record's settling (see reconcileRun). The run keeps what it wrote
// there: the point is a table that grows.
//
// With a reference stack, each step runs the same on it too, first. It then
// deletes what the mix wrote there, so its tables stay near empty. The two
// stacks' figures are taken in the same minutes on a shared machine. So
// they compare the table sizes under the same load.
//
// It writes OUT.json (see benchout.Growth). It writes each run's load
// summary as OUT-<size>.json (and OUT-reference-<size>.json). It exits 1 if
// a step found a duplicate or a missing charge.
func growthMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseGrowthFlags(args, getenv)
	if err != nil {
		return err
	}
	hc := c.client()
	for _, target := range []string{c.target, c.reference.target} {
		if target == "" {
			continue
		}
		if err := reachable(ctx, hc, target); err != nil {
			return err
		}
	}
	out := benchout.Growth{Started: time.Now().UTC().Format(time.RFC3339), Rate: c.Rate, Logical: c.Ops, Reconciles: c.reconciles}
	made := 0
	var failures []error
	for i, size := range c.sizes {
		start := time.Now()
		if size > made {
			fmt.Fprintf(stderr, "loadgen growth: %d charges more, up to %d\n", size-made, size)
			n, err := fill(ctx, hc, c, fmt.Sprintf("%s-fill%d", c.tenant, i), size-made)
			if err != nil {
				return err
			}
			made += n
		}
		step := benchout.GrowthStep{Charges: made, FillSeconds: time.Since(start).Seconds()}
		if c.reference.target != "" {
			run := c.reference
			run.tenant, run.out = fmt.Sprintf("%s-ref%d", c.tenant, i), fmt.Sprintf("%s-reference-%d", c.out, size)
			ref, _, err := measureGrowth(ctx, hc, c, run, stderr)
			if err != nil {
				return err
			}
			step.Reference = &ref
		}
		run := c.loadConfig
		run.tenant, run.out, run.keep = fmt.Sprintf("%s-%d", c.tenant, i), fmt.Sprintf("%s-%d", c.out, size), true
		var created int
		if step.Stack, created, err = measureGrowth(ctx, hc, c, run, stderr); err != nil {
			return err
		}
		made += created
		for _, r := range []*benchout.GrowthRun{&step.Stack, step.Reference} {
			if r != nil && !r.OK {
				failures = append(failures, fmt.Errorf("after %d charges: the check failed (see %s-*.json)", step.Charges, c.out))
			}
		}
		out.Steps = append(out.Steps, step)
		st := step.Stack
		fmt.Fprintf(stdout, "after %6d charges (load %s): first p50 %.2f / p99 %.2f ms, replay p50 %.2f / p99 %.2f ms, reconcile p50 %.0f / p99 %.0f ms\n",
			step.Charges, st.LoadAvg, st.First.P50, st.First.P99, st.Replay.P50, st.Replay.P99, st.Reconcile.P50, st.Reconcile.P99)
		if ref := step.Reference; ref != nil {
			fmt.Fprintf(stdout, "       the reference (load %s): first p50 %.2f / p99 %.2f ms, replay p50 %.2f / p99 %.2f ms, reconcile p50 %.0f / p99 %.0f ms\n",
				ref.LoadAvg, ref.First.P50, ref.First.P99, ref.Replay.P50, ref.Replay.P99, ref.Reconcile.P50, ref.Reconcile.P99)
		}
	}
	if err := writeJSON(c.out, out); err != nil {
		return err
	}
	return errors.Join(failures...)
}

// measureGrowth runs one stack's part of a step, run. That is the mix at
// the fixed rate, then the reconciles. It returns its figures and how many
// charges it made.
func measureGrowth(ctx context.Context, hc *http.Client, c growthConfig, run loadConfig, stderr io.Writer) (benchout.GrowthRun, int, error) {
	s, err := runLoad(ctx, run, hc, stderr)
	if err != nil {
		return benchout.GrowthRun{}, 0, err
	}
	r := benchout.GrowthRun{LoadAvg: s.LoadAvg, First: s.Latency["first"], Replay: s.Latency["replay"], OK: failed(s.Check) == nil}
	db, err := dynamoClient(ctx, run.dynamoDB)
	if err != nil {
		return benchout.GrowthRun{}, 0, err
	}
	store, err := dynamostore.New(db, run.idemTable)
	if err != nil {
		return benchout.GrowthRun{}, 0, err
	}
	if r.Reconcile, err = reconcileRun(ctx, hc, store, run, c.reconciles); err != nil {
		return benchout.GrowthRun{}, 0, err
	}
	return r, s.Check.Created + c.reconciles, nil
}

func parseGrowthFlags(args []string, getenv func(string) string) (growthConfig, error) {
	fs := flag.NewFlagSet("loadgen growth", flag.ContinueOnError)
	lc := loadFlags(fs, getenv)
	// A run short enough to repeat at each size. Its rate is one the stack
	// takes on two shared cores. It has replays enough for a p99.
	for name, v := range map[string]string{"n": "1800", "rate": "60", "retry-once": "0.2", "out": "out/growth"} {
		f := fs.Lookup(name)
		f.DefValue = v
		if err := f.Value.Set(v); err != nil {
			return growthConfig{}, err
		}
	}
	sizes := fs.String("sizes", "0,10000,50000", "charges made before each step, ascending")
	c := growthConfig{}
	fs.IntVar(&c.fillers, "fillers", 16, "clients making the charges between steps")
	fs.IntVar(&c.reconciles, "reconciles", 20, "commands left to the reconciler at each step, half a second apart")
	var ref struct{ target, provider, dynamoDB string }
	fs.StringVar(&ref.target, "reference-target", "", "the charge API of a reference stack whose tables stay empty (optional)")
	fs.StringVar(&ref.provider, "reference-provider", "", "its provider simulator")
	fs.StringVar(&ref.dynamoDB, "reference-dynamodb", "", "its DynamoDB endpoint")
	if err := fs.Parse(args); err != nil {
		return growthConfig{}, err
	}
	var err error
	if c.loadConfig, err = lc.finish(fs); err != nil {
		return growthConfig{}, err
	}
	last := -1
	for field := range strings.SplitSeq(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n <= last {
			return growthConfig{}, fmt.Errorf("-sizes %q: want ascending counts", *sizes)
		}
		c.sizes, last = append(c.sizes, n), n
	}
	if c.fillers < 1 || c.reconciles < 1 {
		return growthConfig{}, errors.New("-fillers and -reconciles must be positive")
	}
	if ref.target != "" {
		if ref.provider == "" || ref.dynamoDB == "" {
			return growthConfig{}, errors.New("-reference-target needs -reference-provider and -reference-dynamodb")
		}
		for _, u := range []string{ref.target, ref.provider, ref.dynamoDB} {
			if err := loopback(u); err != nil {
				return growthConfig{}, err
			}
		}
		c.reference = c.loadConfig
		c.reference.target, c.reference.provider, c.reference.dynamoDB = ref.target, ref.provider, ref.dynamoDB
	}
	return c, nil
}

// fill makes n charges for tenant and returns how many the stack created.
// Each of c.fillers clients sends the next fresh key once its last is
// answered. A key answered otherwise is not sent again.
func fill(ctx context.Context, hc *http.Client, c growthConfig, tenant string, n int) (int, error) {
	r := &runner{client: hc, url: strings.TrimRight(c.target, "/") + "/charges", tenant: tenant}
	var next, created atomic.Int64
	var wg sync.WaitGroup
	for range c.fillers {
		wg.Go(func() {
			for op := next.Add(1) - 1; op < int64(n) && ctx.Err() == nil; op = next.Add(1) - 1 {
				o := r.send(ctx, request{key: fmt.Sprintf("fill-%07d", op), body: `{"amount":100,"currency":"EUR","source":"tok_visa"}`})
				if o.status == http.StatusCreated {
					created.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(created.Load()), ctx.Err()
}

// reconcileRun sends n charges whose provider call loses its answer, half
// a second apart. It times the reconciler's work on each. The time runs
// from when its reconcile message was due until the record is settled.
// The handler delays the message, in whole seconds, to the end of the
// record's lease. The record is watched every 5 ms from then on.
func reconcileRun(ctx context.Context, hc *http.Client, store *dynamostore.Store, run loadConfig, n int) (benchout.Latency, error) {
	r := &runner{client: hc, url: strings.TrimRight(run.target, "/") + "/charges", tenant: run.tenant}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	ds := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		key := fmt.Sprintf("rec-%s-%03d", hex.EncodeToString(b[:]), i)
		wg.Go(func() { ds[i], errs[i] = reconcileOne(ctx, r, store, run.tenant, key, run.settle) })
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return benchout.Latency{}, err
	}
	return summarize(ds), nil
}

// reconcileOne is one command of reconcileRun.
func reconcileOne(ctx context.Context, r *runner, store *dynamostore.Store, tenant, key string, settle time.Duration) (time.Duration, error) {
	o := r.send(ctx, request{key: key, body: `{"amount":100,"currency":"EUR","source":"tok_timeout_once"}`})
	if o.status != http.StatusServiceUnavailable {
		return 0, fmt.Errorf("reconcile %s: answered %s, want 503 (outcome unknown)", key, o.answer())
	}
	answered := time.Now()
	rec, err := recordOf(ctx, store, tenant, key)
	if err != nil {
		return 0, err
	}
	if rec == nil || rec.Status != idem.StatusInFlight {
		return 0, fmt.Errorf("reconcile %s: settled before its lease ran out", key)
	}
	due := answered.Add(time.Duration(math.Ceil(rec.LeaseExpiresAt.Sub(answered).Seconds())) * time.Second)
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(time.Until(due)):
	}
	for {
		rec, err := recordOf(ctx, store, tenant, key)
		if err != nil {
			return 0, err
		}
		if rec.Status != idem.StatusInFlight {
			return time.Since(due), nil
		}
		if time.Since(due) > settle {
			return 0, fmt.Errorf("reconcile %s: not settled %s after its message was due", key, settle)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
