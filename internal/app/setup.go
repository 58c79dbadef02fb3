// Package app provides each function's configuration, read from its
// environment, and builds the function's handler from it. The Lambda mains,
// the local stack and the end-to-end tests all assemble handlers here.
package app

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Environment variables the functions read. template.yaml sets them (a
// test checks both sides agree).
const (
	EnvIdempotencyTable  = "IDEMPOTENCY_TABLE"
	EnvChargesTable      = "CHARGES_TABLE"
	EnvReconcileQueueURL = "RECONCILE_QUEUE_URL"
	EnvProviderURL       = "PROVIDER_URL"
	EnvProviderSecret    = "PROVIDER_SECRET"
	EnvTenantClaim       = "TENANT_CLAIM"
	EnvIdempotencyTTL    = "IDEMPOTENCY_TTL"
	EnvInflightWait      = "INFLIGHT_WAIT"
	EnvCommitReserve     = "COMMIT_RESERVE"
	EnvSettleWindow      = "PROVIDER_SETTLE_WINDOW"
	EnvRetryBase         = "RECONCILE_RETRY_BASE"
	EnvRetryCap          = "RECONCILE_RETRY_CAP"
	EnvLogLevel          = "LOG_LEVEL"
	// EnvReconcileDLQURL is the reconcile dead-letter queue, which no
	// function reads: only chargectl admin does.
	EnvReconcileDLQURL = "RECONCILE_DLQ_URL"
)

// Getenv looks up one variable; os.Getenv is one.
type Getenv func(string) string

// env reads variables and collects every problem, so a misconfigured
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
	return fmt.Errorf("setup: %w", errors.Join(e.errs...))
}

// Charge is the charge function's configuration.
type Charge struct {
	IdempotencyTable, ChargesTable, ReconcileQueueURL string
	ProviderURL, ProviderSecret, TenantClaim          string
	Retention, InflightWait, CommitReserve            time.Duration
	LogLevel                                          slog.Level
}

// LoadCharge reads the charge function's configuration.
func LoadCharge(get Getenv) (Charge, error) {
	e := &env{get: get}
	c := Charge{
		IdempotencyTable:  e.required(EnvIdempotencyTable),
		ChargesTable:      e.required(EnvChargesTable),
		ReconcileQueueURL: e.required(EnvReconcileQueueURL),
		ProviderURL:       e.required(EnvProviderURL),
		ProviderSecret:    e.optional(EnvProviderSecret, ""),
		TenantClaim:       e.optional(EnvTenantClaim, "tenant_id"),
		Retention:         e.duration(EnvIdempotencyTTL, 24*time.Hour),
		InflightWait:      e.duration(EnvInflightWait, 2*time.Second),
		CommitReserve:     e.duration(EnvCommitReserve, charge.DefaultCommitReserve),
		LogLevel:          e.level(),
	}
	return c, e.err()
}

// Reconcile is the reconcile function's configuration.
type Reconcile struct {
	IdempotencyTable, ChargesTable string
	ProviderURL, ProviderSecret    string
	Retention                      time.Duration
	// SettleWindow is the provider's (see provider.Guarantees); zero
	// means provider.DefaultSettleWindow.
	SettleWindow        time.Duration
	RetryBase, RetryCap time.Duration
	LogLevel            slog.Level
}

// LoadReconcile reads the reconcile function's configuration.
func LoadReconcile(get Getenv) (Reconcile, error) {
	e := &env{get: get}
	c := Reconcile{
		IdempotencyTable: e.required(EnvIdempotencyTable),
		ChargesTable:     e.required(EnvChargesTable),
		ProviderURL:      e.required(EnvProviderURL),
		ProviderSecret:   e.optional(EnvProviderSecret, ""),
		Retention:        e.duration(EnvIdempotencyTTL, 24*time.Hour),
		SettleWindow:     e.duration(EnvSettleWindow, provider.DefaultSettleWindow),
		RetryBase:        e.duration(EnvRetryBase, charge.DefaultRetryBase),
		RetryCap:         e.duration(EnvRetryCap, charge.DefaultRetryCap),
		LogLevel:         e.level(),
	}
	return c, e.err()
}

