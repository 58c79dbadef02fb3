package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/client"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// config is a run's configuration.
type config struct {
	stack    string
	duration time.Duration
	// outage is the end of duration in which DynamoDB fails, instead of
	// the random faults. A backlog of reconcile messages grows from it.
	outage     time.Duration
	rate       float64
	settle     time.Duration
	sweepEvery time.Duration
	seed       uint64
	out        string
	// endpoints are the emulator's; environ is the stack's environment
	// but for them.
	endpoints awsenv.Endpoints
	environ   []string
}

// stackDefaults are the stack's settings for a run, unless the
// environment sets them. A short settle window and backoff let what the
// faults left settle within minutes of healing. The settle window
// outlasts the longest delay a fault puts on a request.
var stackDefaults = map[string]string{
	app.EnvSettleWindow: "30s",
	app.EnvRetryBase:    "5s",
	app.EnvRetryCap:     "1m",
}

// abandonShare is the chance that a client told that nothing was done
// gives up there: the ledger must then show nothing done.
const abandonShare = 0.5

func parseFlags(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	c := config{endpoints: awsenv.EndpointsFrom(getenv)}
	fs.StringVar(&c.stack, "stack", "out/localstack", "the local stack's binary (go build -o out/localstack ./cmd/localstack)")
	fs.DurationVar(&c.duration, "duration", 3*time.Minute, "how long the load runs under faults")
	fs.DurationVar(&c.outage, "outage", 0, "the end of -duration in which DynamoDB resets or cuts short half its connections, instead of random faults")
	fs.Float64Var(&c.rate, "rate", 5, "charges and authorizations begun a second")
	fs.DurationVar(&c.settle, "settle", 10*time.Minute, "how long after healing everything may take to settle")
	fs.DurationVar(&c.sweepEvery, "sweep-every", 5*time.Second, "the stack's sweeper interval")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the faults and the load (0: drawn from the clock)")
	fs.StringVar(&c.out, "out", "out/chaos", "writes OUT.json and OUT-stack.log")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0 || c.duration <= 0 || c.outage < 0 || c.outage > c.duration || c.rate <= 0 || c.settle <= 0 || c.sweepEvery <= 0:
		return config{}, fmt.Errorf("bad arguments %q", args)
	case c.endpoints.DynamoDB == "" || c.endpoints.SQS == "" || c.endpoints.SecretsManager == "":
		return config{}, fmt.Errorf("%s, %s and %s must name the emulator (make chaos runs under scripts/with-emulator.sh)",
			awsenv.EnvDynamoDBEndpoint, awsenv.EnvSQSEndpoint, awsenv.EnvSecretsManagerEndpoint)
	case getenv(app.EnvProvider) != "" && getenv(app.EnvProvider) != app.ProviderSim:
		return config{}, errors.New("the checks read the provider simulator's ledger: PROVIDER must be sim")
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

// stackEnv is the stack's environment: environ with the endpoints
// replaced, and stackDefaults where environ sets nothing.
func stackEnv(environ []string, endpoints awsenv.Endpoints) []string {
	set := map[string]string{
		awsenv.EnvDynamoDBEndpoint: endpoints.DynamoDB, awsenv.EnvSQSEndpoint: endpoints.SQS,
		awsenv.EnvSecretsManagerEndpoint: endpoints.SecretsManager,
	}
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, replaced := set[name]; !replaced {
			env = append(env, kv)
		}
	}
	for name, v := range set {
		env = append(env, name+"="+v)
	}
	for name, v := range stackDefaultsLeft(environ) {
		env = append(env, name+"="+v)
	}
	slices.Sort(env)
	return env
}

// stackDefaultsLeft are the stackDefaults environ does not set.
func stackDefaultsLeft(environ []string) map[string]string {
	left := map[string]string{}
	for name, v := range stackDefaults {
		left[name] = v
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		delete(left, name)
	}
	return left
}

