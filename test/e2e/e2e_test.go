package e2e

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestFunctionsUnderTheRuntimeEmulator runs the five Lambda binaries
// under the Runtime Interface Emulator against one deployment's tables,
// queue and provider, and drives them with the events in events/. The
// provider takes one key only, which the functions read from a secret,
// as deployed: their environment names it.
func TestFunctionsUnderTheRuntimeEmulator(t *testing.T) {
	t.Parallel()
	clients := testkit.Clients(t)
	d := testkit.Deploy(t, providersim.WithSecret(providerKey))
	keySecret := testkit.Secret(t, providerKey)
	sim, providerURL, q, idemTable, chargesTable := d.Sim, d.ProviderURL, d.Queues, d.IdempotencyTable, d.ChargesTable
	trail := d.Audit(t)

	bootstraps := buildBootstraps(t)
	rie := installRIE(t)
	config := map[string]map[string]string{
		"charge": {
			app.EnvIdempotencyTable: idemTable, app.EnvChargesTable: chargesTable, app.EnvLimitsTable: d.LimitsTable,
			app.EnvReconcileQueueURL: q.URL, app.EnvProviderURL: providerURL, app.EnvTenantClaim: testkit.TenantClaim,
			app.EnvProviderSecretName: keySecret,
		},
		"sweeper": {app.EnvIdempotencyTable: idemTable, app.EnvChargesTable: chargesTable, app.EnvReconcileQueueURL: q.URL},
		"reconcile": {
			app.EnvIdempotencyTable: idemTable, app.EnvChargesTable: chargesTable, app.EnvProviderURL: providerURL,
			app.EnvProviderSecretName: keySecret,
		},
		"intake": {
			app.EnvIdempotencyTable: idemTable, app.EnvChargesTable: chargesTable, app.EnvReconcileQueueURL: q.URL,
			app.EnvChargeRequestsDLQURL: d.ChargeRequests.DLQURL, app.EnvProviderURL: providerURL,
			app.EnvProviderSecretName: keySecret,
		},
		"audit": {
			app.EnvIdempotencyTable: idemTable, app.EnvChargesTable: chargesTable,
			app.EnvAuditBucket: trail.Config.AuditBucket, app.EnvAuditIndexTable: trail.Config.AuditIndexTable,
		},
	}
	fns := map[string]*function{}
	for _, name := range slices.Sorted(maps.Keys(functions)) {
		env := awsEnv(t)
		maps.Copy(env, config[name])
		env["AWS_LAMBDA_FUNCTION_NAME"] = "chargeonce-" + name
		env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = strconv.Itoa(int(functions[name].Seconds()))
		env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = "256"
		fns[name] = startFunction(t, rie, name, bootstraps[name], env)
	}

	t.Run("charge", func(t *testing.T) { chargeEvents(t, fns["charge"], sim) })
	t.Run("intake", func(t *testing.T) { intakeEvent(t, fns, idemTable, sim) })
	t.Run("sweep and reconcile a stuck record", func(t *testing.T) {
		stuckRecord(t, fns, clients.SQS, q.URL, idemTable, providerURL, sim)
	})
	t.Run("audit", func(t *testing.T) { auditEvent(t, fns["audit"], trail, idemTable) })
	t.Run("a Stripe webhook settles an ambiguous charge", func(t *testing.T) {
		webhookSettles(t, rie, bootstraps["charge"], config["charge"], idemTable)
	})

	for _, name := range slices.Sorted(maps.Keys(functions)) {
		report, runtimeInit := fns[name].initDurations(t)
		t.Logf("%-9s bootstrap %s; REPORT Init Duration %s; INIT REPORT %s", name, fileSize(t, bootstraps[name]), report, runtimeInit)
		t.Logf("%-9s first request %s", name, fns[name].firstRequest())
	}
}

// providerKey is the provider simulator's key in the e2e deployment.
const providerKey = "sk_e2e_providersim"

type problemBody struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
}

