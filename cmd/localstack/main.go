// Command localstack runs the whole service on loopback for development. It
// runs in the foreground until SIGINT or SIGTERM, then stops everything it
// started.
//
// It starts the DynamoDB/SQS/Secrets Manager/S3 emulator
// (scripts/emulator.py from .venv). It uses DYNAMODB_ENDPOINT,
// SQS_ENDPOINT, SECRETSMANAGER_ENDPOINT and S3_ENDPOINT instead when all are
// set. It creates the tables, TTL, queues and the audit trail's bucket and
// index. Their definitions are those the template is checked against. It
// turns on the tables' streams. It creates the provider's API key and the
// webhook signing secret in Secrets Manager
// (chargeonce/provider-api-key, chargeonce/stripe-webhook-secret). Secrets
// that exist are kept. It serves the provider simulator. It serves the
// charge API through a local API Gateway (package gateway). The gateway
// fronts the handler app builds for the Lambda. That handler is configured
// through the same environment variables.
//
// The sweeper runs on a short interval. A local SQS event source (package
// eventsource) feeds each of the reconcile and intake handlers from its
// queue. A local event source on each table's stream feeds the audit
// function.
//
// Usage:
//
//	localstack [-addr 127.0.0.1:3000] [-provider-addr 127.0.0.1:4010]
//	           [-provider-url URL] [-emulator-port 4566] [-sweep-every 5s]
//	           [-slow 5s] [-root .] [-trace-json]
//
// The functions' other variables are read from the environment:
// TENANT_CLAIM, IDEMPOTENCY_TTL, INFLIGHT_WAIT, LOG_LEVEL,
// TENANT_RATE_LIMIT, TENANT_CONCURRENCY_LIMIT, LIMITS_MAX_AGE and
// SECRETS_MAX_AGE (5s here). The functions get the secrets' names. They read
// the values from Secrets Manager as deployed functions do.
//
// PROVIDER picks the provider side.
//
// sim (the default) is the provider simulator (providersim) on
// -provider-addr. Its key is the secret's (first sk_local_providersim).
//
// stripe makes the functions use the Stripe adapter. They use it against
// PROVIDER_URL if it is set (a running stripe-mock, say). Otherwise they use
// it against the stateful Stripe simulator (stripesim) served on
// -provider-addr. Its key is the secret's (first sk_test_localstack). It
// sends its signed webhooks to the API's POST /webhooks/stripe. It signs
// them with the webhook secret's value (first whsec_localstack).
//
// With -provider-url the functions reach the simulator there instead of at
// -provider-addr. That may be a proxy (cmd/chaos puts Toxiproxy there). The stack reads the secrets every second. A simulator takes their
// new values as a provider whose key was rolled. So a rotation takes effect
// without a restart.
//
// Logs are JSON lines on standard output; the banner goes to standard error.
// With -trace-json, every function's spans are JSON lines on standard
// output too (stdouttrace). Each span is one line, written as it ends.
// Without it tracing is off, as in a deployment without the ADOT layer.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/emulator"
	"github.com/chargeonce/chargeonce/internal/local/eventsource"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/secrets"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/tracing"
)

// The functions' timeouts in template.yaml; the reconcile function's is
// queue.ReconcileTimeout.
const (
	chargeTimeout  = 10 * time.Second
	sweeperTimeout = 50 * time.Second
	auditTimeout   = 60 * time.Second
)

// idleConns is how many idle connections the stack keeps open to the
// emulator and to the provider simulator. In Lambda each instance serves
// one request at a time. Here one process serves them all. The SDK keeps
// 10 idle connections per host by default (a plain http.Client: 2).
// Beyond them, every request closed its connection after use. The next
// opened another, and the emulator starts a thread for each.
const idleConns = 1024

func keepIdle(t *http.Transport) { t.MaxIdleConns, t.MaxIdleConnsPerHost = idleConns, idleConns }

// shutdownTimeout bounds how long in-flight requests may finish on exit.
const shutdownTimeout = 10 * time.Second

type options struct {
	root         string
	apiAddr      string
	providerAddr string
	// providerURL is where the functions reach the stack's simulator;
	// empty: its listen address.
	providerURL  string
	emulatorPort int
	sweepEvery   time.Duration
	slow         time.Duration
	// spans receives the functions' spans as JSON lines; nil, tracing
	// is off.
	spans  io.Writer
	getenv func(string) string
}

