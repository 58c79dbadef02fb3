// Package app provides each function's configuration, read from its
// environment, and builds the function's handler from it. The Lambda mains,
// the local stack and the end-to-end tests all assemble handlers here.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/keyed"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/secrets"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Environment variables the functions read. template.yaml sets them (a
// test checks both sides agree).
const (
	EnvIdempotencyTable  = "IDEMPOTENCY_TABLE"
	EnvChargesTable      = "CHARGES_TABLE"
	EnvReconcileQueueURL = "RECONCILE_QUEUE_URL"
	EnvProvider          = "PROVIDER"
	EnvProviderURL       = "PROVIDER_URL"
	// EnvProviderSecretName names the Secrets Manager secret (name or
	// ARN) that holds the provider's API key as a plain string. The
	// functions read the value at run time. It is never in their
	// environment. Empty: no key (the simulator without one).
	EnvProviderSecretName = "PROVIDER_SECRET_NAME"
	EnvTenantClaim        = "TENANT_CLAIM"
	EnvIdempotencyTTL     = "IDEMPOTENCY_TTL"
	EnvInflightWait       = "INFLIGHT_WAIT"
	EnvCommitReserve      = "COMMIT_RESERVE"
	EnvReplayCache        = "REPLAY_CACHE_ENTRIES"
	EnvSettleWindow       = "PROVIDER_SETTLE_WINDOW"
	EnvRetryBase          = "RECONCILE_RETRY_BASE"
	EnvRetryCap           = "RECONCILE_RETRY_CAP"
	EnvLogLevel           = "LOG_LEVEL"
	// EnvWebhookSecretName names the Secrets Manager secret that holds
	// the signing secret (whsec_…) of POST /webhooks/stripe. Empty refuses
	// every delivery.
	EnvWebhookSecretName = "STRIPE_WEBHOOK_SECRET_NAME"
	// EnvSecretsMaxAge is how long a function keeps a secret's value
	// before it reads it again. A Go duration; default
	// secrets.DefaultMaxAge.
	EnvSecretsMaxAge = "SECRETS_MAX_AGE"
	// EnvTraceEndpoint is the OTLP/HTTP endpoint the functions export
	// their spans to (the ADOT collector layer's). Empty turns tracing off.
	EnvTraceEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// EnvChargeRequestsDLQURL is the charge-requests dead-letter queue,
	// where the intake function sends malformed messages.
	EnvChargeRequestsDLQURL = "CHARGE_REQUESTS_DLQ_URL"
	// EnvChargeRequestsQueueURL is the charge-requests queue, which no
	// function reads: chargectl submit sends to it.
	EnvChargeRequestsQueueURL = "CHARGE_REQUESTS_QUEUE_URL"
	// EnvReconcileDLQURL is the reconcile dead-letter queue, which no
	// function reads: only chargectl admin does.
	EnvReconcileDLQURL = "RECONCILE_DLQ_URL"
	// A deployment in several Regions (docs/regions.md).
	// ROUTES_TABLE and LEDGER_TABLE are in multi-Region strong
	// consistency. HOME_REGION homes the tenants; TENANT_HOMES
	// ("tenant=region,...") overrides it per tenant. Lambda sets
	// AWS_REGION. Without ROUTES_TABLE, one Region.
	EnvRoutesTable = "ROUTES_TABLE"
	EnvLedgerTable = "LEDGER_TABLE"
	EnvHomeRegion  = "HOME_REGION"
	EnvTenantHomes = "TENANT_HOMES"
	EnvAWSRegion   = "AWS_REGION"
	// EnvLimitsTable is the limits table: the tenants' shared counts and
	// the operators' overrides (package limit).
	EnvLimitsTable = "LIMITS_TABLE"
	// EnvTenantRate and EnvTenantConcurrency limit a tenant without an
	// override: requests a second, and requests at once.
	EnvTenantRate        = "TENANT_RATE_LIMIT"
	EnvTenantConcurrency = "TENANT_CONCURRENCY_LIMIT"
	// EnvLimitsMaxAge is how long the charge function keeps the
	// overrides before it reads them again (a Go duration).
	EnvLimitsMaxAge = "LIMITS_MAX_AGE"
	// EnvAuditBucket is the audit trail's bucket and EnvAuditIndexTable
	// its index (package audit). EnvAuditIndexDays is how many days the
	// index finds a command's entries.
	EnvAuditBucket     = "AUDIT_BUCKET"
	EnvAuditIndexTable = "AUDIT_INDEX_TABLE"
	EnvAuditIndexDays  = "AUDIT_INDEX_DAYS"
)

