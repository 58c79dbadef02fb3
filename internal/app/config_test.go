package app_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/secrets"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

func envOf(m map[string]string) app.Getenv { return func(k string) string { return m[k] } }

func TestLoadChargeListsEveryMissingVariable(t *testing.T) {
	t.Parallel()
	_, err := app.LoadCharge(envOf(nil))
	if err == nil {
		t.Fatal("empty environment accepted")
	}
	for _, name := range []string{app.EnvIdempotencyTable, app.EnvChargesTable, app.EnvReconcileQueueURL, app.EnvProviderURL, app.EnvLimitsTable} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

func TestLoadChargeDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvLimitsTable: "limits",
		app.EnvReconcileQueueURL: "http://q", app.EnvProviderURL: "https://p",
	}
	c, err := app.LoadCharge(envOf(base))
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention != 24*time.Hour || c.InflightWait != 2*time.Second || c.TenantClaim != "tenant_id" || c.LogLevel != slog.LevelInfo ||
		c.SecretsMaxAge != 5*time.Minute || c.ProviderSecretName != "" || c.WebhookSecretName != "" || c.SettleWindow != provider.DefaultSettleWindow ||
		c.Limits != (limit.Limits{Rate: limit.DefaultRate, Concurrency: limit.DefaultConcurrency}) || c.LimitsMaxAge != time.Minute {
		t.Fatalf("defaults: %+v", c)
	}
	base[app.EnvIdempotencyTTL], base[app.EnvInflightWait], base[app.EnvLogLevel] = "1h", "0s", "DEBUG"
	base[app.EnvProviderSecretName], base[app.EnvWebhookSecretName], base[app.EnvSecretsMaxAge] = "chargeonce/key", "chargeonce/whsec", "30s"
	base[app.EnvTenantRate], base[app.EnvTenantConcurrency], base[app.EnvLimitsMaxAge] = "25", "8", "10s"
	// A repeated capture or cancel settles a move as the reconciler does:
	// with the same settle window.
	base[app.EnvSettleWindow] = "45s"
	if c, err = app.LoadCharge(envOf(base)); err != nil || c.Retention != time.Hour || c.InflightWait != 0 || c.LogLevel != slog.LevelDebug ||
		c.ProviderSecretName != "chargeonce/key" || c.WebhookSecretName != "chargeonce/whsec" || c.SecretsMaxAge != 30*time.Second ||
		c.SettleWindow != 45*time.Second || c.Limits != (limit.Limits{Rate: 25, Concurrency: 8}) || c.LimitsMaxAge != 10*time.Second {
		t.Fatalf("overrides: %+v %v", c, err)
	}
	for _, c := range []struct{ name, bad string }{
		{app.EnvIdempotencyTTL, "a day"}, {app.EnvInflightWait, "-1s"}, {app.EnvLogLevel, "LOUD"}, {app.EnvSecretsMaxAge, "soon"}, {app.EnvSettleWindow, "later"},
		{app.EnvTenantRate, "0"}, {app.EnvTenantRate, "1000001"}, {app.EnvTenantConcurrency, "many"}, {app.EnvTenantConcurrency, "100001"}, {app.EnvLimitsMaxAge, "-1m"},
	} {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		env[c.name] = c.bad
		if _, err := app.LoadCharge(envOf(env)); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%q: error %v", c.name, c.bad, err)
		}
	}
}

func TestLoadProvider(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvLimitsTable: "limits",
		app.EnvReconcileQueueURL: "http://q", app.EnvProviderURL: "https://p",
	}
	for value, want := range map[string]string{"": app.ProviderSim, "sim": app.ProviderSim, "stripe": app.ProviderStripe, "paypal": ""} {
		env := map[string]string{app.EnvProvider: value}
		for k, v := range base {
			env[k] = v
		}
		c, err := app.LoadCharge(envOf(env))
		r, rerr := app.LoadReconcile(envOf(env))
		switch {
		case want == "" && (err == nil || rerr == nil || !strings.Contains(err.Error(), app.EnvProvider)):
			t.Errorf("%s=%q accepted: %v, %v", app.EnvProvider, value, err, rerr)
		case want != "" && (err != nil || rerr != nil || c.Provider != want || r.Provider != want):
			t.Errorf("%s=%q: %q %v, %q %v; want %q", app.EnvProvider, value, c.Provider, err, r.Provider, rerr, want)
		}
	}
}