// Sweeper is the sweeper function's configuration.
type Sweeper struct {
	IdempotencyTable, ReconcileQueueURL string
	LogLevel                            slog.Level
}

// LoadSweeper reads the sweeper function's configuration.
func LoadSweeper(get Getenv) (Sweeper, error) {
	e := &env{get: get}
	c := Sweeper{
		IdempotencyTable:  e.required(EnvIdempotencyTable),
		ReconcileQueueURL: e.required(EnvReconcileQueueURL),
		LogLevel:          e.level(),
	}
	return c, e.err()
}

// Admin is chargectl admin's configuration: the deployment's resources,
// named by the variables the functions read, and the dead-letter queue.
type Admin struct {
	IdempotencyTable, ReconcileQueueURL, ReconcileDLQURL string
}

// LoadAdmin reads chargectl admin's configuration. The variables in need
// are required; the others are read if set.
func LoadAdmin(get Getenv, need ...string) (Admin, error) {
	e := &env{get: get}
	read := func(name string) string {
		if slices.Contains(need, name) {
			return e.required(name)
		}
		return e.optional(name, "")
	}
	c := Admin{
		IdempotencyTable:  read(EnvIdempotencyTable),
		ReconcileQueueURL: read(EnvReconcileQueueURL),
		ReconcileDLQURL:   read(EnvReconcileDLQURL),
	}
	return c, e.err()
}

// Logger is the JSON logger every function writes to standard output.
func Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
}

// Deps are what handlers are built from besides configuration; tests and
// the local stack pass their own clock and provider HTTP client.
type Deps struct {
	Clients awsenv.Clients
	Clock   func() time.Time
	Logger  *slog.Logger
	// ProviderOptions adjust the provider client (e.g. its HTTP client).
	ProviderOptions []provider.Option
}

func (d Deps) store(table string, retention time.Duration) (*idem.Store, error) {
	return idem.New(d.Clients.DynamoDB, table, func(o *idem.Options) {
		o.Retention = retention
		o.Clock = d.Clock
	})
}

func (d Deps) service(cfg charge.Config, table string, retention time.Duration, providerURL, secret string, providerOpts ...provider.Option) (*charge.Service, error) {
	store, err := d.store(table, retention)
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	cfg.Charges = d.Clients.DynamoDB
	cfg.Provider = provider.NewClient(providerURL, secret, append(providerOpts, d.ProviderOptions...)...)
	cfg.Clock = d.Clock
	cfg.Logger = d.Logger
	return charge.NewService(cfg)
}

// ChargeHandler builds the charge function's API Gateway handler.
func ChargeHandler(c Charge, d Deps) (*charge.Handler, error) {
	sender, err := queue.NewSender(d.Clients.SQS, c.ReconcileQueueURL)
	if err != nil {
		return nil, err
	}
	svc, err := d.service(charge.Config{
		ChargesTable: c.ChargesTable, Reconciler: sender, InflightWait: c.InflightWait, CommitReserve: c.CommitReserve,
	}, c.IdempotencyTable, c.Retention, c.ProviderURL, c.ProviderSecret)
	if err != nil {
		return nil, err
	}
	return charge.NewHandler(svc, c.TenantClaim, d.Logger)
}

// ReconcileService builds the service the reconcile function drives.
func ReconcileService(c Reconcile, d Deps) (*charge.Service, error) {
	return d.service(charge.Config{ChargesTable: c.ChargesTable, RetryBase: c.RetryBase, RetryCap: c.RetryCap},
		c.IdempotencyTable, c.Retention, c.ProviderURL, c.ProviderSecret,
		provider.WithGuarantees(provider.Guarantees{SettleWindow: cmp.Or(c.SettleWindow, provider.DefaultSettleWindow)}))
}