// The providers PROVIDER names. The default is our provider API
// (providersim locally). Stripe takes its secret API key from the secret
// PROVIDER_SECRET_NAME names, and its API from PROVIDER_URL
// (https://api.stripe.com).
const (
	ProviderSim    = "sim"
	ProviderStripe = "stripe"
)

// DefaultReplayCache is how many settled answers (about 1 KiB each) the
// charge function keeps for replays. REPLAY_CACHE_ENTRIES overrides it.
const DefaultReplayCache = 10_000

// Getenv looks up one variable; os.Getenv is one.
type Getenv func(string) string

// env reads variables and collects every problem. So a misconfigured
// function fails at start with all of them listed.
type env struct {
	get  Getenv
	errs []error
}

func (e *env) required(name string) string {
	v := e.get(name)
	if v == "" {
		e.errs = append(e.errs, fmt.Errorf("%s is required", name))
	}
	return v
}

func (e *env) optional(name, def string) string {
	if v := e.get(name); v != "" {
		return v
	}
	return def
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	v := e.get(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		e.errs = append(e.errs, fmt.Errorf("%s: %q is not a duration", name, v))
	}
	return d
}

// retention is IDEMPOTENCY_TTL, which every reader of it defaults alike.
func (e *env) retention() time.Duration { return e.duration(EnvIdempotencyTTL, 24*time.Hour) }

// indexRetention is AUDIT_INDEX_DAYS, likewise. The audit function files
// the streams' entries for it, and chargectl an operator's note. Both
// refuse zero days. Both refuse more than audit.MaxIndexRetention, as the
// index would outlive the archive.
func (e *env) indexRetention() time.Duration {
	const day = 24 * time.Hour
	v := e.get(EnvAuditIndexDays)
	if v == "" {
		return audit.DefaultIndexRetention
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > int(audit.MaxIndexRetention/day) {
		e.errs = append(e.errs, fmt.Errorf("%s: %q is not a count of days from 1 to %d", EnvAuditIndexDays, v, audit.MaxIndexRetention/day))
		return audit.DefaultIndexRetention
	}
	return time.Duration(n) * day
}

// secretsMaxAge is SECRETS_MAX_AGE, likewise.
func (e *env) secretsMaxAge() time.Duration {
	return e.duration(EnvSecretsMaxAge, secrets.DefaultMaxAge)
}

func (e *env) count(name string, def int) int {
	v := e.get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		e.errs = append(e.errs, fmt.Errorf("%s: %q is not a count", name, v))
	}
	return n
}

// limit is a count from 1 to most.
func (e *env) limit(name string, def, most int) int {
	v := e.get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		e.errs = append(e.errs, fmt.Errorf("%s: %q is not a limit from 1 to %d", name, v, most))
	}
	return n
}

func (e *env) provider() string {
	v := e.optional(EnvProvider, ProviderSim)
	if v != ProviderSim && v != ProviderStripe {
		e.errs = append(e.errs, fmt.Errorf("%s: %q is neither %s nor %s", EnvProvider, v, ProviderSim, ProviderStripe))
	}
	return v
}

// providerURL is PROVIDER_URL. The provider's key travels in every
// request, so it must be https. Plain http is for a local stack only. A
// local stack is one whose AWS endpoints name an emulator (make run, sam
// local, the RIE e2e). A deployed stack names none.
func (e *env) providerURL() string {
	v := e.required(EnvProviderURL)
	if v == "" {
		return v
	}
	u, err := url.Parse(v)
	local := awsenv.EndpointsFrom(e.get) != awsenv.Endpoints{}
	if err != nil || u.Host == "" || u.Scheme != "https" && (u.Scheme != "http" || !local) {
		e.errs = append(e.errs, fmt.Errorf("%s: %q is not an https URL (http only beside an emulator's endpoints)", EnvProviderURL, v))
	}
	return v
}

func (e *env) level() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(e.optional(EnvLogLevel, "INFO"))); err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s: %w", EnvLogLevel, err))
	}
	return l
}

func (e *env) err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("app: %w", errors.Join(e.errs...))
}