func chargeEvents(t *testing.T, fn *function, sim *providersim.Simulator) {
	var created, replayed, mismatch, missing, got events.APIGatewayV2HTTPResponse
	fn.invoke(t, readEvent(t, "charge-create"), &created)
	if created.StatusCode != http.StatusCreated || created.Headers[httpapi.HeaderReplayed] != "" {
		t.Fatalf("create: %d %v %s", created.StatusCode, created.Headers, created.Body)
	}
	var c struct {
		ID                string `json:"id"`
		Amount            int64  `json:"amount"`
		ProviderReference string `json:"provider_reference"`
	}
	if err := json.Unmarshal([]byte(created.Body), &c); err != nil || c.Amount != 1500 || created.Headers["Location"] != "/charges/"+c.ID {
		t.Errorf("create body %s (%v), Location %q", created.Body, err, created.Headers["Location"])
	}

	fn.invoke(t, readEvent(t, "charge-replay"), &replayed)
	if replayed.StatusCode != http.StatusCreated || replayed.Headers[httpapi.HeaderReplayed] != "true" || replayed.Body != created.Body {
		t.Errorf("replay: %d %v %s, want 201 replayed with the first body %s", replayed.StatusCode, replayed.Headers, replayed.Body, created.Body)
	}

	fn.invoke(t, readEvent(t, "charge-mismatch"), &mismatch)
	wantProblem(t, "mismatch", mismatch, http.StatusUnprocessableEntity, "idempotency-key-reused")
	fn.invoke(t, readEvent(t, "charge-missing-key"), &missing)
	wantProblem(t, "missing key", missing, http.StatusBadRequest, "invalid-idempotency-key")

	// events/charge-get.json names an example charge: charge ids derive
	// from the record's creation, so the test asks for the one just made.
	fn.invoke(t, bytes.ReplaceAll(readEvent(t, "charge-get"), []byte(exampleChargeID), []byte(c.ID)), &got)
	if got.StatusCode != http.StatusOK || got.Body != created.Body {
		t.Errorf("get: %d %s, want 200 %s", got.StatusCode, got.Body, created.Body)
	}

	if e := sim.Ledger().References[c.ProviderReference]; e.Charges != 1 || e.Calls != 1 {
		t.Errorf("provider ledger for order-1001: %+v, want one call and one charge", e)
	}
}

// intakeEvent hands the intake function events/intake-sqs.json twice, as
// a redelivery would: one charge, which GET returns, and which a POST
// /charges with the message's command id and request replays.
func intakeEvent(t *testing.T, fns map[string]*function, idemTable string, sim *providersim.Simulator) {
	ev := readEvent(t, "intake-sqs")
	for i := range 2 {
		var res events.SQSEventResponse
		fns["intake"].invoke(t, ev, &res)
		if len(res.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: intake reported %+v", i+1, res.BatchItemFailures)
		}
	}
	var sqsEv events.SQSEvent
	if err := json.Unmarshal(ev, &sqsEv); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Tenant    string          `json:"tenant"`
		CommandID string          `json:"command_id"`
		Request   json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal([]byte(sqsEv.Records[0].Body), &msg); err != nil {
		t.Fatal(err)
	}
	key, _ := idem.NewKey(msg.Tenant, charge.ChargeOperation, msg.CommandID)
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, idemTable)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(t.Context(), key)
	if err != nil || rec.Status != idem.StatusSucceeded || rec.Response == nil || rec.Response.Status != http.StatusCreated {
		t.Fatalf("record after the intake: %+v %v, want SUCCEEDED with a 201", rec, err)
	}
	if e := sim.Ledger().References[charge.ProviderReference(key, rec.CreatedAt)]; e.Charges != 1 || e.Calls != 1 {
		t.Errorf("provider ledger for %s: %+v, want one call and one charge for two deliveries", msg.CommandID, e)
	}
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rec.Response.Body, &c); err != nil {
		t.Fatal(err)
	}
	var got, replay events.APIGatewayV2HTTPResponse
	fns["charge"].invoke(t, bytes.ReplaceAll(readEvent(t, "charge-get"), []byte(exampleChargeID), []byte(c.ID)), &got)
	if got.StatusCode != http.StatusOK || got.Body != string(rec.Response.Body) {
		t.Errorf("get: %d %s, want 200 %s", got.StatusCode, got.Body, rec.Response.Body)
	}
	var retry events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(readEvent(t, "charge-create"), &retry); err != nil {
		t.Fatal(err)
	}
	retry.Headers["idempotency-key"] = msg.CommandID
	retry.Headers["content-length"] = strconv.Itoa(len(msg.Request))
	retry.Body = string(msg.Request)
	payload, _ := json.Marshal(retry)
	fns["charge"].invoke(t, payload, &replay)
	if replay.StatusCode != http.StatusCreated || replay.Headers[httpapi.HeaderReplayed] != "true" || replay.Body != string(rec.Response.Body) {
		t.Errorf("POST /charges with the message's command id: %d %v %s, want the intake's 201 replayed", replay.StatusCode, replay.Headers, replay.Body)
	}
}

// auditEvent hands the audit function events/audit-stream.json, a
// charge's claim and its settlement as the idempotency table's stream
// delivers them: both are in the trail, found by the key's hash, with
// who asked and what came back.
func auditEvent(t *testing.T, fn *function, trail *testkit.Trail, idemTable string) {
	ev := bytes.ReplaceAll(readEvent(t, "audit-stream"), []byte("table/chargeonce-idempotency/"), []byte("table/"+idemTable+"/"))
	var out json.RawMessage
	fn.invoke(t, ev, &out)
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1001")
	history, err := trail.Reader(t).History(t.Context(), key.LogHash())
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || history[0].What != audit.WhatClaimed || history[1].What != audit.WhatSucceeded || history[1].Answer != http.StatusCreated ||
		history[0].Principal == nil || history[0].Principal.Sub == "" || string(history[0].Request) != `{"amount":1500,"currency":"EUR"}` {
		t.Errorf("the trail of events/audit-stream.json: %+v", history)
	}
}

