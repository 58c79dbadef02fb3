package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestStackServesThenStopsEverything runs the stack as `make run` does, on
// free ports with its own emulator, charges once through it, and checks
// that cancelling stops the emulator it started: with the provider
// simulator, and with PROVIDER=stripe on the Stripe simulator.
func TestStackServesThenStopsEverything(t *testing.T) {
	t.Parallel()
	for provider, source := range map[string]string{"": "tok_visa", app.ProviderStripe: stripesim.PMVisa} {
		t.Run(cmp.Or(provider, app.ProviderSim), func(t *testing.T) {
			t.Parallel()
			// An empty environment but PROVIDER: no DYNAMODB_ENDPOINT or
			// SQS_ENDPOINT, so the stack starts its own emulator (its table
			// names are fixed, and must not land on a shared endpoint), and
			// every other function setting defaults.
			getenv := func(name string) string {
				if name == app.EnvProvider {
					return provider
				}
				return ""
			}
			if provider != "" {
				stackServesThenStops(t, getenv, source, "127.0.0.1:0")
				return
			}
			// The functions reach the simulator through a forwarder,
			// as cmd/chaos has them reach it through Toxiproxy.
			simAddr := freeAddr(t)
			fwd, conns := forward(t, simAddr)
			stackServesThenStops(t, getenv, source, simAddr, "-provider-url", "http://"+fwd)
			if conns.Load() == 0 {
				t.Error("-provider-url: the functions did not reach the simulator through it")
			}
		})
	}
}

// freeAddr is a loopback address nothing listens on, for a server that
// must be named before it starts.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// forward accepts connections on a free loopback port and pipes each to
// upstream, counting them.
func forward(t *testing.T, upstream string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

func stackServesThenStops(t *testing.T, getenv func(string) string, source, providerAddr string, args ...string) {
	o, err := parseFlags(append([]string{"-root", testkit.RepoRoot(), "-addr", "127.0.0.1:0", "-provider-addr", providerAddr, "-emulator-port", "0", "-trace-json"}, args...), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if o.spans == nil {
		t.Fatal("-trace-json: no span output")
	}
	spans := &testkit.LogBuffer{}
	o.spans = spans
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ready := make(chan stack, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, slog.New(slog.DiscardHandler), func(s stack) { ready <- s }) }()
	var s stack
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("stack not ready after 90s")
	}

	var banner strings.Builder
	printBanner(&banner, s)
	curl := banner.String()[strings.Index(banner.String(), "curl "):]
	if !strings.Contains(curl, s.api+"/charges") || !strings.Contains(curl, "Bearer dev:acme") {
		t.Errorf("banner's curl does not target the API:\n%s", banner.String())
	}
	for _, want := range []string{"IDEMPOTENCY_TABLE=chargeonce-idempotency", "CHARGES_TABLE=chargeonce-charges", "RECONCILE_QUEUE_URL=" + s.queueURL, "RECONCILE_DLQ_URL=" + s.dlqURL,
		"CHARGE_REQUESTS_QUEUE_URL=" + s.intakeURL, "AUDIT_BUCKET=chargeonce-audit", "AUDIT_INDEX_TABLE=chargeonce-audit-index",
		"DYNAMODB_ENDPOINT=" + s.dynamoDB, "SQS_ENDPOINT=" + s.sqs, "S3_ENDPOINT=" + s.s3, "AWS_ACCESS_KEY_ID=test"} {
		if s.queueURL == "" || s.dlqURL == "" || s.intakeURL == "" || !strings.Contains(banner.String(), want) {
			t.Errorf("banner's chargectl admin environment lacks %s:\n%s", want, banner.String())
		}
	}
	if status, body := postCharge(t, s, "order-1001", 1500, source); status != http.StatusCreated {
		t.Fatalf("POST /charges: %d %s", status, body)
	}
	if !strings.Contains(curl, source) {
		t.Errorf("banner's curl does not charge %s:\n%s", source, banner.String())
	}
	if s.stripeSim != nil {
		// stripesim's payment_intent.succeeded reaches the stack's
		// POST /webhooks/stripe, verifies and is acknowledged.
		for deadline := time.Now().Add(10 * time.Second); s.stripeSim.WebhooksDelivered() == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("stripesim's webhook was not acknowledged by the stack within 10s")
			}
		}
	}
	wantSpans(t, spans, "order-1001", source)
	submitAndReplay(t, s, source)
	trailShows(t, s)
	rotateWhileRunning(t, s, source)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stack did not stop")
	}
	for _, url := range []string{s.dynamoDB, s.api, s.provider} {
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after the stack stopped", url)
		}
	}
}