func TestLoadAdminRequiresWhatACommandNeeds(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{app.EnvIdempotencyTable: "idem"})
	c, err := app.LoadAdmin(env, app.EnvIdempotencyTable)
	if err != nil || c.IdempotencyTable != "idem" || c.ReconcileQueueURL != "" || c.Retention != 24*time.Hour {
		t.Fatalf("LoadAdmin: %+v, %v", c, err)
	}
	_, err = app.LoadAdmin(env, app.EnvReconcileQueueURL, app.EnvReconcileDLQURL)
	if err == nil || !strings.Contains(err.Error(), app.EnvReconcileQueueURL) || !strings.Contains(err.Error(), app.EnvReconcileDLQURL) {
		t.Fatalf("LoadAdmin without the queues: %v, want both named", err)
	}
}

// TestLoadAdminReadsTheRegionsForTheCommandsOnRecords: a command on
// records writes as the functions do, so it needs their Regions. The
// route commands need only the routes table.
func TestLoadAdminReadsTheRegionsForTheCommandsOnRecords(t *testing.T) {
	t.Parallel()
	env := map[string]string{app.EnvIdempotencyTable: "idem", app.EnvRoutesTable: "routes"}
	if c, err := app.LoadAdmin(envOf(env), app.EnvRoutesTable); err != nil || c.Regions.RoutesTable != "" {
		t.Fatalf("LoadAdmin for a route command: %+v, %v; want no Regions asked for", c.Regions, err)
	}
	if _, err := app.LoadAdmin(envOf(env), app.EnvIdempotencyTable); err == nil || !strings.Contains(err.Error(), app.EnvLedgerTable) {
		t.Fatalf("LoadAdmin for a command on records without the ledger: %v, want %s named", err, app.EnvLedgerTable)
	}
	env[app.EnvLedgerTable], env[app.EnvHomeRegion], env[app.EnvAWSRegion] = "ledger", "r1", "r2"
	c, err := app.LoadAdmin(envOf(env), app.EnvIdempotencyTable)
	if want := (app.Regions{Region: "r2", Home: "r1", Homes: map[string]string{}, RoutesTable: "routes", LedgerTable: "ledger"}); err != nil || !reflect.DeepEqual(c.Regions, want) {
		t.Fatalf("LoadAdmin: %+v, %v; want %+v", c.Regions, err, want)
	}
}

func TestEveryFunctionReadsTheTraceEndpoint(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvReconcileQueueURL: "http://q",
		app.EnvProviderURL: "https://p", app.EnvChargeRequestsDLQURL: "http://dlq",
		app.EnvAuditBucket: "audit", app.EnvAuditIndexTable: "audit-index",
	}
	endpoints := func() []string {
		c, _ := app.LoadCharge(envOf(env))
		r, _ := app.LoadReconcile(envOf(env))
		i, _ := app.LoadIntake(envOf(env))
		s, _ := app.LoadSweeper(envOf(env))
		a, _ := app.LoadAudit(envOf(env))
		return []string{c.TraceEndpoint, r.TraceEndpoint, i.TraceEndpoint, s.TraceEndpoint, a.TraceEndpoint}
	}
	for _, got := range endpoints() {
		if got != "" {
			t.Fatalf("trace endpoint %q without %s, want empty: tracing off", got, app.EnvTraceEndpoint)
		}
	}
	env[app.EnvTraceEndpoint] = "http://localhost:4318"
	for _, got := range endpoints() {
		if got != "http://localhost:4318" {
			t.Fatalf("trace endpoint %q, want %s's", got, app.EnvTraceEndpoint)
		}
	}
}

// TestLoadAudit: the audit function needs both tables, the bucket and the
// index; the index finds three months of entries unless told otherwise.
func TestLoadAudit(t *testing.T) {
	t.Parallel()
	_, err := app.LoadAudit(envOf(map[string]string{}))
	for _, name := range []string{app.EnvIdempotencyTable, app.EnvChargesTable, app.EnvAuditBucket, app.EnvAuditIndexTable} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("LoadAudit with nothing set: %v, want %s named", err, name)
		}
	}
	env := map[string]string{app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvAuditBucket: "audit", app.EnvAuditIndexTable: "audit-index"}
	c, err := app.LoadAudit(envOf(env))
	if err != nil || c.IndexRetention != audit.DefaultIndexRetention {
		t.Errorf("LoadAudit: %+v %v, want the index's default retention", c, err)
	}
	env[app.EnvAuditIndexDays] = "30"
	if c, err := app.LoadAudit(envOf(env)); err != nil || c.IndexRetention != 30*24*time.Hour {
		t.Errorf("LoadAudit with %s=30: %v %v", app.EnvAuditIndexDays, c.IndexRetention, err)
	}
	if _, err := app.AuditHandler(c, app.Deps{}); err == nil {
		t.Error("an audit handler without an S3 client was built")
	}
}