// freeAddr is a free loopback address, for the simulator, which the
// provider's proxy must name before the stack starts.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// run runs the stack behind the proxies, the load under faults, the
// healing and the settling, then the checks. It writes the report to w
// and to cfg.out.json.
func run(ctx context.Context, cfg config, w io.Writer) (report, error) {
	ddb, err := hostPort(cfg.endpoints.DynamoDB)
	if err != nil {
		return report{}, err
	}
	sqsAddr, err := hostPort(cfg.endpoints.SQS)
	if err != nil {
		return report{}, err
	}
	simAddr, err := freeAddr()
	if err != nil {
		return report{}, err
	}
	px, err := startProxies(map[string]string{targetDynamoDB: ddb, targetSQS: sqsAddr, targetProvider: simAddr})
	if err != nil {
		return report{}, err
	}
	defer px.stop()
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return report{}, err
	}
	logf, err := os.Create(cfg.out + "-stack.log")
	if err != nil {
		return report{}, err
	}
	defer logf.Close()
	proxied := awsenv.Endpoints{DynamoDB: px.url(targetDynamoDB), SQS: px.url(targetSQS), SecretsManager: cfg.endpoints.SecretsManager}
	st, err := startStack(ctx, cfg.stack, []string{"-addr", "127.0.0.1:0", "-provider-addr", simAddr,
		"-provider-url", px.url(targetProvider), "-sweep-every", cfg.sweepEvery.String()}, stackEnv(cfg.environ, proxied), logf)
	if err != nil {
		return report{}, err
	}
	defer func() { _ = st.stop() }()
	fmt.Fprintf(w, "chaos: seed %d; the stack at %s, its DynamoDB, SQS and provider behind Toxiproxy; its log in %s-stack.log\n", cfg.seed, st.ready.API, cfg.out)

	r := &runner{cfg: cfg, px: px, st: st, w: w}
	if err := r.clients(ctx); err != nil {
		return report{}, err
	}
	rep, err := r.run(ctx)
	if err != nil {
		return report{}, err
	}
	rep.print(w)
	b, _ := json.MarshalIndent(rep, "", "  ")
	return rep, os.WriteFile(cfg.out+".json", append(b, '\n'), 0o644)
}

// runner is one run's state.
type runner struct {
	cfg    config
	px     *proxies
	st     *stack
	w      io.Writer
	sqs    *sqs.Client
	store  *dynamostore.Store
	rows   *charge.Rows
	tenant string
}

// clients builds the clients the checks read the tables and the queue
// with, past the proxies.
func (r *runner) clients(ctx context.Context) error {
	awsCfg, err := awsenv.Config(ctx, false)
	if err != nil {
		return err
	}
	c := awsenv.New(awsCfg, r.cfg.endpoints)
	r.sqs = c.SQS
	if r.store, err = dynamostore.New(c.DynamoDB, r.st.ready.IdempotencyTable); err != nil {
		return err
	}
	r.rows, err = charge.NewRows(c.DynamoDB, r.st.ready.ChargesTable)
	r.tenant = fmt.Sprintf("chaos-%d", r.cfg.seed)
	return err
}

