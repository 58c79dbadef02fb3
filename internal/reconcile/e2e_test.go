package reconcile_test

// End-to-end tests: the charge handler, the sweeper and the reconcile
// handler as the functions assemble them (internal/app), on the
// emulator's DynamoDB and SQS, against the provider simulator. A settable
// clock expires leases; SQS redelivery is driven with ReceiveMessage and
// ChangeMessageVisibility, as the Lambda poller would see it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

const tenant = "acme"

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stack is one deployment: its own tables, queues and provider.
type stack struct {
	clock   *testkit.Clock
	clients awsenv.Clients
	calls   *testkit.CallCounter
	sim     *providersim.Simulator
	queues  queue.Queues
	store   *dynamostore.Store // the test's own view of the idempotency table
	logs    *testkit.LogBuffer
	deps    app.Deps
	recCfg  app.ReconcileConfig
	charges string

	charge  *httpapi.Handler
	sweeper *sweeper.Sweeper
	rec     *reconcile.Handler
}

type stackConfig struct {
	sim            []func(*providersim.Options)
	chargeProvider []func(*provider.Options)
	// tracer traces every function of the stack; chargeSQS adjusts the
	// charge function's SQS client.
	tracer    *tracing.Tracer
	chargeSQS []func(*sqs.Options)
}

func newStack(t *testing.T, opts ...func(*stackConfig)) *stack {
	t.Helper()
	var cfg stackConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := &stack{clock: testkit.NewClock(time.Now()), calls: &testkit.CallCounter{}, logs: &testkit.LogBuffer{}}
	s.clients = testkit.Clients(t, s.calls.Option())
	d := testkit.Deploy(t, cfg.sim...)
	s.charges, s.queues, s.sim = d.ChargesTable, d.Queues, d.Sim
	var err error
	s.store, err = dynamostore.New(s.clients.DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = s.clock.Now })
	if err != nil {
		t.Fatal(err)
	}

	s.deps = app.Deps{Clients: s.clients, Clock: s.clock.Now, Logger: slog.New(slog.NewJSONHandler(s.logs, nil)), Tracer: cfg.tracer}
	s.charge = d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Deps = s.deps
		w.Deps.Clients.SQS = sqs.New(s.clients.SQS.Options(), cfg.chargeSQS...)
		w.Deps.ProviderOptions = cfg.chargeProvider
		w.Charge.InflightWait = 0 // a retry while in flight answers 409 at once
	})
	s.sweeper, err = app.SweeperHandler(d.Sweeper(), s.deps)
	if err != nil {
		t.Fatal(err)
	}
	s.recCfg = d.Reconcile()
	s.rec = s.reconciler(t)
	return s
}

