package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// stack is one deployment with its intake and charge functions, built as
// the functions build themselves, and what the intake logged.
type stack struct {
	d      *testkit.Deployment
	intake *intake.Handler
	api    *httpapi.Handler
	logs   *testkit.LogBuffer
	store  *dynamostore.Store
}

func newStack(t *testing.T) *stack {
	t.Helper()
	d := testkit.Deploy(t)
	logs := &testkit.LogBuffer{}
	h := d.IntakeHandler(t, func(w *testkit.Wiring) { w.Deps.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	return &stack{d: d, intake: h, api: d.ChargeHandler(t), logs: logs, store: store}
}

// record is an SQS record as Lambda delivers it.
func record(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body, EventSource: "aws:sqs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
}

func message(t *testing.T, tenant, id, request string) string {
	t.Helper()
	body, err := intake.EncodeMessage(tenant, charge.CommandID(id), []byte(request))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// handle delivers records as one batch and returns the ids reported for
// another delivery.
func (s *stack) handle(t *testing.T, records ...events.SQSMessage) []string {
	t.Helper()
	resp, err := s.intake.Handle(t.Context(), events.SQSEvent{Records: records})
	if err != nil {
		t.Fatalf("Handle returned an error: %v", err)
	}
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// outcomes are the outcomes the intake logged, by message id, in order.
func (s *stack) outcomes(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range s.logs.Records(t) {
		if r["msg"] == "intake" {
			id := r["message_id"].(string)
			out[id] = append(out[id], r["outcome"].(string))
		}
	}
	return out
}

// ledger returns the provider's calls and charges for key's command.
func (s *stack) ledger(t *testing.T, key idem.Key) (calls, charges int) {
	t.Helper()
	rec, err := s.store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("record of %s: %v", key, err)
	}
	e := s.d.Sim.Ledger().References[charge.ProviderReference(key, rec.CreatedAt)]
	return e.Calls, e.Charges
}

func key(t *testing.T, tenant, id string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, charge.ChargeOperation, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const renewal = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"December"}`

// A message creates one charge, which GET returns and which an HTTP
// request with the same command id and the same body (written another
// way) replays.
func TestMessageCreatesAChargeThatHTTPReplays(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const id = "renewal-2026-12-acme-42"
	if failed := s.handle(t, record("m1", message(t, "acme", id, renewal))); len(failed) != 0 {
		t.Fatalf("reported for redelivery: %v", failed)
	}
	if got := s.outcomes(t)["m1"]; !slices.Equal(got, []string{"created"}) {
		t.Fatalf("outcomes %v, want created", got)
	}
	rec, err := s.store.Get(t.Context(), key(t, "acme", id))
	if err != nil || rec.Status != idem.StatusSucceeded || rec.Response.Status != http.StatusCreated {
		t.Fatalf("record %+v, %v: want SUCCEEDED with a 201", rec, err)
	}
	var created struct{ ID string }
	if err := json.Unmarshal(rec.Response.Body, &created); err != nil {
		t.Fatal(err)
	}

	got, _ := s.api.Handle(t.Context(), testkit.GetCharge("acme", created.ID))
	if got.StatusCode != http.StatusOK || got.Body != string(rec.Response.Body) {
		t.Errorf("GET: %d %s, want 200 %s", got.StatusCode, got.Body, rec.Response.Body)
	}
	// Re-serialized, 1500.0 for 1500: the same request to the API.
	same := `{ "source":"tok_visa", "description":"December", "currency":"EUR", "amount":1500.0 }`
	replay, _ := s.api.Handle(t.Context(), testkit.PostCharge("acme", id, same))
	if replay.StatusCode != http.StatusCreated || replay.Headers[httpapi.HeaderReplayed] != "true" || replay.Body != string(rec.Response.Body) {
		t.Errorf("HTTP retry: %d %v %s, want the message's 201 replayed", replay.StatusCode, replay.Headers, replay.Body)
	}
	if calls, charges := s.ledger(t, key(t, "acme", id)); calls != 1 || charges != 1 {
		t.Errorf("provider: %d calls, %d charges; want 1 and 1", calls, charges)
	}
}

// A message duplicated inside one batch, and delivered again in a later
// batch, charges once; every copy is settled.
func TestDuplicateDeliveriesChargeOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const id = "renewal-2026-12-acme-43"
	body := message(t, "acme", id, renewal)
	if failed := s.handle(t, record("m1", body), record("m1-copy", body), record("other", message(t, "acme", "renewal-2026-12-acme-44", renewal))); len(failed) != 0 {
		t.Fatalf("first batch: reported for redelivery: %v", failed)
	}
	if failed := s.handle(t, record("m1", body)); len(failed) != 0 {
		t.Fatalf("redelivery: reported for redelivery: %v", failed)
	}
	got := s.outcomes(t)
	// The copies of one batch run one after the other, in batch order.
	if !slices.Equal(got["m1"], []string{"created", "replayed"}) || !slices.Equal(got["m1-copy"], []string{"replayed"}) || !slices.Equal(got["other"], []string{"created"}) {
		t.Errorf("outcomes %v; want m1 created then replayed, m1-copy replayed, other created", got)
	}
	if calls, charges := s.ledger(t, key(t, "acme", id)); calls != 1 || charges != 1 {
		t.Errorf("provider: %d calls, %d charges for the duplicated message; want 1 and 1", calls, charges)
	}
	if n := s.d.Sim.Ledger().TotalCharges; n != 2 {
		t.Errorf("%d charges in all, want 2", n)
	}
	// An HTTP retry of the command replays the same 201.
	rec, err := s.store.Get(t.Context(), key(t, "acme", id))
	if err != nil {
		t.Fatal(err)
	}
	replay, _ := s.api.Handle(t.Context(), testkit.PostCharge("acme", id, renewal))
	if replay.StatusCode != http.StatusCreated || replay.Headers[httpapi.HeaderReplayed] != "true" || replay.Body != string(rec.Response.Body) {
		t.Errorf("HTTP retry: %d %v %s, want the stored 201 replayed", replay.StatusCode, replay.Headers, replay.Body)
	}
}

// The same command id with another body is settled as a mismatch and
// charges nothing; the first charge's answer stays.
func TestReusedCommandIDIsSettledAsMismatch(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const id = "renewal-2026-12-acme-45"
	if failed := s.handle(t, record("m1", message(t, "acme", id, renewal))); len(failed) != 0 {
		t.Fatalf("reported for redelivery: %v", failed)
	}
	other := `{"amount":2500,"currency":"EUR","source":"tok_visa","description":"December"}`
	if failed := s.handle(t, record("m2", message(t, "acme", id, other))); len(failed) != 0 {
		t.Fatalf("mismatch reported for redelivery: %v", failed)
	}
	if got := s.outcomes(t)["m2"]; !slices.Equal(got, []string{"mismatch"}) {
		t.Errorf("outcomes of m2 %v, want mismatch", got)
	}
	if calls, charges := s.ledger(t, key(t, "acme", id)); calls != 1 || charges != 1 || s.d.Sim.Ledger().TotalCalls != 1 {
		t.Errorf("provider: %d calls, %d charges (%d calls in all); want the first message's only", calls, charges, s.d.Sim.Ledger().TotalCalls)
	}
	// Over HTTP, the other body is refused the same way.
	resp, _ := s.api.Handle(t.Context(), testkit.PostCharge("acme", id, other))
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("HTTP with the other body: %d, want 422", resp.StatusCode)
	}
}

// Malformed messages go to the dead-letter queue with a log line that
// quotes neither the key nor the card source; the rest of the batch is
// processed, and nothing is reported for redelivery.
func TestMalformedMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	malformed := map[string]string{
		"not-json":        `{"tenant":"acme","command_id":"order-secret-1",`,
		"no-tenant":       `{"command_id":"order-secret-2","request":` + renewal + `}`,
		"no-id":           `{"tenant":"acme","request":` + renewal + `}`,
		"bad-request":     message(t, "acme", "order-secret-3", `{"amount":1500.5,"currency":"EUR","source":"tok_secret_card"}`),
		"duplicate-field": `{"tenant":"acme","tenant":"globex","command_id":"order-secret-4","request":` + renewal + `}`,
	}
	records := []events.SQSMessage{record("good", message(t, "acme", "renewal-2026-12-acme-46", renewal))}
	for _, id := range slices.Sorted(maps.Keys(malformed)) {
		records = append(records, record(id, malformed[id]))
	}
	if failed := s.handle(t, records...); len(failed) != 0 {
		t.Fatalf("reported for redelivery: %v", failed)
	}
	if got := s.outcomes(t)["good"]; !slices.Equal(got, []string{"created"}) {
		t.Errorf("the good message: %v, want created", got)
	}

	out := s.logs.String()
	for _, secret := range []string{"order-secret", "tok_secret_card"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q reached the logs:\n%s", secret, out)
		}
	}
	logged := map[string]map[string]any{}
	for _, r := range s.logs.Records(t) {
		if r["msg"] == "intake: malformed message sent to the dead-letter queue" {
			logged[r["message_id"].(string)] = r
		}
	}
	if len(logged) != len(malformed) {
		t.Errorf("%d malformed messages logged, want %d:\n%s", len(logged), len(malformed), out)
	}
	if r := logged["bad-request"]; r["field"] != "request" || r["key_hash"] != key(t, "acme", "order-secret-3").LogHash() || r["level"] != "ERROR" {
		t.Errorf("log of the invalid request: %v", r)
	}
	if r := logged["no-tenant"]; r["field"] != "tenant" || r["reason"] != "missing" {
		t.Errorf("log of the message without a tenant: %v", r)
	}

	letters := receiveAll(t, s.d.ChargeRequests.DLQURL, len(malformed))
	got := map[string]string{}
	for _, m := range letters {
		src := aws.ToString(m.MessageAttributes[intake.AttrSourceMessageID].StringValue)
		got[src] = aws.ToString(m.Body)
		if aws.ToString(m.MessageAttributes[intake.AttrError].StringValue) == "" {
			t.Errorf("dead letter of %s without %s", src, intake.AttrError)
		}
	}
	for id, body := range malformed {
		if got[id] != body {
			t.Errorf("dead letter of %s: %q, want the message unchanged %q", id, got[id], body)
		}
	}
}

// A provider that is unavailable charged nothing: the message is reported
// for another delivery, which charges once the provider is back.
func TestUnavailableProviderIsRetried(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const id = "renewal-2026-12-acme-47"
	req := `{"amount":1500,"currency":"EUR","source":"tok_unavailable_once"}`
	body := message(t, "acme", id, req)
	if failed := s.handle(t, record("m1", body), record("ok", message(t, "acme", "renewal-2026-12-acme-48", renewal))); !slices.Equal(failed, []string{"m1"}) {
		t.Fatalf("reported for redelivery: %v, want [m1]", failed)
	}
	if failed := s.handle(t, record("m1", body)); len(failed) != 0 {
		t.Fatalf("second delivery reported for redelivery: %v", failed)
	}
	if got := s.outcomes(t)["m1"]; !slices.Equal(got, []string{"unavailable", "created"}) {
		t.Errorf("outcomes %v, want unavailable then created", got)
	}
	if calls, charges := s.ledger(t, key(t, "acme", id)); calls != 2 || charges != 1 {
		t.Errorf("provider: %d calls, %d charges; want 2 and 1", calls, charges)
	}
}

// TestMissingKeyIsRetriedWithNothingClaimed: a message whose provider key
// cannot be read (its secret missing) is reported for another delivery
// with nothing claimed or sent; once the secret exists, it charges once.
func TestMissingKeyIsRetriedWithNothingClaimed(t *testing.T) {
	t.Parallel()
	const simKey = "sk_test_providersim"
	name := testkit.UniqueName("chargeonce/provider-api-key")
	d := testkit.Deploy(t, providersim.WithSecret(simKey))
	clock := testkit.NewClock(time.Now())
	h := d.IntakeHandler(t, func(w *testkit.Wiring) { w.Intake.ProviderSecretName, w.Deps.Clock = name, clock.Now })
	s := &stack{d: d, intake: h}
	const id = "renewal-2026-12-acme-49"
	body := message(t, "acme", id, renewal)
	if failed := s.handle(t, record("m1", body)); !slices.Equal(failed, []string{"m1"}) {
		t.Fatalf("reported for redelivery: %v, want [m1]", failed)
	}
	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(t.Context(), key(t, "acme", id)); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after the key could not be read: %v, want none", err)
	}
	if l := d.Sim.Ledger(); l.TotalCalls != 0 {
		t.Fatalf("the provider got %d calls, want none", l.TotalCalls)
	}
	testkit.CreateSecret(t, name, simKey)
	clock.Advance(30 * time.Second) // the failed read is remembered until then
	if failed := s.handle(t, record("m1", body)); len(failed) != 0 {
		t.Fatalf("delivery with the key reported for redelivery: %v", failed)
	}
	s.store = store
	if calls, charges := s.ledger(t, key(t, "acme", id)); calls != 1 || charges != 1 {
		t.Errorf("provider: %d calls, %d charges; want 1 and 1", calls, charges)
	}
}

func TestNewHandlerRefusesMissingDependencies(t *testing.T) {
	t.Parallel()
	if _, err := intake.NewHandler(nil, nil); err == nil {
		t.Fatal("NewHandler(nil, nil) succeeded")
	}
}

// receiveAll receives n messages from the queue at url, with their
// attributes.
func receiveAll(t *testing.T, url string, n int) []sqstypes.Message {
	t.Helper()
	client := testkit.Clients(t).SQS
	var out []sqstypes.Message
	for range 10 {
		res, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Messages...)
		if len(out) >= n {
			return out
		}
	}
	t.Fatalf("%d messages on %s, want %d", len(out), url, n)
	return nil
}