func (r *runner) run(ctx context.Context) (report, error) {
	rep := report{Seed: r.cfg.seed, Duration: r.cfg.duration.String(), Outage: r.cfg.outage.String(), Rate: r.cfg.rate, Settings: stackDefaultsLeft(r.cfg.environ)}
	start := time.Now()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	l := &load{api: r.st.ready.API, token: "dev:" + r.tenant, hc: hc, followUntil: start.Add(r.cfg.duration),
		abandonShare: abandonShare, rng: rand.New(rand.NewPCG(r.cfg.seed, 0))}
	intentsCtx, stopIntents := context.WithDeadline(ctx, start.Add(r.cfg.duration+r.cfg.settle))
	defer stopIntents()
	sampler := r.sampleQueue(intentsCtx)

	loadCtx, stopLoad := context.WithDeadline(ctx, start.Add(r.cfg.duration))
	defer stopLoad()
	faultsCtx, stopFaults := context.WithDeadline(ctx, start.Add(r.cfg.duration-r.cfg.outage))
	defer stopFaults()
	var (
		faults []fault
		mu     sync.Mutex
		wg     sync.WaitGroup
		errs   []error
	)
	for i, target := range r.px.names() {
		wg.Go(func() {
			fs, err := r.px.inject(faultsCtx, target, rand.New(rand.NewPCG(r.cfg.seed, uint64(i+1))))
			mu.Lock()
			defer mu.Unlock()
			faults = append(faults, fs...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Go(func() {
		<-faultsCtx.Done()
		if r.cfg.outage == 0 || loadCtx.Err() != nil {
			return
		}
		f, err := r.px.outage(targetDynamoDB)
		mu.Lock()
		defer mu.Unlock()
		faults = append(faults, f)
		if err != nil {
			errs = append(errs, err)
		}
	})
	tick := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.rate))
	for loadCtx.Err() == nil {
		select {
		case <-tick.C:
			l.root(intentsCtx)
		case <-loadCtx.Done():
		}
	}
	tick.Stop()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	healed := time.Now()
	if err := r.px.heal(ctx); err != nil {
		return rep, err
	}
	r.st.tally.heal(healed)
	rep.HealedAt, rep.QueueAtHeal = healed, sampler.now()
	fmt.Fprintf(r.w, "chaos: %d faults injected in %s; healed, settling\n", len(faults), r.cfg.duration)

	settledAt, err := r.settle(intentsCtx, l, healed)
	if err != nil {
		return rep, err
	}
	stopIntents()
	intents := l.all()
	rep.figures(intents, faults)
	if !settledAt.IsZero() {
		rep.SettleSeconds = settledAt.Sub(healed).Seconds()
	}
	rep.QueuePeak = sampler.peak()
	rep.Queue = r.st.tally.figures()
	return rep, r.checks(ctx, &rep, l, intents)
}

// settle waits until every intent has ended and nothing is left in
// flight, checking every second. It returns when that was; zero if ctx
// ended first.
func (r *runner) settle(ctx context.Context, l *load, healed time.Time) (time.Time, error) {
	ended := make(chan struct{})
	go func() { l.wg.Wait(); close(ended) }()
	for {
		select {
		case <-ended:
			left, err := r.inFlight(ctx)
			if err != nil && ctx.Err() == nil {
				return time.Time{}, err
			}
			if err == nil && len(left) == 0 {
				return time.Now(), nil
			}
		default:
		}
		if !sleep(ctx, time.Second) {
			<-ended
			return time.Time{}, nil
		}
	}
}

// inFlight are the run's commands and moves left in flight, live leases
// included.
func (r *runner) inFlight(ctx context.Context) ([]string, error) {
	far := time.Now().Add(24 * time.Hour)
	var keys []string
	for shard := range r.store.Shards() {
		for rec, err := range r.store.StuckLeases(ctx, shard, far) {
			if err != nil {
				return nil, err
			}
			if rec.Key.Tenant() == r.tenant {
				keys = append(keys, rec.Key.String())
			}
		}
	}
	for rec, err := range r.rows.StuckLeases(ctx, 0, far) {
		if err != nil {
			return nil, err
		}
		if rec.Key.Tenant() == r.tenant {
			keys = append(keys, rec.Key.String())
		}
	}
	return keys, nil
}

// checks repeats each command and move once more, reads every charge
// answered, and checks it all against the provider's ledger.
func (r *runner) checks(ctx context.Context, rep *report, l *load, intents []*intent) error {
	ledgerOf, err := readLedger(ctx, r.st.ready.Provider)
	if err != nil {
		return err
	}
	x := indexLedger(ledgerOf)
	var (
		mu    sync.Mutex
		got   = map[*intent]client.Charge{}
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, 8)
	)
	for _, in := range intents {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ch, err := l.again(ctx, in)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if ch != nil {
				got[in] = *ch
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	left, err := r.inFlight(ctx)
	if err != nil {
		return err
	}
	rep.Checks = []check{
		checkOnce(intents, x), checkTrue(intents, x), checkReplays(intents), checkRepeats(intents),
		checkCharges(got, x), checkSettled(intents, left), checkNo500(intents),
	}
	rep.Passed = true
	for _, c := range rep.Checks {
		rep.Passed = rep.Passed && c.Failed == 0
	}
	return nil
}

// again sends in's request once more, once everything settled. A
// command with a stored answer is replayed; a done capture or cancel is
// made again. It returns the charge a done charge or authorization reads
// as.
func (l *load) again(ctx context.Context, in *intent) (*client.Charge, error) {
	c, err := client.New(l.api, client.WithHTTPClient(recorder{l.hc, in}), client.WithToken(l.token))
	if err != nil {
		return nil, err
	}
	switch {
	case in.End == endDone && (in.Kind == kindCapture || in.Kind == kindCancel):
		_ = l.call(ctx, c, in)
		as := in.recorded()
		in.repeat = as[len(as)-1]
	case in.final.stored():
		_ = l.call(ctx, c, in)
	}
	if in.End != endDone || in.Kind != kindCharge && in.Kind != kindAuthorize {
		return nil, nil
	}
	ch, err := c.Get(ctx, in.charge.ID)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", in.charge.ID, err)
	}
	return &ch, nil
}

// readLedger reads the provider simulator's ledger at base.
func readLedger(ctx context.Context, base string) (providersim.Ledger, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/ledger", nil)
	if err != nil {
		return providersim.Ledger{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return providersim.Ledger{}, fmt.Errorf("ledger: %w", err)
	}
	defer resp.Body.Close()
	var l providersim.Ledger
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return providersim.Ledger{}, fmt.Errorf("ledger: %w", err)
	}
	return l, nil
}

// sampler reads the reconcile queue's depth every second: the messages
// waiting, in flight and delayed.
type sampler struct {
	mu        sync.Mutex
	last, max int
}

func (s *sampler) now() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *sampler) peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

func (r *runner) sampleQueue(ctx context.Context) *sampler {
	s := &sampler{}
	names := []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}
	go func() {
		for sleep(ctx, time.Second) {
			out, err := r.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.st.ready.ReconcileQueue), AttributeNames: names})
			if err != nil {
				continue
			}
			n := 0
			for _, name := range names {
				var v int
				_, _ = fmt.Sscan(out.Attributes[string(name)], &v)
				n += v
			}
			s.mu.Lock()
			s.last, s.max = n, max(s.max, n)
			s.mu.Unlock()
		}
	}()
	return s
}