// Common is what every function's configuration holds. It says how much
// to log, where spans go, and the Regions.
type Common struct {
	LogLevel slog.Level
	// TraceEndpoint is where spans go (OTEL_EXPORTER_OTLP_ENDPOINT);
	// empty, nowhere: tracing is off.
	TraceEndpoint string
	Regions       Regions
}

func (c Common) common() Common { return c }

func (e *env) common() Common {
	return Common{LogLevel: e.level(), TraceEndpoint: e.optional(EnvTraceEndpoint, ""), Regions: e.regions()}
}

// Regions configures a deployment in several Regions. The zero Regions
// is one Region, calling neither table.
type Regions struct {
	// Region is where the function runs. Home homes every tenant
	// Homes does not name.
	Region, Home string
	Homes        map[string]string
	// RoutesTable says who serves each home; LedgerTable holds the
	// claims. Both are in multi-Region strong consistency.
	RoutesTable, LedgerTable string
}

func (e *env) regions() Regions {
	r := Regions{
		Region: e.get(EnvAWSRegion), Home: e.get(EnvHomeRegion),
		RoutesTable: e.get(EnvRoutesTable), LedgerTable: e.get(EnvLedgerTable), Homes: map[string]string{},
	}
	homes := e.get(EnvTenantHomes)
	if r.RoutesTable == "" {
		return Regions{}
	}
	for _, name := range []string{EnvAWSRegion, EnvHomeRegion, EnvLedgerTable} {
		if e.get(name) == "" {
			e.errs = append(e.errs, fmt.Errorf("%s is required with %s", name, EnvRoutesTable))
		}
	}
	for pair := range strings.SplitSeq(homes, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		tenant, region, ok := strings.Cut(pair, "=")
		if !ok || tenant == "" || region == "" {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not tenant=region", EnvTenantHomes, pair))
			continue
		}
		r.Homes[tenant] = region
	}
	return r
}

// ChargeConfig is the charge function's configuration.
type ChargeConfig struct {
	Common
	IdempotencyTable, ChargesTable, ReconcileQueueURL string
	Provider                                          string // PROVIDER: ProviderSim or ProviderStripe
	ProviderURL, TenantClaim                          string
	// ProviderSecretName names the secret holding the provider's API
	// key. WebhookSecretName names the one with Stripe's webhook signing
	// secret; empty refuses every delivery. SecretsMaxAge is how long
	// their values are kept.
	ProviderSecretName, WebhookSecretName  string
	SecretsMaxAge                          time.Duration
	Retention, InflightWait, CommitReserve time.Duration
	// ReplayCache is how many settled answers the function keeps in
	// memory, to replay without a DynamoDB call. 0 turns the cache off.
	ReplayCache int
	// MaxRefunds is how many refunds a charge may have; 0 is
	// charge.DefaultMaxRefunds. No variable sets it: the limit is the
	// API's (docs/contract.md), and only tests lower it.
	MaxRefunds int
	// SettleWindow is the reconcile function's. A repeated capture or
	// cancel settles a move left in flight with it.
	SettleWindow time.Duration
	// LimitsTable holds the tenants' shared counts and overrides. Limits
	// are a tenant's without an override. LimitsMaxAge is how long the
	// overrides are kept. LoadCharge requires the table. Without one no
	// tenant is limited and nothing is shed, for tests of other behaviours.
	LimitsTable  string
	Limits       limit.Limits
	LimitsMaxAge time.Duration
}

// LoadCharge reads the charge function's configuration.
func LoadCharge(get Getenv) (ChargeConfig, error) {
	e := &env{get: get}
	c := ChargeConfig{
		IdempotencyTable:   e.required(EnvIdempotencyTable),
		ChargesTable:       e.required(EnvChargesTable),
		ReconcileQueueURL:  e.required(EnvReconcileQueueURL),
		Provider:           e.provider(),
		ProviderURL:        e.providerURL(),
		ProviderSecretName: e.optional(EnvProviderSecretName, ""),
		TenantClaim:        e.optional(EnvTenantClaim, httpapi.DefaultTenantClaim),
		WebhookSecretName:  e.optional(EnvWebhookSecretName, ""),
		SecretsMaxAge:      e.secretsMaxAge(),
		Retention:          e.retention(),
		InflightWait:       e.duration(EnvInflightWait, 2*time.Second),
		CommitReserve:      e.duration(EnvCommitReserve, charge.DefaultCommitReserve),
		ReplayCache:        e.count(EnvReplayCache, DefaultReplayCache),
		SettleWindow:       e.duration(EnvSettleWindow, provider.DefaultSettleWindow),
		LimitsTable:        e.required(EnvLimitsTable),
		Limits: limit.Limits{
			Rate:        e.limit(EnvTenantRate, limit.DefaultRate, limit.MaxRate),
			Concurrency: e.limit(EnvTenantConcurrency, limit.DefaultConcurrency, limit.MaxConcurrency),
		},
		LimitsMaxAge: e.duration(EnvLimitsMaxAge, limit.DefaultMaxAge),
		Common:       e.common(),
	}
	return c, e.err()
}

