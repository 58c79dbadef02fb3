package main

import (
	"slices"
	"testing"

	"github.com/chargeonce/chargeonce/internal/awsenv"
)

func TestStackEnvPointsTheStackAtTheProxies(t *testing.T) {
	t.Parallel()
	env := stackEnv([]string{"DYNAMODB_ENDPOINT=http://127.0.0.1:1", "PATH=/bin", "RECONCILE_RETRY_BASE=9s"},
		awsenv.Endpoints{DynamoDB: "http://127.0.0.1:2", SQS: "http://127.0.0.1:3", SecretsManager: "http://127.0.0.1:1"})
	want := []string{"DYNAMODB_ENDPOINT=http://127.0.0.1:2", "PATH=/bin", "PROVIDER_SETTLE_WINDOW=30s", "RECONCILE_RETRY_BASE=9s",
		"RECONCILE_RETRY_CAP=1m", "SECRETSMANAGER_ENDPOINT=http://127.0.0.1:1", "SQS_ENDPOINT=http://127.0.0.1:3"}
	if !slices.Equal(env, want) {
		t.Errorf("stack environment %q, want %q", env, want)
	}
}

func TestParseFlagsNeedsTheEmulator(t *testing.T) {
	t.Parallel()
	emulator := map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1", "SQS_ENDPOINT": "http://127.0.0.1:1", "SECRETSMANAGER_ENDPOINT": "http://127.0.0.1:1"}
	c, err := parseFlags(nil, func(name string) string { return emulator[name] })
	if err != nil || c.seed == 0 || c.outage != 0 {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	if _, err := parseFlags(nil, func(string) string { return "" }); err == nil {
		t.Error("no emulator endpoints: accepted")
	}
	for _, args := range [][]string{{"-outage", "4m"}, {"-rate", "0"}, {"extra"}} {
		if _, err := parseFlags(args, func(name string) string { return emulator[name] }); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	stripe := func(name string) string {
		if name == "PROVIDER" {
			return "stripe"
		}
		return emulator[name]
	}
	if _, err := parseFlags(nil, stripe); err == nil {
		t.Error("PROVIDER=stripe accepted: the checks read the simulator's ledger")
	}
}