// wantSpans checks that the charge just made printed its spans as JSON
// lines, the invocation's and the store's and provider's within it in one
// trace, and that none names the raw key or source.
func wantSpans(t *testing.T, spans *testkit.LogBuffer, secrets ...string) {
	t.Helper()
	// Other invocations (a webhook from stripesim) may have traces of
	// their own: the charge's is the one its provider call is in.
	tracesOf := map[string]map[string]bool{}
	for _, r := range spans.Records(t) {
		name, _ := r["Name"].(string)
		sc, _ := r["SpanContext"].(map[string]any)
		id, _ := sc["TraceID"].(string)
		if tracesOf[name] == nil {
			tracesOf[name] = map[string]bool{}
		}
		tracesOf[name][id] = true
	}
	var charge string
	for id := range tracesOf["provider.Charge"] {
		charge = id
	}
	if len(tracesOf["provider.Charge"]) != 1 {
		t.Errorf("provider.Charge spans in %d traces, want 1: %v", len(tracesOf["provider.Charge"]), tracesOf)
	}
	for _, name := range []string{"charge", "idem.Begin", "idem.Commit", "DynamoDB.PutItem", "DynamoDB.TransactWriteItems"} {
		if !tracesOf[name][charge] {
			t.Errorf("span %s: traces %v, want the charge's %q; spans: %v", name, tracesOf[name], charge, tracesOf)
		}
	}
	for _, secret := range secrets {
		if strings.Contains(spans.String(), secret) {
			t.Errorf("the spans name %q", secret)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, func(string) string { return "" })
	if err != nil || o.apiAddr != "127.0.0.1:3000" || o.providerAddr != "127.0.0.1:4010" || o.emulatorPort != 4566 || o.sweepEvery != 5*time.Second || o.spans != nil {
		t.Errorf("defaults: %+v %v", o, err)
	}
	for _, args := range [][]string{{"-sweep-every", "0s"}, {"-slow", "-1s"}, {"extra"}, {"-nope"}} {
		if _, err := parseFlags(args, func(string) string { return "" }); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	// PROVIDER_URL in Stripe mode replaces the simulator -provider-url
	// would name.
	external := func(name string) string {
		return map[string]string{app.EnvProvider: app.ProviderStripe, app.EnvProviderURL: "http://127.0.0.1:12111"}[name]
	}
	if _, err := parseFlags([]string{"-provider-url", "http://127.0.0.1:9"}, external); err == nil {
		t.Error("-provider-url accepted beside PROVIDER=stripe PROVIDER_URL")
	}
}

// submitAndReplay submits a charge on the stack's charge-requests queue,
// waits for the intake to charge it, and has POST /charges with its
// command id replay it.
func submitAndReplay(t *testing.T, s stack, source string) {
	t.Helper()
	ctx := t.Context()
	cfg, err := awsenv.Config(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	clients := awsenv.New(cfg, awsenv.Endpoints{DynamoDB: s.dynamoDB, SQS: s.sqs})
	q, err := intake.NewQueue(clients.SQS, s.intakeURL)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"amount":2500,"currency":"EUR","source":"` + source + `"}`
	if _, err := q.Submit(ctx, "acme", "renewal-1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(clients.DynamoDB, idempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	key, err := idem.NewKey("acme", charge.ChargeOperation, "renewal-1")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		rec, err := store.Get(ctx, key)
		if err == nil && rec.Status == idem.StatusSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the intake did not charge the submitted message within 30s (record: %+v, %v)", rec, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.api+"/charges", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer dev:acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "renewal-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("POST /charges with the submitted command id: %d %v, want the intake's 201 replayed", res.StatusCode, res.Header)
	}
}

// trailShows waits until the audit trail, fed from the tables' streams,
// holds the API's charge with the caller's address, and the queue's with
// its sender and message.
func trailShows(t *testing.T, s stack) {
	t.Helper()
	ctx := t.Context()
	cfg, err := awsenv.Config(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := audit.NewArchive(awsenv.S3(cfg, s.s3), auditBucket)
	if err != nil {
		t.Fatal(err)
	}
	index, err := audit.NewIndex(awsenv.New(cfg, awsenv.Endpoints{DynamoDB: s.dynamoDB}).DynamoDB, auditIndexTable)
	if err != nil {
		t.Fatal(err)
	}
	trail, err := audit.NewTrail(archive, index, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	settled := func(client string) *audit.Entry {
		k, _ := idem.NewKey("acme", charge.ChargeOperation, client)
		history, err := trail.History(ctx, k.LogHash())
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range history {
			if e.What == audit.WhatSucceeded {
				return &history[i]
			}
		}
		return nil
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		api, queued := settled("order-1001"), settled("renewal-1")
		if api != nil && queued != nil {
			if api.Origin == nil || api.Origin.IP != "127.0.0.1" || queued.Principal == nil || queued.Principal.IAM == "" || queued.Origin == nil || queued.Origin.Message == "" {
				t.Errorf("the trail's charges: %+v %+v, want the API's caller's address and the queue's sender and message", *api, *queued)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit trail does not hold both charges 20s after they were made: %v, %v", api, queued)
		}
	}
}

// rotateWhileRunning rotates the stack's secrets in its Secrets Manager,
// as docs/operations.md rotates a deployment's, waits until the provider
// simulator refuses the old key, and charges through the API: the
// functions, still holding the old key, take the new one without a
// restart. With the Stripe simulator the webhook secret is rotated too,
// and a webhook signed with the new one is acknowledged.
func rotateWhileRunning(t *testing.T, s stack, source string) {
	t.Helper()
	ctx := t.Context()
	cfg, err := awsenv.Config(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	sm := awsenv.New(cfg, awsenv.Endpoints{SecretsManager: s.secretsManager}).SecretsManager
	oldKey, newKey, probe := simKey, "sk_local_rotated", s.provider+"/v1/charges/order-1001"
	if s.stripeSim != nil {
		oldKey, newKey, probe = stripeSimKey, "sk_test_rotated", s.provider+"/v1/payment_intents/pi_none"
	}
	put := func(name, value string) {
		if _, err := sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(value)}); err != nil {
			t.Fatal(err)
		}
	}
	put(providerSecret, newKey)
	if s.stripeSim != nil {
		put(webhookSecret, "whsec_rotated")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, probe, nil)
		req.Header.Set("Authorization", "Bearer "+oldKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider simulator still takes the old key 10s after the rotation (%d)", res.StatusCode)
		}
	}
	delivered := 0
	if s.stripeSim != nil {
		delivered = s.stripeSim.WebhooksDelivered()
	}
	if status, body := postCharge(t, s, "order-after-rotation", 1700, source); status != http.StatusCreated {
		t.Fatalf("POST /charges after the key's rotation: %d %s, want 201 on the new key", status, body)
	}
	if s.stripeSim == nil {
		return
	}
	// The functions read the webhook secret again after SECRETS_MAX_AGE
	// (5s here); stripesim repeats a refused delivery meanwhile.
	for deadline := time.Now().Add(30 * time.Second); s.stripeSim.WebhooksDelivered() == delivered; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no webhook signed with the rotated secret was acknowledged within 30s")
		}
	}
}

// postCharge charges amount to source through the stack's API under the
// idempotency key, as tenant acme, and returns the answer's status and
// body.
func postCharge(t *testing.T, s stack, key string, amount int, source string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.api+"/charges",
		strings.NewReader(fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":"%s"}`, amount, source)))
	req.Header.Set("Authorization", "Bearer dev:acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, string(body)
}
