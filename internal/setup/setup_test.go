package setup_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/setup"
)

func envOf(m map[string]string) setup.Getenv { return func(k string) string { return m[k] } }

func TestLoadChargeListsEveryMissingVariable(t *testing.T) {
	t.Parallel()
	_, err := setup.LoadCharge(envOf(nil))
	if err == nil {
		t.Fatal("empty environment accepted")
	}
	for _, name := range []string{setup.EnvIdempotencyTable, setup.EnvChargesTable, setup.EnvReconcileQueueURL, setup.EnvProviderURL} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

func TestLoadChargeDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		setup.EnvIdempotencyTable: "idem", setup.EnvChargesTable: "charges",
		setup.EnvReconcileQueueURL: "http://q", setup.EnvProviderURL: "http://p",
	}
	c, err := setup.LoadCharge(envOf(base))
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention != 24*time.Hour || c.InflightWait != 2*time.Second || c.TenantClaim != "tenant_id" || c.LogLevel != slog.LevelInfo {
		t.Fatalf("defaults: %+v", c)
	}
	base[setup.EnvIdempotencyTTL], base[setup.EnvInflightWait], base[setup.EnvLogLevel] = "1h", "0s", "DEBUG"
	if c, err = setup.LoadCharge(envOf(base)); err != nil || c.Retention != time.Hour || c.InflightWait != 0 || c.LogLevel != slog.LevelDebug {
		t.Fatalf("overrides: %+v %v", c, err)
	}
	for name, bad := range map[string]string{setup.EnvIdempotencyTTL: "a day", setup.EnvInflightWait: "-1s", setup.EnvLogLevel: "LOUD"} {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		env[name] = bad
		if _, err := setup.LoadCharge(envOf(env)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v", name, bad, err)
		}
	}
}