// ReconcileConfig is the reconcile function's configuration.
type ReconcileConfig struct {
	Common
	IdempotencyTable, ChargesTable  string
	Provider                        string // PROVIDER: ProviderSim or ProviderStripe
	ProviderURL, ProviderSecretName string
	SecretsMaxAge                   time.Duration
	Retention                       time.Duration
	// SettleWindow is the sim provider's (see provider.Guarantees); zero
	// means provider.DefaultSettleWindow. The Stripe adapter declares
	// its own.
	SettleWindow        time.Duration
	RetryBase, RetryCap time.Duration
}

// LoadReconcile reads the reconcile function's configuration.
func LoadReconcile(get Getenv) (ReconcileConfig, error) {
	e := &env{get: get}
	c := ReconcileConfig{
		IdempotencyTable:   e.required(EnvIdempotencyTable),
		ChargesTable:       e.required(EnvChargesTable),
		Provider:           e.provider(),
		ProviderURL:        e.providerURL(),
		ProviderSecretName: e.optional(EnvProviderSecretName, ""),
		SecretsMaxAge:      e.secretsMaxAge(),
		Retention:          e.retention(),
		SettleWindow:       e.duration(EnvSettleWindow, provider.DefaultSettleWindow),
		RetryBase:          e.duration(EnvRetryBase, charge.DefaultRetryBase),
		RetryCap:           e.duration(EnvRetryCap, charge.DefaultRetryCap),
		Common:             e.common(),
	}
	return c, e.err()
}

// IntakeConfig is the intake function's configuration. It is the charge
// function's, less what only HTTP needs. It adds the charge-requests
// queue's dead-letter queue.
type IntakeConfig struct {
	Common
	IdempotencyTable, ChargesTable, ReconcileQueueURL string
	DeadLetterQueueURL                                string
	Provider                                          string // PROVIDER: ProviderSim or ProviderStripe
	ProviderURL, ProviderSecretName                   string
	SecretsMaxAge                                     time.Duration
	Retention, InflightWait, CommitReserve            time.Duration
}

// LoadIntake reads the intake function's configuration.
func LoadIntake(get Getenv) (IntakeConfig, error) {
	e := &env{get: get}
	c := IntakeConfig{
		IdempotencyTable:   e.required(EnvIdempotencyTable),
		ChargesTable:       e.required(EnvChargesTable),
		ReconcileQueueURL:  e.required(EnvReconcileQueueURL),
		DeadLetterQueueURL: e.required(EnvChargeRequestsDLQURL),
		Provider:           e.provider(),
		ProviderURL:        e.providerURL(),
		ProviderSecretName: e.optional(EnvProviderSecretName, ""),
		SecretsMaxAge:      e.secretsMaxAge(),
		Retention:          e.retention(),
		InflightWait:       e.duration(EnvInflightWait, 2*time.Second),
		CommitReserve:      e.duration(EnvCommitReserve, charge.DefaultCommitReserve),
		Common:             e.common(),
	}
	return c, e.err()
}

// SweeperConfig is the sweeper function's configuration.
type SweeperConfig struct {
	Common
	IdempotencyTable, ChargesTable, ReconcileQueueURL string
}

// LoadSweeper reads the sweeper function's configuration.
func LoadSweeper(get Getenv) (SweeperConfig, error) {
	e := &env{get: get}
	c := SweeperConfig{
		IdempotencyTable:  e.required(EnvIdempotencyTable),
		ChargesTable:      e.required(EnvChargesTable),
		ReconcileQueueURL: e.required(EnvReconcileQueueURL),
		Common:            e.common(),
	}
	return c, e.err()
}

// AuditConfig is the audit function's configuration: the tables whose
// streams it reads, and where the trail goes.
type AuditConfig struct {
	Common
	IdempotencyTable, ChargesTable string
	AuditBucket, AuditIndexTable   string
	// IndexRetention is how long the index finds a command's entries
	// (AUDIT_INDEX_DAYS, default audit.DefaultIndexRetention).
	IndexRetention time.Duration
}

