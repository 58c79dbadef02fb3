package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// adminStack is a deployment with its charge API served, and chargectl
// admin configured for it as it would be from the environment.
type adminStack struct {
	*testkit.Deployment
	url     string
	clients awsenv.Clients
	env     map[string]string
	trail   *testkit.Trail
	// clock is the operator's clock; time.Now if nil.
	clock func() time.Time
}

// operatorARN is who runs chargectl admin in these tests, as STS would
// name them.
const operatorARN = "arn:aws:iam::123456789012:user/ops-alice"

// whoever is the tests' caller of adminEnv: operatorARN.
func whoever(context.Context) (string, error) { return operatorARN, nil }

func newAdminStack(t *testing.T) *adminStack {
	t.Helper()
	d := testkit.Deploy(t)
	url, stop, err := d.Serve(d.Charge(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	trail := d.Audit(t)
	return &adminStack{Deployment: d, url: url, clients: testkit.Clients(t), trail: trail, env: map[string]string{
		app.EnvIdempotencyTable:       d.IdempotencyTable,
		app.EnvChargesTable:           d.ChargesTable,
		app.EnvReconcileQueueURL:      d.Queues.URL,
		app.EnvReconcileDLQURL:        d.Queues.DLQURL,
		app.EnvChargeRequestsQueueURL: d.ChargeRequests.URL,
		app.EnvLimitsTable:            d.LimitsTable,
		app.EnvAuditBucket:            trail.Config.AuditBucket,
		app.EnvAuditIndexTable:        trail.Config.AuditIndexTable,
	}}
}

// admin runs chargectl admin and returns its exit status and output; the
// output is logged, so that `go test -v` shows what an operator sees.
func (s *adminStack) admin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return s.adminTyping(t, strings.NewReader(""), args...)
}

// adminTyping runs chargectl admin with typed as what the operator types.
func (s *adminStack) adminTyping(t *testing.T, typed io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	clock := time.Now
	if s.clock != nil {
		clock = s.clock
	}
	env := adminEnv{
		getenv:  func(name string) string { return s.env[name] },
		clients: func(context.Context) (awsenv.Clients, error) { return s.clients, nil },
		s3:      func(context.Context) (*s3.Client, error) { return testkit.S3(t), nil },
		caller:  whoever,
		clock:   clock,
		stdin:   typed,
	}
	code := runAdmin(context.Background(), args, env, &stdout, &stderr)
	t.Logf("$ chargectl admin %s\n%s%s(exit %d)", strings.Join(args, " "), stdout.String(), stderr.String(), code)
	return code, stdout.String(), stderr.String()
}

func (s *adminStack) create(t *testing.T, id, source string) {
	t.Helper()
	if code, _ := runCLI(t, s.url, &testkit.LogBuffer{}, "create", "--amount", "1500", "--source", source, "--id", id); code != exitOK && code != exitFailed {
		t.Fatalf("create %s: exit %d", id, code)
	}
}

func (s *adminStack) key(t *testing.T, clientKey string) idem.Key {
	t.Helper()
	k, err := idem.NewKey("acme", charge.ChargeOperation, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// stuck leaves a key in flight after attempts take-overs that died, its
// last lease (30 s) having run out ago.
func (s *adminStack) stuck(t *testing.T, clientKey string, ago time.Duration, attempts int) {
	t.Helper()
	ctx := context.Background()
	const lease = 30 * time.Second
	clock := testkit.NewClock(time.Now().Add(-ago - lease - time.Duration(attempts)*time.Minute))
	st, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable, func(o *dynamostore.Options) {
		o.Clock = clock.Now
		o.DefaultLease = lease
		o.LeaseMargin = time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	k := s.key(t, clientKey)
	if _, err := st.Begin(ctx, k, idem.FingerprintOf([]byte(`{}`)), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for range attempts {
		clock.Advance(time.Minute)
		if _, err := st.TakeOver(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdminRecord(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	s.create(t, "order-1001", "tok_visa")
	s.create(t, "order-1003", providersim.SourceDecline)

	code, out, _ := s.admin(t, "record", "acme", "order-1001")
	for _, want := range []string{`acme / order-1001`, `status: +SUCCEEDED`, `stored answer: +201`, `"status":"succeeded"`, `lease owner: +[0-9A-Za-z_-]{8}\n`, `record expires: .*\(in 24h`} {
		if code != exitOK || !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("record: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}

	code, out, _ = s.admin(t, "record", "--json", "acme", "order-1003")
	var rec recordOutput
	if err := json.Unmarshal([]byte(out), &rec); code != exitOK || err != nil {
		t.Fatalf("record --json: exit %d, %v: %s", code, err, out)
	}
	if rec.Status != idem.StatusFailedPermanent || rec.Answer == nil || rec.Answer.Status != 402 ||
		!strings.Contains(rec.Answer.Body, "card-declined") || len(rec.Fingerprint) != fingerprintPrefix || len(rec.LeaseOwner) != ownerPrefix {
		t.Fatalf("record --json: %+v", rec)
	}

	s.stuck(t, "order-1004", time.Minute, 2)
	code, out, _ = s.admin(t, "record", "acme", "order-1004")
	for _, want := range []string{`status: +IN_FLIGHT`, `lease expires: .*s ago\)`, `record expires: +not while in flight`, `attempts: +2 `, `stored answer: +none`} {
		if code != exitOK || !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("record of a stuck key: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}

	if code, _, errOut := s.admin(t, "record", "globex", "order-1001"); code != exitFailed || !strings.Contains(errOut, "no record") {
		t.Fatalf("another tenant's key: exit %d, %s", code, errOut)
	}
}

func TestAdminStuck(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	if code, out, _ := s.admin(t, "stuck"); code != exitOK || !strings.Contains(out, "no stuck leases") {
		t.Fatalf("stuck on an empty table: exit %d\n%s", code, out)
	}
	s.create(t, "order-2001", "tok_visa") // settled: not stuck
	s.stuck(t, "order-2002", 2*time.Minute, 0)
	s.stuck(t, "order-2003", 10*time.Minute, 4)
	s.stuck(t, "order-2004", 5*time.Minute, 1)

	code, out, _ := s.admin(t, "stuck")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 5 || !strings.HasPrefix(lines[0], "3 stuck leases") {
		t.Fatalf("stuck: exit %d\n%s", code, out)
	}
	for i, want := range []string{`^10m\d+s .* 4 +acme +order-2003$`, `^5m\d+s .* 1 +acme +order-2004$`, `^2m\d+s .* 0 +acme +order-2002$`} {
		if !regexp.MustCompile(want).MatchString(lines[i+2]) {
			t.Errorf("line %d %q does not match %s", i+2, lines[i+2], want)
		}
	}

	code, out, _ = s.admin(t, "stuck", "--json", "--max", "2")
	var got struct {
		Stuck     []stuckOutput
		Truncated bool
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || !got.Truncated || len(got.Stuck) != 2 ||
		got.Stuck[0].Key != "order-2003" || got.Stuck[0].Attempts != 4 || got.Stuck[0].AgeSeconds < 600 {
		t.Fatalf("stuck --json --max 2: exit %d, %v, %+v", code, err, got)
	}
}

func TestAdminReconcile(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	code, out, _ := s.admin(t, "reconcile", "acme", "order-3001")
	if code != exitOK || !strings.Contains(out, "queued acme / order-3001") {
		t.Fatalf("reconcile: exit %d\n%s", code, out)
	}
	msgs := s.receive(t, s.Queues.URL)
	if len(msgs) != 1 || msgs[0] != s.key(t, "order-3001") {
		t.Fatalf("the reconcile queue holds %v", msgs)
	}
}

// lostSend has SQS take the first SendMessage and loses its answer
// (idemtest.FaultyConnection's reset). Every other request passes.
type lostSend struct{ done atomic.Bool }

func (l *lostSend) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".SendMessage") && l.done.CompareAndSwap(false, true) {
		return idemtest.FaultyConnection{Fault: idemtest.Reset}.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// A charge submitted on the queue is charged once by the intake, and
// chargectl create with the same id and request replays it. The submit's
// answer is lost, so the SDK sends it again: SQS keeps both copies, and
// the intake charges once.
func TestAdminSubmit(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	s.clients.SQS = sqs.New(s.clients.SQS.Options(), func(o *sqs.Options) { o.HTTPClient = &http.Client{Transport: &lostSend{}} })
	code, out, _ := s.admin(t, "submit", "--json", "--tenant", "acme", "--id", "renewal-2026-12-acme-42", "--amount", "1500", "--source", "tok_visa")
	var sub submitOutput
	if err := json.Unmarshal([]byte(out), &sub); code != exitOK || err != nil || sub.CommandID != "renewal-2026-12-acme-42" || sub.MessageID == "" {
		t.Fatalf("submit: exit %d, %+v (%v)", code, sub, err)
	}
	if code, _, stderr := s.admin(t, "submit", "--tenant", "acme", "--amount", "1500.5", "--source", "tok_visa"); code != exitUsage || !strings.Contains(stderr, "amount") {
		t.Errorf("a fractional amount: exit %d, %q; want a usage error", code, stderr)
	}
	if code, _, stderr := s.admin(t, "submit", "--tenant", "acme", "--amount", "0", "--source", "tok_visa"); code != exitFailed || !strings.Contains(stderr, "request: amount") {
		t.Errorf("an amount of 0: exit %d, %q; want it refused before sending", code, stderr)
	}

	// A loaded emulator may answer a short poll empty: poll a few times.
	var (
		msgs *sqs.ReceiveMessageOutput
		err  error
	)
	for range 5 {
		msgs, err = s.clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(s.ChargeRequests.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		})
		if err != nil || len(msgs.Messages) > 0 {
			break
		}
	}
	if err != nil || len(msgs.Messages) == 0 {
		t.Fatalf("the charge-requests queue holds no message (%v), want the submission", err)
	}
	for _, m := range msgs.Messages[1:] {
		if aws.ToString(m.Body) != aws.ToString(msgs.Messages[0].Body) {
			t.Fatalf("the charge-requests queue holds %q and %q, want copies of one submission", aws.ToString(msgs.Messages[0].Body), aws.ToString(m.Body))
		}
	}
	resp, _ := s.IntakeHandler(t).Handle(context.Background(), testkit.SQSEvent(msgs.Messages...))
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("intake reported %v", resp.BatchItemFailures)
	}
	if n := s.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("%d copies of the submission made %d charges, want 1", len(msgs.Messages), n)
	}
	code, created := runCLI(t, s.url, &testkit.LogBuffer{}, "create", "--json", "--amount", "1500", "--source", "tok_visa", "--id", "renewal-2026-12-acme-42")
	if code != exitOK || !strings.Contains(created, `"replayed": true`) {
		t.Errorf("create with the submitted id: exit %d\n%s", code, created)
	}
}

// receive drains url and returns the keys of its messages.
func (s *adminStack) receive(t *testing.T, url string) []idem.Key {
	t.Helper()
	var keys []idem.Key
	for {
		out, err := s.clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return keys
		}
		for _, m := range out.Messages {
			msg, err := queue.ParseMessage(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("message %q: %v", aws.ToString(m.Body), err)
			}
			keys = append(keys, msg.Key)
			if _, err := s.clients.SQS.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestAdminDeadLetters(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	ctx := context.Background()
	dlq, err := queue.NewSender(s.clients.SQS, s.Queues.DLQURL)
	if err != nil {
		t.Fatal(err)
	}
	// What the reconcile queue's redrive policy leaves in the DLQ: two
	// keys' messages (one of them twice) and one that names no key.
	for _, k := range []string{"order-4001", "order-4002", "order-4001"} {
		if err := dlq.EnqueueReconcile(ctx, s.key(t, k), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.Queues.DLQURL), MessageBody: aws.String("not json")}); err != nil {
		t.Fatal(err)
	}

	code, out, _ := s.admin(t, "dlq", "list")
	if code != exitOK || !strings.HasPrefix(out, "4 messages in the dead-letter queue") || strings.Count(out, "order-4001") != 2 || !strings.Contains(out, "(malformed:") {
		t.Fatalf("dlq list: exit %d\n%s", code, out)
	}
	// The listing left them in place, visible at once.
	code, out, _ = s.admin(t, "dlq", "list", "--json")
	var listed struct{ Messages []letterOutput }
	if err := json.Unmarshal([]byte(out), &listed); code != exitOK || err != nil || len(listed.Messages) != 4 {
		t.Fatalf("dlq list --json again: exit %d, %v\n%s", code, err, out)
	}

	code, out, _ = s.admin(t, "dlq", "redrive", "--key", "acme", "order-4001")
	if code != exitOK || !strings.HasPrefix(out, "moved 2 messages") || !strings.Contains(out, "left 1 messages of other keys") {
		t.Fatalf("dlq redrive --key: exit %d\n%s", code, out)
	}
	if got := s.receive(t, s.Queues.URL); len(got) != 2 || got[0] != s.key(t, "order-4001") || got[1] != got[0] {
		t.Fatalf("the reconcile queue holds %v, want order-4001 twice", got)
	}

	code, out, _ = s.admin(t, "dlq", "redrive", "--json")
	var moved redriveOutput
	if err := json.Unmarshal([]byte(out), &moved); code != exitOK || err != nil || len(moved.Moved) != 1 || moved.Moved[0].Key != "order-4002" || len(moved.Malformed) != 1 {
		t.Fatalf("dlq redrive: exit %d, %v, %+v", code, err, moved)
	}
	if got := s.receive(t, s.Queues.URL); len(got) != 1 || got[0] != s.key(t, "order-4002") {
		t.Fatalf("the reconcile queue holds %v, want order-4002", got)
	}
	if code, out, _ = s.admin(t, "dlq", "list"); code != exitOK || !strings.HasPrefix(out, "1 messages") || !strings.Contains(out, "malformed") {
		t.Fatalf("dlq list after the redrives: exit %d\n%s", code, out)
	}
	if code, _, errOut := s.admin(t, "dlq", "redrive", "--key", "acme", "order-4001"); code != exitFailed || !strings.Contains(errOut, "no message of acme / order-4001") {
		t.Fatalf("dlq redrive of a key not there: exit %d, %s", code, errOut)
	}
}

func TestAdminUsage(t *testing.T) {
	t.Parallel()
	env := adminEnv{
		getenv: func(string) string { return "" },
		clients: func(context.Context) (awsenv.Clients, error) {
			t.Fatal("no command should get this far")
			return awsenv.Clients{}, nil
		},
		clock: time.Now,
	}
	for name, args := range map[string][]string{
		"no command":        {},
		"unknown command":   {"purge"},
		"dlq alone":         {"dlq"},
		"unknown dlq":       {"dlq", "purge"},
		"record one arg":    {"record", "acme"},
		"stuck with args":   {"stuck", "acme"},
		"redrive one key":   {"dlq", "redrive", "--key", "acme"},
		"no table":          {"record", "acme", "k"},
		"no dead-letters":   {"dlq", "list"},
		"no reconcile url":  {"reconcile", "acme", "k"},
		"unknown flag":      {"stuck", "--all"},
		"redrive with args": {"dlq", "redrive", "acme", "k"},
		"no requests queue": {"submit", "--tenant", "acme", "--amount", "1500", "--source", "tok_visa"},
		"submit with args":  {"submit", "acme"},
		"settle as nothing": {"settle", "acme", "k"},
		"settle as two":     {"settle", "--declined", "--released", "acme", "k"},
		"settle no code":    {"settle", "--declined", "--decline-code", "", "acme", "k"},
		"settle no charges": {"settle", "--released", "acme", "k"},
		"limits alone":      {"limits"},
		"limits set none":   {"limits", "set", "acme"},
		"limits set below":  {"limits", "set", "--rate", "-1", "acme"},
		"limits set above":  {"limits", "set", "--concurrency", "100001", "acme"},
		"limits no tenant":  {"limits", "clear"},
		"no limits table":   {"limits", "list"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runAdmin(context.Background(), args, env, &stdout, &stderr); code != exitUsage || stderr.Len() == 0 {
			t.Errorf("%s: exit %d, stderr %q; want %d with a message", name, code, stderr.String(), exitUsage)
		}
	}
}

// TestAdminLimitsApplyWithoutARestart: an operator lowers a tenant's rate
// with chargectl admin limits set; a charge function already running
// applies it within LIMITS_MAX_AGE, and the default (100 a second) again
// once cleared.
func TestAdminLimitsApplyWithoutARestart(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	clock := testkit.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := s.ChargeHandler(t, func(w *testkit.Wiring) { w.Charge.LimitsTable, w.Deps.Clock = s.LimitsTable, clock.Now })
	charges := func(n int) (created, limited int) {
		for range n {
			resp, err := h.Handle(t.Context(), testkit.PostCharge("acme", testkit.UniqueName("order"), settleBody))
			switch {
			case err != nil:
				t.Fatal(err)
			case resp.StatusCode == http.StatusCreated:
				created++
			case resp.StatusCode == http.StatusTooManyRequests:
				limited++
			}
		}
		return created, limited
	}

	if code, out, _ := s.admin(t, "limits", "set", "--rate", "2", "acme"); code != exitOK || !strings.Contains(out, "acme: rate 2 a second, concurrency default") {
		t.Fatalf("limits set: exit %d, %s", code, out)
	}
	if code, out, _ := s.admin(t, "limits", "list"); code != exitOK || !regexp.MustCompile(`acme +2 +default`).MatchString(out) {
		t.Fatalf("limits list: exit %d, %s", code, out)
	}
	if c, l := charges(4); c != 4 || l != 0 {
		t.Fatalf("before LIMITS_MAX_AGE: %d created, %d limited; want the old limits, 4 and 0", c, l)
	}
	clock.Advance(time.Minute)
	if c, l := charges(4); c != 2 || l != 2 {
		t.Fatalf("after LIMITS_MAX_AGE: %d created, %d limited; want 2 and 2", c, l)
	}
	if code, _, _ := s.admin(t, "limits", "clear", "acme"); code != exitOK {
		t.Fatalf("limits clear: exit %d", code)
	}
	if code, out, _ := s.admin(t, "limits", "list", "--json"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("limits list after clear: exit %d, %s", code, out)
	}
	clock.Advance(time.Minute)
	if c, l := charges(4); c != 4 || l != 0 {
		t.Fatalf("after clearing: %d created, %d limited; want the defaults, 4 and 0", c, l)
	}
}

// settleBody is the request of the parked commands TestAdminSettle makes,
// as a client's retry sends it again.
const settleBody = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`

// parked leaves a command for settleBody in flight as the reconciler parks
// one: claimed, then its lease postponed far ahead, so that neither a
// take-over nor the sweeper touches it. The lease is returned: its holder
// is the stale writer an operator's settle must fence out.
func (s *adminStack) parked(t *testing.T, clientKey string) *idem.Lease {
	t.Helper()
	st, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	return s.parkedIn(t, st, clientKey)
}

// parkedIn is parked, claimed by st.
func (s *adminStack) parkedIn(t *testing.T, st *dynamostore.Store, clientKey string) *idem.Lease {
	t.Helper()
	ctx := t.Context()
	_, fp, err := charge.ParseBody([]byte(settleBody))
	if err != nil {
		t.Fatal(err)
	}
	// The intent as the charge service keeps it for our provider API: no
	// source.
	begun, err := st.Begin(ctx, s.key(t, clientKey), fp, []byte(`{"amount":1500,"currency":"EUR"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Postpone(ctx, begun.Lease, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	return begun.Lease
}

// post sends settleBody as POST /charges under clientKey, as a client's
// retry does, and returns the answer's status and body.
func (s *adminStack) post(t *testing.T, clientKey string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.url+"/charges", strings.NewReader(settleBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer dev:acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", clientKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// chargeRows counts the rows of the charges table.
func (s *adminStack) chargeRows(t *testing.T) int32 {
	t.Helper()
	out, err := s.clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{
		TableName: aws.String(s.ChargesTable), Select: ddbtypes.SelectCount, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Count
}

func TestAdminSettle(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	ctx := context.Background()
	st, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}

	// Charged: the row and the 201 in one settlement, fencing out the
	// lease's holder.
	stale := s.parked(t, "order-5001")
	code, out, _ := s.adminTyping(t, strings.NewReader("order-5001\n"), "settle", "--charged", "pc_operator_5001", "acme", "order-5001")
	reference := charge.ProviderReference(stale.Key, stale.CreatedAt)
	for _, want := range []string{`status: +IN_FLIGHT`, `lease expires: .*\(in 7\d\dh`, `attempts: +0 `, `provider reference: +` + reference,
		`amount: +1500 EUR`, `will settle it as: +charged by provider charge pc_operator_5001: SUCCEEDED`,
		`type the key to confirm \(order-5001\): settled acme / order-5001 as charged \(outcome resolved_charged\): status SUCCEEDED, stored answer 201`} {
		if code != exitOK || !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("settle --charged: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "tok_visa") {
		t.Fatalf("settle printed the card source:\n%s", out)
	}
	rows, err := charge.NewRows(s.clients.DynamoDB, s.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	row, found, err := rows.Get(ctx, "acme", charge.ChargeID(stale.Key, stale.CreatedAt))
	if n := s.chargeRows(t); err != nil || !found || n != 1 || row.ProviderChargeID != "pc_operator_5001" || row.ProviderReference != reference || row.Money.Amount != 1500 {
		t.Fatalf("charges table: %d rows, %+v found %v (%v); want the one row of pc_operator_5001", n, row, found, err)
	}
	rec, err := st.Get(ctx, stale.Key)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := s.post(t, "order-5001"); status != http.StatusCreated || body != string(rec.Response.Body) || !strings.Contains(body, row.ID) {
		t.Fatalf("a retry of order-5001: %d %s; want the stored 201 %s", status, body, rec.Response.Body)
	}
	if err := st.Commit(ctx, stale, idem.Response{Status: http.StatusCreated}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale holder's Commit after the settle: %v, want %v", err, idem.ErrLeaseLost)
	}
	// Settled, it is refused, and says what it is.
	if code, _, errOut := s.adminTyping(t, strings.NewReader("order-5001\n"), "settle", "--released", "acme", "order-5001"); code != exitFailed ||
		!strings.Contains(errOut, "acme / order-5001 is SUCCEEDED, stored answer 201, not IN_FLIGHT") {
		t.Fatalf("settle of a settled key: exit %d, %s", code, errOut)
	}

	// Declined, with --json and --yes: the 402, and no row.
	s.parked(t, "order-5002")
	code, out, errOut := s.admin(t, "settle", "--json", "--yes", "--declined", "acme", "order-5002")
	var settled settleOutput
	if err := json.Unmarshal([]byte(out), &settled); code != exitOK || err != nil || settled.SettledAs != "declined" || settled.Outcome != charge.OutcomeResolvedDeclined ||
		settled.Evidence.Status != idem.StatusInFlight || settled.Evidence.Amount != 1500 || settled.Evidence.ProviderReference == "" ||
		settled.Record.Status != idem.StatusFailedPermanent || settled.Record.Answer == nil || settled.Record.Answer.Status != http.StatusPaymentRequired {
		t.Fatalf("settle --json --declined: exit %d, %v, %+v", code, err, settled)
	}
	if !strings.Contains(errOut, "will settle it as:") || strings.Contains(errOut, "type the key") {
		t.Fatalf("settle --json --yes: the evidence is not on stderr, or it asked:\n%s", errOut)
	}
	if status, body := s.post(t, "order-5002"); status != http.StatusPaymentRequired || !strings.Contains(body, "card_declined") {
		t.Fatalf("a retry of order-5002: %d %s; want the stored 402", status, body)
	}

	// Released: the key is free for the same request again.
	s.parked(t, "order-5003")
	if code, out, _ := s.adminTyping(t, strings.NewReader("order-5003"), "settle", "--released", "acme", "order-5003"); code != exitOK || !strings.Contains(out, "as released (outcome released): status RELEASED\n") {
		t.Fatalf("settle --released: exit %d\n%s", code, out)
	}
	if n := s.chargeRows(t); n != 1 {
		t.Fatalf("charges table: %d rows after a decline and a release, want 1", n)
	}

	// Not confirmed: nothing written, the holder still holds it.
	held := s.parked(t, "order-5004")
	before, err := st.Get(ctx, held.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, typed := range []string{"", "order-5001\n", "y\n"} {
		if code, _, errOut := s.adminTyping(t, strings.NewReader(typed), "settle", "--charged", "pc_operator_5004", "acme", "order-5004"); code != exitFailed || !strings.Contains(errOut, "not confirmed") {
			t.Fatalf("settle typing %q: exit %d, %s", typed, code, errOut)
		}
	}
	after, err := st.Get(ctx, held.Key)
	if err != nil || after.Status != idem.StatusInFlight || after.LeaseToken != before.LeaseToken || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) || after.Attempts != 0 {
		t.Fatalf("after the refusals: %+v (%v), want it as it was: %+v", after, err, before)
	}
	if err := st.Release(ctx, held); err != nil {
		t.Fatalf("the holder's Release after the refusals: %v", err)
	}

	// Settled by someone else while the operator read the evidence:
	// nothing written.
	late := s.parked(t, "order-5005")
	typed := &typedAfter{do: func() {
		if err := st.Release(ctx, late); err != nil {
			t.Error(err)
		}
	}, typed: strings.NewReader("order-5005\n")}
	if code, _, errOut := s.adminTyping(t, typed, "settle", "--charged", "pc_operator_5005", "acme", "order-5005"); code != exitFailed ||
		!strings.Contains(errOut, "changed since it was read (now RELEASED") || s.chargeRows(t) != 1 {
		t.Fatalf("settle of a key released meanwhile: exit %d, %s", code, errOut)
	}

	if code, _, errOut := s.admin(t, "settle", "--yes", "--released", "acme", "order-5999"); code != exitFailed || !strings.Contains(errOut, "no record") {
		t.Fatalf("settle of an unknown key: exit %d, %s", code, errOut)
	}
}

// typedAfter is an operator who types typed once do has run: what
// happens to a record while they read its evidence.
type typedAfter struct {
	do    func()
	typed io.Reader
}

func (r *typedAfter) Read(p []byte) (int, error) {
	if r.do != nil {
		r.do()
		r.do = nil
	}
	return r.typed.Read(p)
}