// secretsMaxAge is how long the stack's functions keep a secret's value
// unless SECRETS_MAX_AGE says otherwise. It is short, so that a rotated
// webhook secret takes effect within seconds. A rotated API key does at
// once, on the simulator's first 401.
const secretsMaxAge = 5 * time.Second

// followEvery is how often the stack reads its secrets for the simulators.
// They follow a rotation as a provider whose key was rolled.
const followEvery = time.Second

// server is a listener and what it serves.
type server struct {
	ln net.Listener
	h  http.Handler
}

// stack is where the running stack serves.
type stack struct {
	api, provider, dynamoDB, sqs string
	secretsManager, s3           string
	// functionsProvider is where the functions reach the stack's
	// simulator (-provider-url); empty when it serves none.
	functionsProvider string
	queueURL, dlqURL  string
	// intakeURL and intakeDLQURL are the charge-requests queue and its DLQ.
	intakeURL, intakeDLQURL string
	// dummyCredentials: the stack started its own emulator, which takes
	// any credentials.
	dummyCredentials bool
	sweepEvery, slow time.Duration
	// providerKind is PROVIDER; simulated: a stripe provider is the
	// stack's stripesim, not PROVIDER_URL.
	providerKind string
	simulated    bool
	// stripeSim is the stack's stripesim, when simulated.
	stripeSim *stripesim.Simulator
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	if err == nil {
		var level slog.Level
		if err = level.UnmarshalText([]byte(cmp.Or(os.Getenv(app.EnvLogLevel), "INFO"))); err == nil {
			logger = app.Logger(level)
		}
	}
	if err != nil {
		logger.Error("localstack: bad configuration", "error", err.Error())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // once stopping, a second Ctrl-C kills at once
	err = run(ctx, opts, logger, func(s stack) { printBanner(os.Stderr, s) })
	stop()
	if err != nil {
		logger.Error("localstack stopped", "error", err.Error())
		os.Exit(1)
	}
	logger.Info("localstack stopped")
}

func parseFlags(args []string, getenv func(string) string) (options, error) {
	fs := flag.NewFlagSet("localstack", flag.ContinueOnError)
	o := options{getenv: getenv}
	fs.StringVar(&o.root, "root", ".", "repository root (holds .venv and scripts/emulator.py)")
	fs.StringVar(&o.apiAddr, "addr", "127.0.0.1:3000", "listen address of the charge API")
	fs.StringVar(&o.providerAddr, "provider-addr", "127.0.0.1:4010", "listen address of the provider simulator")
	fs.StringVar(&o.providerURL, "provider-url", "", "URL the functions reach the provider simulator at (default: its listen address)")
	fs.IntVar(&o.emulatorPort, "emulator-port", 4566, "port of the DynamoDB/SQS emulator (0: any free port)")
	fs.DurationVar(&o.sweepEvery, "sweep-every", 5*time.Second, "interval of the sweeper")
	fs.DurationVar(&o.slow, "slow", 5*time.Second, "how long the provider simulator takes to answer a tok_slow charge")
	traceJSON := fs.Bool("trace-json", false, "print the functions' spans as JSON lines on standard output")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if *traceJSON {
		o.spans = os.Stdout
	}
	if fs.NArg() > 0 || o.sweepEvery <= 0 || o.slow < 0 {
		return options{}, fmt.Errorf("bad arguments %q", args)
	}
	if o.providerURL != "" && getenv(app.EnvProvider) == app.ProviderStripe && getenv(app.EnvProviderURL) != "" {
		return options{}, errors.New("-provider-url names the stack's simulator, which PROVIDER_URL replaces")
	}
	return o, nil
}

// run starts the stack and calls ready once it serves. It stops the stack
// when ctx is done, or when a part of it fails.
func run(ctx context.Context, o options, logger *slog.Logger, ready func(stack)) (err error) {
	ep := awsenv.EndpointsFrom(o.getenv)
	s := stack{dynamoDB: ep.DynamoDB, sqs: ep.SQS, secretsManager: ep.SecretsManager, s3: ep.S3, sweepEvery: o.sweepEvery, slow: o.slow}
	var emulatorExited <-chan struct{}
	local := s.dynamoDB == "" || s.sqs == "" || s.secretsManager == "" || s.s3 == ""
	if local {
		emu, err := emulator.Start(o.root, o.emulatorPort)
		if err != nil {
			return err
		}
		defer func() {
			if serr := emu.Stop(); serr != nil && err == nil {
				err = serr
			}
			logger.Info("emulator stopped", "component", "localstack")
		}()
		emulatorExited = emu.Exited()
		s.dynamoDB, s.sqs, s.secretsManager = cmp.Or(s.dynamoDB, emu.URL()), cmp.Or(s.sqs, emu.URL()), cmp.Or(s.secretsManager, emu.URL())
		s.s3 = cmp.Or(s.s3, emu.URL())
	}
	cfg, err := awsenv.Config(ctx, local) // dummy credentials for the emulator this process started
	if err != nil {
		return err
	}
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(keepIdle)
	clients := awsenv.New(cfg, awsenv.Endpoints{DynamoDB: s.dynamoDB, SQS: s.sqs, SecretsManager: s.secretsManager})
	store := awsenv.S3(cfg, s.s3)
	res, err := createResources(ctx, clients, store)
	if err != nil {
		return err
	}
	s.providerKind = cmp.Or(o.getenv(app.EnvProvider), app.ProviderSim)
	firstKey := simKey
	if s.providerKind == app.ProviderStripe {
		firstKey = stripeSimKey
	}
	if err := createSecrets(ctx, clients, firstKey); err != nil {
		return err
	}
	key, whsec, err := readSecrets(ctx, clients)
	if err != nil {
		return err
	}
	s.queueURL, s.dlqURL, s.dummyCredentials = res.queue.URL, res.queue.DLQURL, local
	s.intakeURL, s.intakeDLQURL = res.chargeRequests.URL, res.chargeRequests.DLQURL

	// The functions read these variables exactly as they do in Lambda. The
	// template sets the same ones to the deployed resources.
	env := map[string]string{
		app.EnvIdempotencyTable:  res.idempotencyTable,
		app.EnvChargesTable:      res.chargesTable,
		app.EnvLimitsTable:       res.limitsTable,
		app.EnvReconcileQueueURL: res.queue.URL,
		// The intake's queue is its event source, not a variable.
		app.EnvChargeRequestsDLQURL: res.chargeRequests.DLQURL,
		// Names, not values. The functions read the secrets from the
		// emulator's Secrets Manager, as from AWS's when deployed.
		app.EnvProviderSecretName: providerSecret,
		app.EnvWebhookSecretName:  webhookSecret,
		app.EnvSecretsMaxAge:      cmp.Or(o.getenv(app.EnvSecretsMaxAge), secretsMaxAge.String()),
		// The emulator's endpoints, as sam local's LocalEndpointUrl sets
		// them. Only beside them do the functions take a provider over http.
		awsenv.EnvDynamoDBEndpoint:       s.dynamoDB,
		awsenv.EnvSQSEndpoint:            s.sqs,
		awsenv.EnvSecretsManagerEndpoint: s.secretsManager,
		awsenv.EnvS3Endpoint:             s.s3,
		app.EnvAuditBucket:               auditBucket,
		app.EnvAuditIndexTable:           auditIndexTable,
	}
	apiLn, err := listen(o.apiAddr)
	if err != nil {
		return err
	}
	defer apiLn.Close()
	s.api = "http://" + apiLn.Addr().String()
	var (
		servers []server
		// follow makes the simulator take the secrets' values after a
		// rotation. It is nil when the provider is not the stack's.
		follow func(key, whsec string)
	)
	if s.providerKind == app.ProviderStripe && o.getenv(app.EnvProviderURL) != "" {
		s.provider = o.getenv(app.EnvProviderURL)
	} else {
		providerLn, err := listen(o.providerAddr)
		if err != nil {
			return err
		}
		defer providerLn.Close()
		s.provider = "http://" + providerLn.Addr().String()
		s.functionsProvider = cmp.Or(o.providerURL, s.provider)
		env[app.EnvProviderURL] = s.functionsProvider
		plog := logger.With("component", "provider")
		if s.providerKind == app.ProviderStripe {
			s.simulated = true
			// stripesim sends its signed webhooks to the stack's API, as
			// Stripe does to a registered endpoint.
			s.stripeSim = stripesim.New(func(so *stripesim.Options) {
				so.SecretKey, so.Logger = key, plog
				so.WebhookURL, so.WebhookSecret = s.api+"/webhooks/stripe", whsec
			})
			follow = func(key, whsec string) { s.stripeSim.SetSecretKey(key); s.stripeSim.SetWebhookSecret(whsec) }
			servers = append(servers, server{providerLn, s.stripeSim})
		} else {
			sim := providersim.New(providersim.WithSecret(key), providersim.WithSlowDelay(o.slow), providersim.WithLogger(plog))
			follow = func(key, _ string) { sim.SetSecret(key) }
			servers = append(servers, server{providerLn, sim})
		}
	}
	getenv := func(name string) string {
		if v, ok := env[name]; ok {
			return v
		}
		return o.getenv(name)
	}
	streams := dynamodbstreams.NewFromConfig(cfg, func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(s.dynamoDB) })
	gw, sweep, pollers, err := functions(ctx, getenv, clients, store, streams, res, o.spans, logger)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	failed := make(chan error, 2)
	for _, srv := range append(servers, server{apiLn, gw}) {
		wg.Go(func() {
			if err := serve(ctx, srv.ln, srv.h, logger); err != nil {
				failed <- err
			}
		})
	}
	wg.Go(func() { sweepLoop(ctx, sweep, o.sweepEvery, logger) })
	if follow != nil {
		wg.Go(func() { followSecrets(ctx, clients, key, whsec, follow, logger) })
	}
	for _, p := range pollers {
		wg.Go(func() { _ = p.Run(ctx) })
	}
	logger.Info("localstack ready", "component", "localstack", "api", s.api, "provider", s.provider,
		"dynamodb", s.dynamoDB, "sqs", s.sqs, "s3", s.s3, "reconcile_queue", s.queueURL, "reconcile_dlq", s.dlqURL,
		"charge_requests_queue", s.intakeURL, "idempotency_table", res.idempotencyTable, "charges_table", res.chargesTable)
	ready(s)

	select {
	case <-ctx.Done():
		logger.Info("stopping", "component", "localstack")
	case err = <-failed:
	case <-emulatorExited:
		err = errors.New("the emulator exited")
	}
	cancel()
	wg.Wait()
	return err
}