// LoadAudit reads the audit function's configuration.
func LoadAudit(get Getenv) (AuditConfig, error) {
	e := &env{get: get}
	c := AuditConfig{
		IdempotencyTable: e.required(EnvIdempotencyTable),
		ChargesTable:     e.required(EnvChargesTable),
		AuditBucket:      e.required(EnvAuditBucket),
		AuditIndexTable:  e.required(EnvAuditIndexTable),
		IndexRetention:   e.indexRetention(),
		Common:           e.common(),
	}
	return c, e.err()
}

// AdminConfig is chargectl's configuration for the commands that use the
// deployment's resources directly (admin, submit). It names them by the
// variables the functions read. It also holds the reconcile dead-letter
// queue and the charge-requests queue.
type AdminConfig struct {
	IdempotencyTable, ChargesTable, ReconcileQueueURL, ReconcileDLQURL string
	ChargeRequestsQueueURL, LimitsTable                                string
	// RoutesTable is the routes table of a deployment in several Regions.
	RoutesTable string
	// Regions are the functions' own, read with IdempotencyTable. The
	// commands on records then write as the functions do.
	Regions Regions
	// AuditBucket and AuditIndexTable are the audit trail's (admin audit).
	// IndexRetention is how long the index files settle's note: the audit
	// function's AUDIT_INDEX_DAYS.
	AuditBucket, AuditIndexTable string
	IndexRetention               time.Duration
	// Retention is the functions' IDEMPOTENCY_TTL, and Provider their
	// PROVIDER. So a command an operator settles deduplicates as long as
	// one the functions settle. A released one lasts no longer than the
	// provider deduplicates its reference.
	Retention time.Duration
	Provider  string
}

// LoadAdmin reads chargectl admin's configuration. The variables in need
// are required; the others are read if set.
func LoadAdmin(get Getenv, need ...string) (AdminConfig, error) {
	e := &env{get: get}
	read := func(name string) string {
		if slices.Contains(need, name) {
			return e.required(name)
		}
		return e.optional(name, "")
	}
	c := AdminConfig{
		IdempotencyTable:       read(EnvIdempotencyTable),
		ChargesTable:           read(EnvChargesTable),
		ReconcileQueueURL:      read(EnvReconcileQueueURL),
		ReconcileDLQURL:        read(EnvReconcileDLQURL),
		ChargeRequestsQueueURL: read(EnvChargeRequestsQueueURL),
		RoutesTable:            read(EnvRoutesTable),
		LimitsTable:            read(EnvLimitsTable),
		AuditBucket:            read(EnvAuditBucket),
		AuditIndexTable:        read(EnvAuditIndexTable),
		IndexRetention:         e.indexRetention(),
		Retention:              e.retention(),
		Provider:               e.provider(),
	}
	if slices.Contains(need, EnvIdempotencyTable) {
		c.Regions = e.regions()
	}
	return c, e.err()
}

// AdminStore is chargectl admin's idempotency store: the functions' own.
// In several Regions it names the Region and claims in the ledger, and
// the Fence it returns says whom the Region serves. In one Region the
// Fence is nil.
func AdminStore(c AdminConfig, d Deps) (*dynamostore.Store, charge.Fence, error) {
	d, err := d.inRegions(c.Regions)
	if err != nil {
		return nil, nil, err
	}
	st, err := d.store(c.IdempotencyTable, c.Retention, Guarantees(c.Provider))
	if err != nil || d.fence == nil {
		return st, nil, err
	}
	return st, d.fence, nil
}

// Logger is the JSON logger every function writes to standard output.
func Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
}

// Deps are what handlers are built from besides configuration. Tests and
// the local stack pass their own clock and provider HTTP client.
type Deps struct {
	Clients awsenv.Clients
	// S3 is the audit function's client for its bucket. The other
	// functions have none.
	S3     *s3.Client
	Clock  func() time.Time
	Logger *slog.Logger
	// Metrics receives the functions' embedded-metric-format lines.
	// Default os.Stdout.
	Metrics io.Writer
	// ProviderOptions adjust the provider client (e.g. its HTTP client).
	ProviderOptions []func(*provider.Options)
	// StripeOptions adjust the Stripe adapter (PROVIDER=stripe), after
	// the configuration and Clock have set its own.
	StripeOptions []func(*stripe.Options)
	// Tracer records the function's spans; nil, the default, traces
	// nothing and instruments no client.
	Tracer *tracing.Tracer

	// fence and inRegion serve several Regions (inRegions).
	fence    *regions.Fence
	inRegion func(*dynamostore.Options)
}