// reconcilerOn builds another reconcile function instance whose DynamoDB
// client is adjusted by opt.
func (s *stack) reconcilerOn(t *testing.T, opt func(*dynamodb.Options)) *reconcile.Handler {
	t.Helper()
	d := s.deps
	d.Clients = testkit.Clients(t, s.calls.Option(), opt)
	h, err := app.ReconcileHandler(s.recCfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// reconciler builds another reconcile function instance, its provider
// client adjusted by opts.
func (s *stack) reconciler(t *testing.T, opts ...func(*provider.Options)) *reconcile.Handler {
	t.Helper()
	d := s.deps
	d.ProviderOptions = opts
	h, err := app.ReconcileHandler(s.recCfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func body(source string) string {
	return fmt.Sprintf(`{"amount":1500,"currency":"EUR","source":%q}`, source)
}

func newKey(t *testing.T) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, charge.ChargeOperation, testkit.UniqueName("order"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// post is the client's POST /charges through API Gateway.
func (s *stack) post(t *testing.T, key idem.Key, source string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := s.charge.Handle(context.Background(), createRequest(key, source))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func createRequest(key idem.Key, source string) events.APIGatewayV2HTTPRequest {
	return testkit.PostCharge(key.Tenant(), key.ClientKey(), body(source))
}

func (s *stack) get(t *testing.T, id string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := s.charge.Handle(context.Background(), testkit.GetCharge(tenant, id))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// ambiguous posts a charge whose provider call charges the card and then
// drops the connection: the first attempt cannot tell what happened and
// leaves the record IN_FLIGHT.
func (s *stack) ambiguous(t *testing.T) idem.Key {
	t.Helper()
	k := newKey(t)
	resp := s.post(t, k, providersim.SourceTimeoutOnce)
	wantProblem(t, resp, http.StatusServiceUnavailable, "outcome-pending")
	if e := s.sim.Ledger().References[s.ref(t, k)]; e.Charges != 1 {
		t.Fatalf("provider ledger for the key: %+v, want charged", e)
	}
	return k
}

func wantProblem(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int, slug string) {
	t.Helper()
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(resp.Body), &p)
	if resp.StatusCode != status || p.Type != httpapi.ProblemBase+slug {
		t.Fatalf("response %d %s, want %d %s", resp.StatusCode, resp.Body, status, slug)
	}
}

// lost advances the clock past an ambiguous request's lease and past the
// mark of the message it queued, whose delay runs in real time here: as
// though that message were lost, the next sweep queues the key.
func (s *stack) lost() { s.clock.Advance(queue.MarkHold + time.Minute) }

func (s *stack) sweep(t *testing.T) sweeper.Summary {
	t.Helper()
	sum, err := s.sweeper.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// receive polls url until n messages arrived, within a bounded time.
func (s *stack) receive(t *testing.T, url string, n int) []sqstypes.Message {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got []sqstypes.Message
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d messages from %s, want %d", len(got), url, n)
		}
		out, err := s.clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(min(n-len(got), 10)), WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Messages...)
	}
	return got
}

// deliver is one invocation of the reconcile function by the event source
// mapping: n messages received, handled, and the settled ones deleted.
func (s *stack) deliver(t *testing.T, h *reconcile.Handler, n int) ([]sqstypes.Message, events.SQSEventResponse) {
	t.Helper()
	msgs := s.receive(t, s.queues.URL, n)
	resp, err := h.Handle(context.Background(), testkit.SQSEvent(msgs...))
	if err != nil {
		t.Fatal(err)
	}
	failed := failedIDs(resp)
	for _, m := range msgs {
		if slices.Contains(failed, aws.ToString(m.MessageId)) {
			continue
		}
		if _, err := s.clients.SQS.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{
			QueueUrl: aws.String(s.queues.URL), ReceiptHandle: m.ReceiptHandle,
		}); err != nil {
			t.Fatal(err)
		}
	}
	return msgs, resp
}

// outcomes lists the reconcile handler's logged outcomes for key.
func (s *stack) outcomes(t *testing.T, key idem.Key) []string {
	t.Helper()
	var out []string
	for _, r := range s.logs.Records(t) {
		if r["msg"] == "reconcile" && r["key_hash"] == key.LogHash() {
			out = append(out, r["outcome"].(string))
		}
	}
	return out
}

// ref and chargeID are the provider reference and charge id of key's
// command, derived from its record's creation.
func (s *stack) ref(t *testing.T, key idem.Key) string {
	t.Helper()
	return charge.ProviderReference(key, s.record(t, key).CreatedAt)
}

func (s *stack) chargeID(t *testing.T, key idem.Key) string {
	t.Helper()
	return charge.ChargeID(key, s.record(t, key).CreatedAt)
}

func (s *stack) record(t *testing.T, key idem.Key) *idem.Record {
	t.Helper()
	rec, err := s.store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (s *stack) status(t *testing.T, key idem.Key) idem.Status {
	t.Helper()
	rec, err := s.store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

// wantOneCharge checks the provider charged key's reference exactly once and
// nothing else was charged.
func (s *stack) wantOneCharge(t *testing.T, key idem.Key) {
	t.Helper()
	l := s.sim.Ledger()
	if e := l.References[s.ref(t, key)]; e.Charges != 1 || l.TotalCharges != 1 {
		t.Fatalf("provider ledger %+v, want exactly one charge, for the key", l)
	}
}

// wantReplayOfCharge checks that a retry (the same request again, with
// source) gets the 201 the first attempt would have answered, marked as
// replayed, and that the charge row exists.
func (s *stack) wantReplayOfCharge(t *testing.T, key idem.Key, source string) {
	t.Helper()
	rec, err := s.store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	id := charge.ChargeID(key, rec.CreatedAt)
	want, _ := json.Marshal(struct {
		ID                string `json:"id"`
		Amount            int64  `json:"amount"`
		Currency          string `json:"currency"`
		Status            string `json:"status"`
		ProviderReference string `json:"provider_reference"`
		CreatedAt         string `json:"created_at"`
		AmountRefunded    int64  `json:"amount_refunded"`
	}{id, 1500, "EUR", "succeeded", charge.ProviderReference(key, rec.CreatedAt), rec.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"), 0})

	resp := s.post(t, key, source)
	if resp.StatusCode != http.StatusCreated || resp.Body != string(want) ||
		resp.Headers[httpapi.HeaderReplayed] != "true" || resp.Headers["Location"] != "/charges/"+id ||
		resp.Headers["Content-Type"] != httpapi.ContentTypeJSON {
		t.Fatalf("retry answered %d %v %s\nwant 201 replayed %s", resp.StatusCode, resp.Headers, resp.Body, want)
	}
	if got := s.get(t, id); got.StatusCode != http.StatusOK || got.Body != string(want) {
		t.Fatalf("GET /charges/%s: %d %s, want the charge", id, got.StatusCode, got.Body)
	}
}

// A normal first response, to compare the replay's shape with.
func (s *stack) firstResponseFields(t *testing.T) []string {
	t.Helper()
	resp := s.post(t, newKey(t), providersim.SourceVisa)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first charge: %d %s", resp.StatusCode, resp.Body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

func TestCrashAfterChargeIsResolvedFromTheProvider(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	fields := s.firstResponseFields(t)
	k := s.ambiguous(t)
	if got := s.status(t, k); got != idem.StatusInFlight {
		t.Fatalf("record %s after the crash, want IN_FLIGHT", got)
	}

	// Before the lease runs out the sweeper leaves the record alone, and
	// so it does while the request's own message is in flight.
	if sum := s.sweep(t); sum.Found != 0 {
		t.Fatalf("sweep inside the lease: %+v, want nothing found", sum)
	}
	s.clock.Advance(time.Minute)
	if sum := s.sweep(t); sum.Found != 1 || sum.Queued != 0 || sum.AlreadyQueued != 1 {
		t.Fatalf("sweep: %+v, want the key found queued already", sum)
	}
	s.lost()
	if sum := s.sweep(t); sum.Found != 1 || sum.Queued != 1 {
		t.Fatalf("sweep: %+v, want the key queued", sum)
	}
	msgs, resp := s.deliver(t, s.rec, 1)
	if got, _ := queue.ParseMessage(aws.ToString(msgs[0].Body)); got.Key != k {
		t.Fatal("the queued message names another key")
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.outcomes(t, k); !slices.Equal(got, []string{string(charge.OutcomeResolvedCharged)}) {
		t.Fatalf("outcomes %v, want resolved_charged", got)
	}
	if got := s.status(t, k); got != idem.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", got)
	}
	s.wantReplayOfCharge(t, k, providersim.SourceTimeoutOnce)
	var replay map[string]any
	_ = json.Unmarshal([]byte(s.post(t, k, providersim.SourceTimeoutOnce).Body), &replay)
	if got := slices.Sorted(maps.Keys(replay)); !slices.Equal(got, fields) {
		t.Fatalf("replay fields %v, a first response has %v", got, fields)
	}
	if e := s.sim.Ledger().References[s.ref(t, k)]; e.Charges != 1 || e.Calls != 1 {
		t.Fatalf("provider ledger for the key %+v, want one call, one charge", e)
	}
}

func TestCrashBeforeProviderCallIsReleased(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	k := newKey(t)
	// The first attempt claims the key and dies before calling the provider.
	s.claimDies(t, k)
	wantProblem(t, s.post(t, k, providersim.SourceVisa), http.StatusConflict, "request-in-progress")

	// The provider has no trace of it, but its settle window has not
	// passed: the key is postponed to the end of the window, not released.
	s.clock.Advance(time.Minute)
	s.sweep(t)
	if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.status(t, k); got != idem.StatusInFlight {
		t.Fatalf("record %s inside the settle window, want IN_FLIGHT", got)
	}
	if sum := s.sweep(t); sum.Found != 0 {
		t.Fatalf("sweep before the settle window passed: %+v, want nothing", sum)
	}
	s.clock.Advance(provider.DefaultSettleWindow)
	if sum := s.sweep(t); sum.Queued != 1 {
		t.Fatalf("sweep after the settle window: %+v, want the key queued", sum)
	}
	if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.outcomes(t, k); !slices.Equal(got, []string{string(charge.OutcomeNotSettled), string(charge.OutcomeReleased)}) {
		t.Fatalf("outcomes %v, want not_settled, then released", got)
	}
	if got := s.status(t, k); got != idem.StatusReleased {
		t.Fatalf("record %s after release, want RELEASED", got)
	}

	resp := s.post(t, k, providersim.SourceVisa)
	if resp.StatusCode != http.StatusCreated || resp.Headers[httpapi.HeaderReplayed] != "" {
		t.Fatalf("retry: %d %v %s, want a fresh 201", resp.StatusCode, resp.Headers, resp.Body)
	}
	s.wantOneCharge(t, k)
}

func TestProviderSlowerThanTheLease(t *testing.T) {
	t.Parallel()
	// The provider records the charge, then takes its time; the first
	// attempt's answer is held until the reconciler has finished.
	release := make(chan struct{})
	hold := provider.WithHTTPClient(&http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if r.Method == http.MethodPost {
			<-release
		}
		return resp, err
	})})
	s := newStack(t, func(c *stackConfig) {
		c.sim = []func(*providersim.Options){providersim.WithSlowDelay(50 * time.Millisecond)}
		c.chargeProvider = []func(*provider.Options){hold}
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the provider server closes
	k := newKey(t)
	first := make(chan events.APIGatewayV2HTTPResponse, 1)
	go func() {
		resp, _ := s.charge.Handle(context.Background(), createRequest(k, providersim.SourceSlow))
		first <- resp
	}()

	deadline := time.Now().Add(10 * time.Second)
	for s.sim.Ledger().TotalCharges == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the provider never recorded the first attempt's charge")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.clock.Advance(time.Minute) // the first attempt's lease runs out
	s.sweep(t)
	if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.outcomes(t, k); !slices.Equal(got, []string{string(charge.OutcomeResolvedCharged)}) {
		t.Fatalf("outcomes %v, want resolved_charged", got)
	}

	once.Do(func() { close(release) })
	// The first attempt's late Commit is refused: it answers "pending".
	wantProblem(t, <-first, http.StatusServiceUnavailable, "outcome-pending")
	// Its transaction fails on both its conditions, the lease fence and the
	// charge row the reconciler wrote; the lost lease is what it reports.
	refused := false
	for _, r := range s.logs.Records(t) {
		refused = refused || r["key_hash"] == k.LogHash() && r["cause"] == "lease_lost"
	}
	if !refused {
		t.Fatalf("the first attempt did not log its refused commit:\n%s", s.logs.String())
	}
	// It would queue the key again; settled, the key needs no message.
	if n := s.waiting(t); n != 0 {
		t.Fatalf("%d messages queued for a settled key, want none", n)
	}

	s.wantOneCharge(t, k)
	if got := s.status(t, k); got != idem.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", got)
	}
	// The charge row holds the provider's own charge id.
	looked, err := provider.NewClient(s.recCfg.ProviderURL, "").Lookup(context.Background(), s.ref(t, k))
	if err != nil {
		t.Fatal(err)
	}
	row, err := s.clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.charges),
		Key: map[string]ddbtypes.AttributeValue{
			charge.AttrTenant: &ddbtypes.AttributeValueMemberS{Value: tenant},
			charge.AttrID:     &ddbtypes.AttributeValueMemberS{Value: s.chargeID(t, k)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := row.Item["provider_charge_id"].(*ddbtypes.AttributeValueMemberS); v == nil || v.Value != looked.ChargeID {
		t.Fatalf("charge row %v, want provider charge id %s", row.Item, looked.ChargeID)
	}
	s.wantReplayOfCharge(t, k, providersim.SourceSlow)
}

// TestProviderDownIsPostponedNotDeadLettered: while the provider cannot be
// asked, a key is postponed by a backoff that doubles per attempt; each
// message is settled, so nothing cycles into the dead-letter queue, and
// the attempts show in the sweeper's summary.
func TestProviderDownIsPostponedNotDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	k := s.ambiguous(t)
	s.lost()
	s.sim.SetDown(true)
	for attempt, backoff := range []time.Duration{charge.DefaultRetryBase, 2 * charge.DefaultRetryBase, 4 * charge.DefaultRetryBase} {
		if sum := s.sweep(t); sum.Queued != 1 || sum.MaxAttempts != attempt {
			t.Fatalf("sweep %d: %+v, want the key queued after %d attempts", attempt+1, sum, attempt)
		}
		if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("attempt %d: failures %v, want the message settled", attempt+1, resp.BatchItemFailures)
		}
		if got := s.outcomes(t, k); got[len(got)-1] != string(charge.OutcomeDeferred) {
			t.Fatalf("attempt %d: outcomes %v, want deferred last", attempt+1, got)
		}
		s.clock.Advance(backoff - time.Second)
		if sum := s.sweep(t); sum.Found != 0 {
			t.Fatalf("attempt %d: sweep inside the backoff found %+v", attempt+1, sum)
		}
		s.clock.Advance(2 * time.Second)
	}
	out, err := s.clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.queues.DLQURL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("dead-letter queue: %d messages, %v; want none", len(out.Messages), err)
	}

	// Once the provider is back, the next sweep resolves it.
	s.sim.SetDown(false)
	if sum := s.sweep(t); sum.Queued != 1 {
		t.Fatalf("sweep after the outage: %+v", sum)
	}
	if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.outcomes(t, k); got[len(got)-1] != string(charge.OutcomeResolvedCharged) {
		t.Fatalf("outcomes %v, want resolved_charged last", got)
	}
	s.wantOneCharge(t, k)
	s.wantReplayOfCharge(t, k, providersim.SourceTimeoutOnce)
}

// TestAStuckKeyIsQueuedOnceWhileItsMessageIsInFlight: sweeps that find a
// key stuck while its message waits for the reconciler send no other.
// Once that message is handled, a sweep may queue the key again.
func TestAStuckKeyIsQueuedOnceWhileItsMessageIsInFlight(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	k := newKey(t)
	// The first attempt claims the key and dies: it sends no message.
	s.claimDies(t, k)
	s.clock.Advance(time.Minute)
	for range 3 { // the reconciler lags behind three sweeps
		s.sweep(t)
	}
	if n := s.waiting(t); n != 1 {
		t.Fatalf("%d messages queued for one stuck key, want 1", n)
	}
	s.sim.SetDown(true)
	if _, resp := s.deliver(t, s.rec, 1); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	if got := s.outcomes(t, k); !slices.Equal(got, []string{string(charge.OutcomeDeferred)}) {
		t.Fatalf("outcomes %v, want deferred", got)
	}
	s.clock.Advance(charge.DefaultRetryBase + time.Second)
	s.sweep(t)
	if n := s.waiting(t); n != 1 {
		t.Fatalf("after its message was handled and its backoff ended: %d messages for the key, want 1", n)
	}
}

// claimDies claims k for a charge, as an attempt that then dies, before
// it calls the provider.
func (s *stack) claimDies(t *testing.T, k idem.Key) {
	t.Helper()
	canonical, err := idem.CanonicalJSON([]byte(body(providersim.SourceVisa)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Begin(t.Context(), k, idem.FingerprintOf(canonical), []byte(`{"amount":1500,"currency":"EUR"}`)); err != nil {
		t.Fatal(err)
	}
}

// waiting counts the reconcile queue's messages: waiting, in flight and
// delayed.
func (s *stack) waiting(t *testing.T) int {
	t.Helper()
	names := []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}
	out, err := s.clients.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(s.queues.URL), AttributeNames: names})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			t.Fatal(err)
		}
		n += v
	}
	return n
}

func TestDuplicateDeliveriesResolveOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	k := s.ambiguous(t)
	s.lost()
	s.sweep(t)
	msg := s.receive(t, s.queues.URL, 1)[0]

	s.calls.Snapshot()
	for _, m := range []sqstypes.Message{msg, msg} { // SQS delivers a message at least once

		resp, err := s.rec.Handle(context.Background(), testkit.SQSEvent(m))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle: %v, %v", resp, err)
		}
	}
	if got := s.calls.Snapshot()["TransactWriteItems"]; got != 1 {
		t.Fatalf("%d commits, want 1", got)
	}
	if got := s.outcomes(t, k); !slices.Equal(got, []string{string(charge.OutcomeResolvedCharged), string(charge.OutcomeNothingToDo)}) {
		t.Fatalf("outcomes %v, want one resolution, then nothing to do", got)
	}
	s.wantOneCharge(t, k)
}

func TestRacingReconcilersResolveOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	k := s.ambiguous(t)
	s.lost()
	s.sweep(t)
	msg := s.receive(t, s.queues.URL, 1)[0]

	const n = 8
	handlers := make([]*reconcile.Handler, n) // n function instances
	for i := range handlers {
		handlers[i] = s.reconciler(t)
	}
	s.calls.Snapshot()
	start := make(chan struct{})
	var wg sync.WaitGroup
	failures := make([][]string, n)
	for i, h := range handlers {
		wg.Go(func() {
			<-start
			resp, _ := h.Handle(context.Background(), testkit.SQSEvent(msg)) // the same message, delivered n times
			failures[i] = failedIDs(resp)
		})
	}
	close(start)
	wg.Wait()

	for i, f := range failures {
		if len(f) != 0 {
			t.Errorf("reconciler %d reported %v", i, f)
		}
	}
	if got := s.calls.Snapshot()["TransactWriteItems"]; got != 1 {
		t.Fatalf("%d commits, want 1", got)
	}
	count := map[string]int{}
	for _, o := range s.outcomes(t, k) {
		count[o]++
	}
	if count[string(charge.OutcomeResolvedCharged)] != 1 ||
		count[string(charge.OutcomeStillLeased)]+count[string(charge.OutcomeNothingToDo)] != n-1 {
		t.Fatalf("outcomes %v, want one resolution and %d no-ops", count, n-1)
	}
	s.wantOneCharge(t, k)
	if got := s.status(t, k); got != idem.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", got)
	}
}