// TestAdminReadsTheIndexDaysAsTheAuditFunctionDoes: chargectl files
// settle's note in the index for as long as the audit function files
// the streams' entries. Both refuse alike a count of days that is none,
// or so many that a duration would overflow.
func TestAdminReadsTheIndexDaysAsTheAuditFunctionDoes(t *testing.T) {
	t.Parallel()
	env := map[string]string{app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvAuditBucket: "audit", app.EnvAuditIndexTable: "audit-index"}
	maxDays := int(audit.MaxIndexRetention / (24 * time.Hour))
	for days, refused := range map[string]bool{
		"": false, "30": false, "1": false, strconv.Itoa(maxDays): false,
		"thirty": true, "0": true, "-1": true, strconv.Itoa(maxDays + 1): true, "200000": true, "9223372036854775807": true,
	} {
		env[app.EnvAuditIndexDays] = days
		f, ferr := app.LoadAudit(envOf(env))
		c, cerr := app.LoadAdmin(envOf(env))
		if c.IndexRetention != f.IndexRetention || (cerr != nil) != refused || (ferr != nil) != refused {
			t.Errorf("%s=%q: chargectl %s %v, the audit function %s %v; want refused: %t", app.EnvAuditIndexDays, days, c.IndexRetention, cerr, f.IndexRetention, ferr, refused)
		}
		if !refused && (f.IndexRetention <= 0 || f.IndexRetention > audit.MaxIndexRetention) {
			t.Errorf("%s=%q: the index keeps entries for %s", app.EnvAuditIndexDays, days, f.IndexRetention)
		}
	}
}

// TestStripeNeedsItsKeysSecret: with PROVIDER=stripe and no secret named,
// the function refuses to start, before any request could find no key.
func TestStripeNeedsItsKeysSecret(t *testing.T) {
	t.Parallel()
	_, err := app.ChargeHandler(t.Context(), app.ChargeConfig{
		IdempotencyTable: "idem", ChargesTable: "charges", ReconcileQueueURL: "http://q",
		Provider: app.ProviderStripe, ProviderURL: "http://p",
	}, app.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), app.EnvProviderSecretName) {
		t.Errorf("stripe without %s: %v, want it named", app.EnvProviderSecretName, err)
	}
}

// TestProviderURLIsHTTPSOutsideALocalStack: the provider's key travels in
// every request, so a function refuses to start with a provider URL that
// is not https. Plain http is taken only beside an emulator's endpoints,
// as make run, sam local and the RIE e2e set them.
func TestProviderURLIsHTTPSOutsideALocalStack(t *testing.T) {
	t.Parallel()
	loaders := map[string]func(app.Getenv) error{
		"charge":    func(g app.Getenv) error { _, err := app.LoadCharge(g); return err },
		"reconcile": func(g app.Getenv) error { _, err := app.LoadReconcile(g); return err },
		"intake":    func(g app.Getenv) error { _, err := app.LoadIntake(g); return err },
	}
	for name, load := range loaders {
		for _, emulator := range []string{"", "http://127.0.0.1:4566"} {
			for url, deployed := range map[string]bool{
				"https://api.stripe.com": true, "https://provider.example:8443/v1": true,
				"http://api.stripe.com": false, "HTTP://127.0.0.1:4010": false,
				"ftp://provider.example": false, "api.stripe.com": false, "https://": false,
			} {
				env := map[string]string{
					app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvReconcileQueueURL: "https://q",
					app.EnvChargeRequestsDLQURL: "https://dlq", app.EnvProviderURL: url, awsenv.EnvDynamoDBEndpoint: emulator,
					app.EnvLimitsTable: "limits",
				}
				want := deployed || emulator != "" && strings.HasPrefix(strings.ToLower(url), "http://")
				if err := load(envOf(env)); (err == nil) != want || err != nil && !strings.Contains(err.Error(), app.EnvProviderURL) {
					t.Errorf("%s, %s=%q, emulator %q: %v; want accepted %v", name, app.EnvProviderURL, url, emulator, err, want)
				}
			}
		}
	}
}

// countedSecrets is the emulator's Secrets Manager, counting the reads.
type countedSecrets struct {
	api   secrets.API
	reads atomic.Int32
}

func (c *countedSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.reads.Add(1)
	return c.api.GetSecretValue(ctx, in, optFns...)
}