// exampleChargeID is the charge events/charge-get.json asks for.
const exampleChargeID = "ch_b3867622bf6161e6b485bdb9"

func wantProblem(t *testing.T, what string, res events.APIGatewayV2HTTPResponse, status int, slug string) {
	t.Helper()
	var p problemBody
	if err := json.Unmarshal([]byte(res.Body), &p); err != nil || res.StatusCode != status || p.Type != httpapi.ProblemBase+slug {
		t.Errorf("%s: %d %s, want %d %s", what, res.StatusCode, res.Body, status, slug)
	}
}

// stuckRecord abandons an attempt after the provider charged it, as a
// crashed function would, and has the sweeper and the reconcile function
// settle it; a retry then replays the settled charge.
func stuckRecord(t *testing.T, fns map[string]*function, sqsClient *sqs.Client, queueURL, idemTable, providerURL string, sim *providersim.Simulator) {
	ctx := t.Context()
	const lease = time.Second
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, idemTable, func(o *dynamostore.Options) {
		o.DefaultLease, o.MaxLease, o.LeaseMargin = lease, lease, lease/10
	})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-2002")
	const body = `{"amount":2500,"currency":"EUR","source":"tok_visa"}`
	canonical, err := idem.CanonicalJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	// What the charge function stores as the intent (the card source is
	// never stored).
	begun, err := store.Begin(ctx, key, idem.FingerprintOf(canonical), []byte(`{"amount":2500,"currency":"EUR"}`))
	if err != nil || begun.Lease == nil {
		t.Fatalf("begin: %+v %v", begun, err)
	}
	if _, err := provider.NewClient(providerURL, providerKey).Charge(ctx, provider.ChargeRequest{
		Reference: charge.ProviderReference(key, begun.Lease.CreatedAt), Amount: 2500, Currency: "EUR", Source: providersim.SourceVisa,
	}); err != nil {
		t.Fatal(err)
	}
	// The attempt dies here. Its lease runs out in real time, which is
	// what the functions' clocks read.
	time.Sleep(time.Until(begun.Lease.ExpiresAt) + 200*time.Millisecond)

	fns["sweeper"].invoke(t, readEvent(t, "sweeper-schedule"), nil)
	msg := receive(t, sqsClient, queueURL)
	if got, err := queue.ParseMessage(aws.ToString(msg.Body)); err != nil || got.Key != key {
		t.Fatalf("swept message %q: key %v, %v", aws.ToString(msg.Body), got.Key, err)
	}

	var ev events.SQSEvent
	if err := json.Unmarshal(readEvent(t, "reconcile-sqs"), &ev); err != nil || len(ev.Records) != 1 {
		t.Fatalf("events/reconcile-sqs.json: %v", err)
	}
	arn, err := sqsClient.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &ev.Records[0]
	r.MessageId, r.ReceiptHandle, r.Body, r.Md5OfBody = aws.ToString(msg.MessageId), aws.ToString(msg.ReceiptHandle), aws.ToString(msg.Body), aws.ToString(msg.MD5OfBody)
	r.Attributes = msg.Attributes
	r.EventSourceARN = arn.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	payload, _ := json.Marshal(ev)
	var res events.SQSEventResponse
	fns["reconcile"].invoke(t, payload, &res)
	if len(res.BatchItemFailures) != 0 {
		t.Fatalf("reconcile reported failures: %+v", res.BatchItemFailures)
	}

	rec, err := store.Get(ctx, key)
	if err != nil || rec.Status != idem.StatusSucceeded || rec.Response == nil || rec.Response.Status != http.StatusCreated {
		t.Fatalf("record after reconcile: %+v %v, want SUCCEEDED with a 201", rec, err)
	}
	if e := sim.Ledger().References[charge.ProviderReference(key, rec.CreatedAt)]; e.Charges != 1 || e.Calls != 1 {
		t.Errorf("provider ledger for order-2002: %+v, want the one charge", e)
	}

	// The client's retry gets the charge the reconciler recorded.
	var retry events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(readEvent(t, "charge-create"), &retry); err != nil {
		t.Fatal(err)
	}
	retry.Headers["idempotency-key"] = key.ClientKey()
	retry.Headers["content-length"] = strconv.Itoa(len(body))
	retry.Body = body
	payload, _ = json.Marshal(retry)
	var replay events.APIGatewayV2HTTPResponse
	fns["charge"].invoke(t, payload, &replay)
	if replay.StatusCode != http.StatusCreated || replay.Headers[httpapi.HeaderReplayed] != "true" || replay.Body != string(rec.Response.Body) {
		t.Errorf("retry after reconcile: %d %v %s, want the recorded 201 %s", replay.StatusCode, replay.Headers, replay.Body, rec.Response.Body)
	}
}