// runner is a local event source: it feeds its function until ctx is done.
type runner interface {
	Run(ctx context.Context) error
}

// functions builds the five functions' handlers with app, as their Lambda
// mains do. It builds the local event sources in front of them too. The
// gateway is one. A poller each serves the reconcile queue and the
// charge-requests queue. One more for each table's stream feeds the audit
// function (its bucket on store). With spans, each function traces to it.
func functions(ctx context.Context, getenv app.Getenv, clients awsenv.Clients, store *s3.Client, streams *dynamodbstreams.Client,
	res resources, spans io.Writer, logger *slog.Logger) (*gateway.Gateway, *sweeper.Sweeper, []runner, error) {
	cc, err := app.LoadCharge(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	sc, err := app.LoadSweeper(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	rc, err := app.LoadReconcile(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	ic, err := app.LoadIntake(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	ac, err := app.LoadAudit(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	providerTransport := http.DefaultTransport.(*http.Transport).Clone()
	keepIdle(providerTransport)
	deps := map[string]app.Deps{}
	for _, fn := range []string{metrics.FunctionCharge, metrics.FunctionSweeper, metrics.FunctionReconcile, metrics.FunctionIntake, app.FunctionAudit} {
		d := app.Deps{Clients: clients, Logger: logger.With("function", fn),
			ProviderOptions: []func(*provider.Options){provider.WithHTTPClient(&http.Client{Transport: providerTransport})}}
		if spans != nil {
			if d.Tracer, err = tracing.NewJSON(spans, fn); err != nil {
				return nil, nil, nil, err
			}
		}
		deps[fn] = d
	}
	ch, err := app.ChargeHandler(ctx, cc, deps[metrics.FunctionCharge])
	if err != nil {
		return nil, nil, nil, err
	}
	gw, err := gateway.New(ch.Handle, httpapi.Routes,
		gateway.WithPublicRoutes(httpapi.RouteWebhook), gateway.WithTenantClaim(cc.TenantClaim), gateway.WithTimeout(chargeTimeout),
		gateway.WithLogger(logger.With("component", "gateway")))
	if err != nil {
		return nil, nil, nil, err
	}
	sw, err := app.SweeperHandler(sc, deps[metrics.FunctionSweeper])
	if err != nil {
		return nil, nil, nil, err
	}
	rh, err := app.ReconcileHandler(rc, deps[metrics.FunctionReconcile])
	if err != nil {
		return nil, nil, nil, err
	}
	ih, err := app.IntakeHandler(ic, deps[metrics.FunctionIntake])
	if err != nil {
		return nil, nil, nil, err
	}
	ad := deps[app.FunctionAudit]
	ad.S3 = store
	ah, err := app.AuditHandler(ac, ad)
	if err != nil {
		return nil, nil, nil, err
	}
	var pollers []runner
	for _, arn := range res.streams {
		p, err := eventsource.NewStream(streams, arn, ah.Handle, func(o *eventsource.StreamOptions) {
			o.Timeout, o.Logger = auditTimeout, logger.With("component", "eventsource")
		})
		if err != nil {
			return nil, nil, nil, err
		}
		pollers = append(pollers, p)
	}
	for _, src := range []struct {
		url     string
		h       eventsource.Handler
		timeout time.Duration
	}{{sc.ReconcileQueueURL, rh.Handle, queue.ReconcileTimeout}, {res.chargeRequests.URL, ih.Handle, queue.IntakeTimeout}} {
		p, err := eventsource.New(ctx, clients.SQS, src.url, src.h, func(o *eventsource.Options) {
			o.BatchSize = queue.BatchSize
			o.Timeout = src.timeout
			o.Logger = logger.With("component", "eventsource")
		})
		if err != nil {
			return nil, nil, nil, err
		}
		pollers = append(pollers, p)
	}
	return gw, sw, pollers, nil
}

func listen(addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// serve serves h on ln until ctx is done, then lets requests in flight
// finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
	}
	return nil
}

// sweepLoop runs the sweeper every interval, as the schedule does every
// minute. Each run is an invocation with the sweeper function's timeout.
func sweepLoop(ctx context.Context, s *sweeper.Sweeper, every time.Duration, logger *slog.Logger) {
	tick(ctx, every, func() {
		rctx, cancel := context.WithTimeout(ctx, sweeperTimeout)
		defer cancel()
		rctx = lambdacontext.NewContext(rctx, &lambdacontext.LambdaContext{AwsRequestID: fmt.Sprintf("sweep-%d", time.Now().UnixMilli())})
		if err := s.Handle(rctx); err != nil && ctx.Err() == nil {
			logger.Error("sweep failed", "function", "sweeper", "error", err.Error())
		}
	})
}

// tick calls fn every interval until ctx is done.
func tick(ctx context.Context, every time.Duration, fn func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// readSecrets reads the provider's API key and the webhook signing secret.
func readSecrets(ctx context.Context, c awsenv.Clients) (key, whsec string, err error) {
	if key, err = secrets.New(c.SecretsManager, providerSecret).Value(ctx); err != nil {
		return "", "", err
	}
	if whsec, err = secrets.New(c.SecretsManager, webhookSecret).Value(ctx); err != nil {
		return "", "", err
	}
	return key, whsec, nil
}

// followSecrets reads the secrets every followEvery. It hands the
// simulator their values when either changed since key and whsec. That is
// the provider side of a rotation, which the functions then follow. A 401
// makes them read the key again. They read the webhook secret again after
// SECRETS_MAX_AGE.
func followSecrets(ctx context.Context, c awsenv.Clients, key, whsec string, follow func(key, whsec string), logger *slog.Logger) {
	tick(ctx, followEvery, func() {
		k, w, err := readSecrets(ctx, c)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("reading the secrets failed", "component", "localstack", "error", err.Error())
		case err == nil && (k != key || w != whsec):
			key, whsec = k, w
			follow(key, whsec)
			logger.Info("the provider simulator follows the rotated secrets", "component", "localstack")
		}
	})
}

// adminEnv is the environment, as NAME=value, that points chargectl admin
// at the stack. It holds the functions' variables. It adds dummy credentials
// for an emulator the stack started.
func adminEnv(s stack) []string {
	env := []string{
		app.EnvIdempotencyTable + "=" + idempotencyTable,
		app.EnvChargesTable + "=" + chargesTable,
		app.EnvLimitsTable + "=" + limitsTable,
		app.EnvReconcileQueueURL + "=" + s.queueURL,
		app.EnvReconcileDLQURL + "=" + s.dlqURL,
		app.EnvChargeRequestsQueueURL + "=" + s.intakeURL,
		app.EnvAuditBucket + "=" + auditBucket,
		app.EnvAuditIndexTable + "=" + auditIndexTable,
		awsenv.EnvDynamoDBEndpoint + "=" + s.dynamoDB,
		awsenv.EnvSQSEndpoint + "=" + s.sqs,
		awsenv.EnvS3Endpoint + "=" + s.s3,
	}
	if s.dummyCredentials {
		env = append(env, "AWS_REGION="+awsenv.DefaultRegion, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
	}
	return env
}

func printBanner(w io.Writer, s stack) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nchargeonce local stack is up; Ctrl-C stops it.\n\n")
	fmt.Fprintf(&b, "  charge API       %s   (%s; token: Authorization: Bearer dev:<tenant>)\n", s.api, strings.Join(slices.DeleteFunc(slices.Clone(httpapi.Routes), func(r string) bool { return r == httpapi.RouteWebhook }), ", "))
	source := "tok_visa"
	switch {
	case s.providerKind != app.ProviderStripe:
		fmt.Fprintf(&b, "  provider sim     %s   (sources tok_visa, tok_decline, tok_slow (%s), tok_timeout_once, tok_unavailable; GET /v1/ledger)\n", s.provider, s.slow)
	case s.simulated:
		source = stripesim.PMVisa
		fmt.Fprintf(&b, "  Stripe (sim)     %s   (PROVIDER=stripe on stripesim; sources pm_card_visa, pm_card_chargeDeclined, pm_sim_timeout, pm_sim_rate_limited, ...; signed webhooks to %s/webhooks/stripe)\n", s.provider, s.api)
	default:
		source = stripesim.PMVisa
		fmt.Fprintf(&b, "  Stripe           %s   (PROVIDER=stripe at PROVIDER_URL; sources pm_...)\n", s.provider)
	}
	if s.functionsProvider != "" && s.functionsProvider != s.provider {
		fmt.Fprintf(&b, "  functions reach the provider at %s (-provider-url)\n", s.functionsProvider)
	}
	fmt.Fprintf(&b, "  DynamoDB         %s   (tables %s, %s, %s)\n", s.dynamoDB, idempotencyTable, chargesTable, limitsTable)
	fmt.Fprintf(&b, "  SQS              %s   (%s, its DLQ %s-dlq)\n", s.sqs, reconcileQueue, reconcileQueue)
	fmt.Fprintf(&b, "  charge requests  %s   (the intake's queue; its DLQ %s)\n", s.intakeURL, s.intakeDLQURL)
	fmt.Fprintf(&b, "  Secrets Manager  %s   (%s, %s; rotate with aws secretsmanager put-secret-value --endpoint-url %s --secret-id %s --secret-string ...)\n",
		s.secretsManager, providerSecret, webhookSecret, s.secretsManager, providerSecret)
	fmt.Fprintf(&b, "  audit trail      %s   (bucket %s under Object Lock, index %s; fed from both tables' streams)\n", s.s3, auditBucket, auditIndexTable)
	fmt.Fprintf(&b, "  sweeper          every %s; reconcile fed from %s, intake from %s\n\n", s.sweepEvery, reconcileQueue, chargeRequestsQueue)
	fmt.Fprintf(&b, "Submit charges to the queue with chargectl admin submit, operate the stack with chargectl admin (record, stuck, reconcile, dlq list, dlq redrive, settle, audit, limits), after:\n\n  export %s\n\n", strings.Join(adminEnv(s), " "))
	fmt.Fprintf(&b, "Try:\n\n  curl -s -X POST %s/charges -H 'Authorization: Bearer dev:acme' -H 'Content-Type: application/json' -H 'Idempotency-Key: order-1001' -d '{\"amount\":1500,\"currency\":\"EUR\",\"source\":\"%s\"}'\n", s.api, source)
	fmt.Fprintf(&b, "  go run ./cmd/chargectl admin submit --tenant acme --id renewal-2026-12-acme-42 --amount 1500 --source %s   (after the export)\n", source)
	fmt.Fprintf(&b, "  go run ./cmd/chargectl admin audit acme order-1001   (the key's audit trail: who asked, from where, what came back)\n\n")
	_, _ = io.WriteString(w, b.String())
}