// TestStripeWebhookSparesAnUnreadableSecret: while the signing secret
// cannot be read, a delivery whose Stripe-Signature is missing, malformed
// or too old is refused (400) without reading it. One that looks signed
// asks for redelivery (500), and reads the secret once per short while.
func TestStripeWebhookSparesAnUnreadableSecret(t *testing.T) {
	t.Parallel()
	api := &countedSecrets{api: testkit.Clients(t).SecretsManager}
	verify := app.StripeWebhook(secrets.New(api, testkit.UniqueName("chargeonce/missing-whsec")))
	payload := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}`)
	sign := func(at time.Time) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: "whsec_forged", Timestamp: at}).Header
	}
	unsigned := []string{"", "garbage", "t=abc,v1=00", "t=1700000000", "t=1700000000,v1=zz", sign(time.Now().Add(-10 * time.Minute))}
	refused := 0
	for i := range 1000 {
		if _, err := verify(t.Context(), payload, unsigned[i%len(unsigned)]); err != nil && !errors.Is(err, httpapi.ErrVerifierUnavailable) {
			refused++
		}
	}
	if n := api.reads.Load(); refused != 1000 || n != 0 {
		t.Errorf("1,000 unsigned deliveries: %d refused, %d GetSecretValue calls; want 1,000 and 0", refused, n)
	}
	signed, redeliver, before := sign(time.Now()), 0, api.reads.Load()
	for range 1000 {
		if _, err := verify(t.Context(), payload, signed); errors.Is(err, httpapi.ErrVerifierUnavailable) {
			redeliver++
		}
	}
	if n := api.reads.Load() - before; redeliver != 1000 || n != 1 {
		t.Errorf("1,000 deliveries that look signed: %d asked for redelivery, %d GetSecretValue calls; want 1,000 and 1", redeliver, n)
	}
}

// TestRegionsAreReadWithTheRoutesTable: without ROUTES_TABLE a function
// is in one Region, whatever else is set; with it, the ledger, the home
// Region and the function's Region are required, and TENANT_HOMES gives
// tenants other homes.
func TestRegionsAreReadWithTheRoutesTable(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		app.EnvIdempotencyTable: "idem", app.EnvChargesTable: "charges", app.EnvLimitsTable: "limits", app.EnvReconcileQueueURL: "q", app.EnvProviderURL: "https://p",
	}
	one, err := app.LoadCharge(envOf(base))
	if err != nil || one.Regions.RoutesTable != "" {
		t.Fatalf("one Region: %+v, %v", one.Regions, err)
	}
	with := func(more map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range more {
			m[k] = v
		}
		return m
	}
	_, err = app.LoadCharge(envOf(with(map[string]string{app.EnvRoutesTable: "routes"})))
	for _, name := range []string{app.EnvLedgerTable, app.EnvHomeRegion, app.EnvAWSRegion} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("ROUTES_TABLE alone: %v, want %s named", err, name)
		}
	}
	c, err := app.LoadCharge(envOf(with(map[string]string{
		app.EnvRoutesTable: "routes", app.EnvLedgerTable: "ledger", app.EnvHomeRegion: "us-east-1", app.EnvAWSRegion: "us-east-2",
		app.EnvTenantHomes: "acme=us-east-2, globex=us-east-1",
	})))
	if err != nil || c.Regions.Region != "us-east-2" || c.Regions.Home != "us-east-1" || c.Regions.Homes["acme"] != "us-east-2" || c.Regions.Homes["globex"] != "us-east-1" {
		t.Fatalf("two Regions: %+v, %v", c.Regions, err)
	}
	if _, err := app.LoadCharge(envOf(with(map[string]string{
		app.EnvRoutesTable: "routes", app.EnvLedgerTable: "ledger", app.EnvHomeRegion: "us-east-1", app.EnvAWSRegion: "us-east-2", app.EnvTenantHomes: "acme",
	}))); err == nil || !strings.Contains(err.Error(), app.EnvTenantHomes) {
		t.Fatalf("TENANT_HOMES without a Region: %v", err)
	}
}

// TestStacksThatDisagreeOnAHomeServeTheTenantOnce: r2's stack homes acme
// in r2 by TENANT_HOMES; r1's homes it in r1 by HOME_REGION. The first
// stack to serve acme writes its home to the routes table. The other
// obeys it, and answers 421 naming r1, with nothing done.
func TestStacksThatDisagreeOnAHomeServeTheTenantOnce(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	rg := in(t, "r1")
	stack := func(region string, homes map[string]string) *httpapi.Handler {
		return d.ChargeHandler(t, func(w *testkit.Wiring) {
			w.Charge.Regions = rg
			w.Charge.Regions.Region, w.Charge.Regions.Homes = region, homes
		})
	}
	r1, r2 := stack("r1", map[string]string{}), stack("r2", map[string]string{"acme": "r2"})
	body := `{"amount":500,"currency":"EUR","source":"tok_visa"}`
	if resp, err := r1.Handle(t.Context(), testkit.PostCharge("acme", "k1", body)); err != nil || resp.StatusCode != 201 {
		t.Fatalf("r1: %d %s, %v", resp.StatusCode, resp.Body, err)
	}
	resp, err := r2.Handle(t.Context(), testkit.PostCharge("acme", "k2", body))
	if err != nil || resp.StatusCode != 421 || !strings.Contains(resp.Body, "r1") {
		t.Fatalf("r2, which homes acme elsewhere: %d %s, %v; want 421 naming r1", resp.StatusCode, resp.Body, err)
	}
}