func TestBatchReportsOnlyTheFailingMessage(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	keys := []idem.Key{s.ambiguous(t), s.ambiguous(t), s.ambiguous(t)}
	bad := keys[1]
	s.lost()
	if sum := s.sweep(t); sum.Queued != 3 {
		t.Fatalf("sweep: %+v", sum)
	}
	if _, err := s.clients.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(s.queues.URL), MessageBody: aws.String("not a reconcile message"),
	}); err != nil {
		t.Fatal(err)
	}
	// DynamoDB cannot be written for the bad key only: its take-over
	// fails, and only its message is worth delivering again. (A provider
	// that cannot be reached is no such failure: the key is postponed.)
	h := s.reconcilerOn(t, func(o *dynamodb.Options) {
		o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
		o.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") && bytes.Contains(b, []byte(bad.ClientKey())) {
				return nil, errors.New("test: connection reset")
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
	})

	msgs, resp := s.deliver(t, h, 4)
	var want []string
	for _, m := range msgs {
		if got, err := queue.ParseMessage(aws.ToString(m.Body)); err == nil && got.Key == bad {
			want = append(want, aws.ToString(m.MessageId))
		}
	}
	if got := failedIDs(resp); len(want) != 1 || !slices.Equal(got, want) {
		t.Fatalf("failures %v, want only the bad key's message %v", got, want)
	}
	for _, k := range keys {
		want := idem.StatusSucceeded
		if k == bad {
			want = idem.StatusInFlight
		}
		if got := s.status(t, k); got != want {
			t.Errorf("record %s, want %s", got, want)
		}
	}
	if !strings.Contains(s.logs.String(), "malformed message dropped") {
		t.Fatal("the malformed message was not logged")
	}
}