// traced is d with its AWS clients instrumented for d.Tracer. Each
// builder calls it once, so no client is instrumented twice.
func (d Deps) traced() Deps {
	if d.Tracer != nil {
		d.Clients = awsenv.Traced(d.Clients, d.Tracer.Provider())
	}
	return d
}

// store is the idempotency store on table, in d's Region.
func (d Deps) store(table string, retention time.Duration, g provider.Guarantees) (*dynamostore.Store, error) {
	opts := []func(*dynamostore.Options){StoreOptions(retention, g, d.Clock)}
	if d.inRegion != nil {
		opts = append(opts, d.inRegion)
	}
	return dynamostore.New(d.Clients.DynamoDB, table, opts...)
}

// inRegions is d for a function in several Regions (r). All its parts
// share one Fence. Its stores name the Region and claim in the ledger.
// The ledger yields a Region as the Fence does. In one Region, d is
// unchanged.
func (d Deps) inRegions(r Regions) (Deps, error) {
	if r.RoutesTable == "" {
		return d, nil
	}
	routes, err := regions.NewRoutes(d.Clients.DynamoDB, r.RoutesTable)
	if err != nil {
		return d, err
	}
	fence, err := regions.NewFence(routes, r.Region, regions.Homes(r.Homes, r.Home), func(o *regions.FenceOptions) {
		if d.Clock != nil {
			o.Clock = d.Clock
		}
	})
	if err != nil {
		return d, err
	}
	ledger, err := dynamostore.NewLedger(d.Clients.DynamoDB, r.LedgerTable, func(o *dynamostore.LedgerOptions) {
		o.Yields, o.Unreplicated = fence.Yields, fence.Unreplicated
	})
	if err != nil {
		return d, err
	}
	d.fence = fence
	d.inRegion = func(o *dynamostore.Options) { o.Region, o.Ledger = r.Region, ledger }
	return d, nil
}

// StoreOptions are the idempotency store's options for a deployment whose
// provider promises g. The functions and chargectl admin share them. A
// released command's key lives only while the provider deduplicates its
// reference, less the margin. A retry after that is a new command with a
// new reference. It is never a re-send the provider would charge again.
func StoreOptions(retention time.Duration, g provider.Guarantees, clock func() time.Time) func(*dynamostore.Options) {
	return func(o *dynamostore.Options) {
		o.Retention, o.ReleaseRetention, o.Clock = retention, retention, clock
		if g.DedupWindow > 0 {
			o.ReleaseRetention = min(retention, g.DedupWindow-g.DedupMargin)
		}
	}
}

// Guarantees are what the provider kind promises. A tool that settles
// commands without calling it (chargectl admin) needs them.
func Guarantees(kind string) provider.Guarantees {
	if kind == ProviderStripe {
		return stripe.Promises
	}
	return provider.Guarantees{}
}

// service is what a function's charge service is built from besides
// Deps.
type service struct {
	charge.Config
	IdempotencyTable, ChargesTable string
	Retention                      time.Duration
	// ProviderKind picks the adapter: ProviderSim or ProviderStripe.
	ProviderKind, ProviderURL, ProviderSecretName string
	SecretsMaxAge                                 time.Duration
	ProviderOptions                               []func(*provider.Options)
}

// secret is the secret name names, read through d's Secrets Manager
// client and kept for maxAge.
func (d Deps) secret(name string, maxAge time.Duration) *secrets.Secret {
	return secrets.New(d.Clients.SecretsManager, name, func(o *secrets.Options) { o.MaxAge, o.Clock = maxAge, d.Clock })
}

// provider is the adapter sc names, on the API key the secret
// sc.ProviderSecretName holds (package keyed). The key is read when first
// needed, not here. So a function starts without Secrets Manager.
func (d Deps) provider(sc service) (charge.Provider, error) {
	switch sc.ProviderKind {
	case ProviderStripe:
		if sc.ProviderSecretName == "" {
			return nil, fmt.Errorf("app: %s=%s needs %s", EnvProvider, ProviderStripe, EnvProviderSecretName)
		}
		opts := append([]func(*stripe.Options){func(o *stripe.Options) {
			o.BaseURL, o.Logger, o.Clock, o.HTTPClient = sc.ProviderURL, d.Logger, d.Clock, d.Tracer.HTTPClient(o.HTTPClient)
		}}, d.StripeOptions...)
		return keyed.NewReplaying(d.secret(sc.ProviderSecretName, sc.SecretsMaxAge), keyed.Kind[*stripe.Adapter]{
			Build: func(key string) (*stripe.Adapter, error) {
				a, err := stripe.New(key, opts...)
				if err != nil {
					return nil, fmt.Errorf("app: %w", err)
				}
				return a, nil
			},
			Unauthorized: stripe.Unauthorized,
			Guarantees:   stripe.Promises,
		}, stripe.CheckSource), nil
	default:
		opts := append(sc.ProviderOptions, d.ProviderOptions...)
		if d.Tracer != nil {
			opts = append(opts, func(o *provider.Options) { o.HTTPClient = d.Tracer.HTTPClient(o.HTTPClient) })
		}
		if sc.ProviderSecretName == "" {
			return provider.NewClient(sc.ProviderURL, "", opts...), nil
		}
		return keyed.New(d.secret(sc.ProviderSecretName, sc.SecretsMaxAge), keyed.Kind[*provider.Client]{
			Build: func(key string) (*provider.Client, error) {
				return provider.NewClient(sc.ProviderURL, key, opts...), nil
			},
			Unauthorized: provider.Unauthorized,
			Guarantees:   provider.NewClient(sc.ProviderURL, "", opts...).Guarantees(),
		}), nil
	}
}

// service builds a charge service; its stored answers are the HTTP API's.
func (d Deps) service(sc service) (*charge.Service, error) {
	cfg := sc.Config
	p, err := d.provider(sc)
	if err != nil {
		return nil, err
	}
	cfg.Provider = p
	if d.fence != nil {
		cfg.Fence = d.fence
	}
	store, err := d.store(sc.IdempotencyTable, sc.Retention, cfg.Provider.Guarantees())
	if err != nil {
		return nil, err
	}
	rows, err := charge.NewRows(d.Clients.DynamoDB, sc.ChargesTable)
	if err != nil {
		return nil, err
	}
	cfg.Store, cfg.Rows = store, rows
	cfg.Answers = httpapi.Answers{}
	cfg.Logger = d.Logger
	cfg.Tracer = d.Tracer
	return charge.NewService(cfg)
}

// ChargeHandler builds the charge function's API Gateway handler. It
// reads the tenants' overrides with ctx (package limit).
func ChargeHandler(ctx context.Context, c ChargeConfig, d Deps) (*httpapi.Handler, error) {
	d, err := d.traced().inRegions(c.Regions)
	if err != nil {
		return nil, err
	}
	sender, err := d.sender(c.ReconcileQueueURL, c.IdempotencyTable, c.ChargesTable)
	if err != nil {
		return nil, err
	}
	svc, err := d.service(service{
		Config: charge.Config{
			Queue: sender, InflightWait: c.InflightWait, CommitReserve: c.CommitReserve, ReplayCache: c.ReplayCache,
			MaxRefunds: c.MaxRefunds,
		},
		IdempotencyTable: c.IdempotencyTable, ChargesTable: c.ChargesTable, Retention: c.Retention,
		ProviderKind: c.Provider, ProviderURL: c.ProviderURL, ProviderSecretName: c.ProviderSecretName, SecretsMaxAge: c.SecretsMaxAge,
		ProviderOptions: settleWindow(c.SettleWindow),
	})
	if err != nil {
		return nil, err
	}
	var limiter *limit.Limiter
	if c.LimitsTable != "" {
		limits, err := limit.NewTable(d.Clients.DynamoDB, c.LimitsTable)
		if err != nil {
			return nil, err
		}
		if limiter, err = limit.New(ctx, limits, func(o *limit.Options) {
			o.Defaults, o.MaxAge, o.Clock, o.Logger = c.Limits, c.LimitsMaxAge, limit.ClockOf(d.Clock), d.Logger
			o.WaitSpan = c.InflightWait // a window of waits on one key
		}); err != nil {
			return nil, err
		}
	}
	return httpapi.NewHandler(svc, func(o *httpapi.Options) {
		o.TenantClaim, o.Logger, o.Clock, o.Metrics, o.Tracer = c.TenantClaim, d.Logger, d.Clock, d.Metrics, d.Tracer
		if d.fence != nil {
			o.Fence = svc
		}
		if limiter != nil {
			o.Limiter, o.Shedder = limiter, limit.NewShedder(0, d.Clock)
		}
		if c.WebhookSecretName != "" {
			o.Webhook = StripeWebhook(d.secret(c.WebhookSecretName, c.SecretsMaxAge))
		}
	})
}

// StripeWebhook verifies Stripe's webhook deliveries with the endpoint's
// signing secret, read from Secrets Manager. It reads each into the
// notification the charge service settles. That holds the command from
// the PaymentIntent's metadata (zero if it names none), the reference and
// the outcome. A Stripe-Signature no secret verifies is refused before the
// secret is read. A secret that cannot be read fails the delivery with
// httpapi.ErrVerifierUnavailable, so Stripe delivers it again.
func StripeWebhook(secret *secrets.Secret) httpapi.WebhookVerifier {
	return func(ctx context.Context, payload []byte, signature string) (charge.Notification, error) {
		if err := stripe.CheckSignature(signature, 0); err != nil {
			return charge.Notification{}, err
		}
		whsec, err := secret.Value(ctx)
		if err != nil {
			return charge.Notification{}, fmt.Errorf("%w: %w", httpapi.ErrVerifierUnavailable, err)
		}
		ev, err := stripe.ParseWebhook(payload, signature, whsec, 0)
		if err != nil {
			return charge.Notification{}, err
		}
		n := charge.Notification{Provider: ProviderStripe, EventID: ev.ID, Reference: ev.Reference, Row: ev.Row, Result: ev.Result}
		if k, err := idem.ParseKey(ev.Command); err == nil {
			n.Command = k
		}
		return n, nil
	}
}

// IntakeHandler builds the intake function's SQS handler. It uses the
// charge function's service, whose answers an HTTP retry replays. It also
// uses the charge-requests dead-letter queue.
func IntakeHandler(c IntakeConfig, d Deps) (*intake.Handler, error) {
	d, err := d.traced().inRegions(c.Regions)
	if err != nil {
		return nil, err
	}
	sender, err := d.sender(c.ReconcileQueueURL, c.IdempotencyTable, c.ChargesTable)
	if err != nil {
		return nil, err
	}
	dlq, err := intake.NewQueue(d.Clients.SQS, c.DeadLetterQueueURL)
	if err != nil {
		return nil, err
	}
	svc, err := d.service(service{
		Config:           charge.Config{Queue: sender, InflightWait: c.InflightWait, CommitReserve: c.CommitReserve},
		IdempotencyTable: c.IdempotencyTable, ChargesTable: c.ChargesTable, Retention: c.Retention,
		ProviderKind: c.Provider, ProviderURL: c.ProviderURL, ProviderSecretName: c.ProviderSecretName, SecretsMaxAge: c.SecretsMaxAge,
	})
	if err != nil {
		return nil, err
	}
	return intake.NewHandler(svc, dlq, func(o *intake.Options) { o.Logger, o.Metrics, o.Tracer = d.Logger, d.Metrics, d.Tracer })
}

// ReconcileService builds the service the reconcile function drives.
func ReconcileService(c ReconcileConfig, d Deps) (*charge.Service, error) {
	d, err := d.traced().inRegions(c.Regions)
	if err != nil {
		return nil, err
	}
	return reconcileService(c, d)
}

func reconcileService(c ReconcileConfig, d Deps) (*charge.Service, error) {
	return d.service(service{
		Config:           charge.Config{RetryBase: c.RetryBase, RetryCap: c.RetryCap},
		IdempotencyTable: c.IdempotencyTable, ChargesTable: c.ChargesTable, Retention: c.Retention,
		ProviderKind: c.Provider, ProviderURL: c.ProviderURL, ProviderSecretName: c.ProviderSecretName, SecretsMaxAge: c.SecretsMaxAge,
		ProviderOptions: settleWindow(c.SettleWindow),
	})
}

// settleWindow declares the sim provider's settle window; zero is its
// default. It is the same in every function that settles a command or a
// move.
func settleWindow(d time.Duration) []func(*provider.Options) {
	return []func(*provider.Options){provider.WithGuarantees(provider.Guarantees{SettleWindow: cmp.Or(d, provider.DefaultSettleWindow)})}
}
