//go:build samlocal

package sam

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/samlocal"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// exampleChargeID is the charge events/charge-get.json asks for: ids
// derive from a record's creation, so the test asks for the one it made.
const exampleChargeID = "ch_b3867622bf6161e6b485bdb9"

// TestSAMLocal builds the template with `sam build`, invokes each function
// with `sam local invoke` and its event from events/, then serves the API
// with `sam local start-api` and drives it with HTTP requests, checking
// every answer against api/openapi.yaml.
func TestSAMLocal(t *testing.T) {
	if os.Getenv("SAM_BASE_IMAGE") == "" {
		t.Fatal("run through scripts/sam-docker.sh (make sam-test), which provides the Docker daemon and the base image")
	}
	arch := os.Getenv("SAM_ARCH")
	if arch == "" {
		arch = samlocal.ArchARM64
	}
	root := testkit.RepoRoot()
	host, err := samlocal.BridgeAddress()
	if err != nil {
		t.Fatal(err)
	}
	stack, err := samlocal.Start(t.Context(), samlocal.Options{Root: root, Host: host, Arch: arch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Error(err)
		}
	})
	build := t.TempDir()
	start := time.Now()
	var out bytes.Buffer
	if err := samlocal.Build(root, arch, build, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("sam build (%s, base image %s): %s", arch, os.Getenv("SAM_BASE_IMAGE"), time.Since(start).Round(time.Millisecond))
	port := freePort(t)
	cfg, err := stack.WriteConfig(t.TempDir(), filepath.Join(build, "template.yaml"), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, root: root, cfg: cfg, stack: stack}

	var created events.APIGatewayV2HTTPResponse
	t.Run("invoke", func(t *testing.T) {
		s.t = t
		created = s.invokeCharges()
		s.invokeIntake()
		s.invokeSweeper()
		s.invokeReconcile(created)
	})
	t.Run("start-api", func(t *testing.T) {
		s.t = t
		s.startAPI(port)
	})
}

type session struct {
	t     *testing.T
	root  string
	cfg   samlocal.Config
	stack *samlocal.Stack
}

// invoke runs `sam local invoke` of fn with the event file and decodes the
// function's result into out.
func (s *session) invoke(fn, eventFile string, out any) {
	s.t.Helper()
	cmd := samlocal.SAM(s.root, "local", "invoke", "--config-file", s.cfg.Path, fn, "-e", eventFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("sam local invoke %s -e %s: %v\n%s", fn, filepath.Base(eventFile), err, stderr.String())
	}
	// SAM prints the function's result on stdout, its logs on stderr; a
	// failed function leaves an errorType there and exits 0.
	res := bytes.TrimSpace(stdout.Bytes())
	var fnErr struct {
		ErrorType string `json:"errorType"`
	}
	if json.Unmarshal(res, &fnErr) == nil && fnErr.ErrorType != "" || strings.Contains(stderr.String(), "timed out after") {
		s.t.Fatalf("sam local invoke %s: %s\n%s", fn, res, stderr.String())
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			s.t.Fatalf("sam local invoke %s: result %q: %v\n%s", fn, res, err, stderr.String())
		}
	}
	s.t.Logf("sam local invoke %-17s -e %-24s %s", fn, filepath.Base(eventFile), time.Since(start).Round(time.Millisecond))
}

func event(root, name string) string { return filepath.Join(root, "events", name+".json") }

// invokeCharges: create, replay, mismatch and get, each answer as the
// contract says.
func (s *session) invokeCharges() events.APIGatewayV2HTTPResponse {
	t := s.t
	var created, replayed, mismatch, got events.APIGatewayV2HTTPResponse
	s.invoke("ChargeFunction", event(s.root, "charge-create"), &created)
	checkEvent(t, s.root, "charge-create", created)
	if created.StatusCode != http.StatusCreated || created.Headers[httpapi.HeaderReplayed] != "" {
		t.Fatalf("create: %d %v %s, want 201", created.StatusCode, created.Headers, created.Body)
	}
	s.invoke("ChargeFunction", event(s.root, "charge-replay"), &replayed)
	checkEvent(t, s.root, "charge-replay", replayed)
	if replayed.StatusCode != http.StatusCreated || replayed.Headers[httpapi.HeaderReplayed] != "true" || replayed.Body != created.Body {
		t.Errorf("replay: %d %v %s, want 201 replayed with %s", replayed.StatusCode, replayed.Headers, replayed.Body, created.Body)
	}
	s.invoke("ChargeFunction", event(s.root, "charge-mismatch"), &mismatch)
	checkEvent(t, s.root, "charge-mismatch", mismatch)
	wantProblem(t, "mismatch", mismatch.StatusCode, mismatch.Body, http.StatusUnprocessableEntity, "idempotency-key-reused")

	id := chargeID(t, created.Body)
	ev, err := os.ReadFile(event(s.root, "charge-get"))
	if err != nil {
		t.Fatal(err)
	}
	getEvent := filepath.Join(t.TempDir(), "charge-get.json")
	if err := os.WriteFile(getEvent, bytes.ReplaceAll(ev, []byte(exampleChargeID), []byte(id)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.invoke("ChargeFunction", getEvent, &got)
	testkit.CheckAnswer(t, http.MethodGet, "/charges/"+id, nil, got.StatusCode, got.Headers, got.Body)
	if got.StatusCode != http.StatusOK || got.Body != created.Body {
		t.Errorf("get: %d %s, want 200 %s", got.StatusCode, got.Body, created.Body)
	}
	var c struct {
		ProviderReference string `json:"provider_reference"`
	}
	_ = json.Unmarshal([]byte(created.Body), &c)
	if e := s.stack.Sim.Ledger().References[c.ProviderReference]; e.Charges != 1 {
		t.Errorf("provider ledger for order-1001: %+v, want one charge", e)
	}
	return created
}

// invokeIntake: the message's charge is created, under its command id.
func (s *session) invokeIntake() {
	t := s.t
	var res events.SQSEventResponse
	s.invoke("IntakeFunction", event(s.root, "intake-sqs"), &res)
	if len(res.BatchItemFailures) != 0 {
		t.Fatalf("intake reported %+v", res.BatchItemFailures)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "renewal-2026-12-acme-42")
	rec := s.record(key)
	if rec.Status != idem.StatusSucceeded || rec.Response == nil || rec.Response.Status != http.StatusCreated {
		t.Fatalf("record after the intake: %+v, want SUCCEEDED with a 201 (created)", rec)
	}
	if e := s.stack.Sim.Ledger().References[charge.ProviderReference(key, rec.CreatedAt)]; e.Charges != 1 {
		t.Errorf("provider ledger for the intake's charge: %+v, want one charge", e)
	}
}

// invokeSweeper: a sweep with no stuck lease queues nothing.
func (s *session) invokeSweeper() {
	s.invoke("SweeperFunction", event(s.root, "sweeper-schedule"), nil)
	if n := s.visible(s.stack.Reconcile.URL); n != "0" {
		s.t.Errorf("the sweep queued %s messages, want none (no lease is stuck)", n)
	}
}

// invokeReconcile: events/reconcile-sqs.json names order-1001, settled by
// the create above: nothing to do, no failure, no second charge.
func (s *session) invokeReconcile(created events.APIGatewayV2HTTPResponse) {
	t := s.t
	var res events.SQSEventResponse
	s.invoke("ReconcileFunction", event(s.root, "reconcile-sqs"), &res)
	if len(res.BatchItemFailures) != 0 {
		t.Fatalf("reconcile reported %+v", res.BatchItemFailures)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1001")
	if rec := s.record(key); rec.Status != idem.StatusSucceeded || rec.Response == nil || string(rec.Response.Body) != created.Body {
		t.Errorf("order-1001 after reconcile: %+v, want the created charge unchanged", rec)
	}
	if l := s.stack.Sim.Ledger(); l.TotalCharges != 2 {
		t.Errorf("provider charged %d times, want 2 (order-1001 and the intake's)", l.TotalCharges)
	}
}

func (s *session) record(key idem.Key) *idem.Record {
	s.t.Helper()
	store, err := dynamostore.New(s.stack.Clients.DynamoDB, samlocal.IdempotencyTable)
	if err != nil {
		s.t.Fatal(err)
	}
	rec, err := store.Get(s.t.Context(), key)
	if err != nil {
		s.t.Fatalf("record %s: %v", key.ClientKey(), err)
	}
	return rec
}

func (s *session) visible(queueURL string) string {
	s.t.Helper()
	n, err := queueVisible(s.t.Context(), s.stack, queueURL)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// startAPI serves the API with `sam local start-api` (the development
// authorizer in front) and drives it: create, replay, mismatch, get, a
// request without a token, a refund, and authorizations captured and
// canceled.
func (s *session) startAPI(port int) {
	t := s.t
	cmd := samlocal.SAM(s.root, "local", "start-api", "--config-file", s.cfg.Path)
	logs := &testkit.LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGTERM: SAM CLI then removes its warm containers.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Error("sam local start-api did not stop within 30 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("sam local start-api output:\n%s", logs.String())
		}
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	for {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond); err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("sam local start-api exited:\n%s", logs.String())
		default:
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("sam local start-api not listening after 2 minutes:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("sam local start-api listening after %s", time.Since(start).Round(time.Millisecond))

	const body = `{"amount":2500,"currency":"EUR","source":"tok_visa","description":"Order 3001"}`
	token := map[string]string{"Authorization": "Bearer dev:acme", "Content-Type": "application/json", "Idempotency-Key": "order-3001"}
	created := s.do(base, http.MethodPost, "/charges", token, body)
	if created.status != http.StatusCreated || created.header.Get(httpapi.HeaderReplayed) != "" {
		t.Fatalf("POST /charges: %d %v %s, want 201", created.status, created.header, created.body)
	}
	replayed := s.do(base, http.MethodPost, "/charges", token, body)
	if replayed.status != http.StatusCreated || replayed.header.Get(httpapi.HeaderReplayed) != "true" || replayed.body != created.body {
		t.Errorf("replay: %d %v %s, want 201 replayed with %s", replayed.status, replayed.header, replayed.body, created.body)
	}
	mismatch := s.do(base, http.MethodPost, "/charges", token, strings.Replace(body, "2500", "9900", 1))
	wantProblem(t, "mismatch", mismatch.status, mismatch.body, http.StatusUnprocessableEntity, "idempotency-key-reused")
	id := chargeID(t, created.body)
	got := s.do(base, http.MethodGet, "/charges/"+id, map[string]string{"Authorization": "Bearer dev:acme"}, "")
	if got.status != http.StatusOK || got.body != created.body {
		t.Errorf("GET /charges/%s: %d %s, want 200 %s", id, got.status, got.body, created.body)
	}
	anonymous := s.do(base, http.MethodPost, "/charges", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "order-3002"}, body)
	if anonymous.status != http.StatusUnauthorized || strings.TrimSpace(anonymous.body) != `{"message":"Unauthorized"}` {
		t.Errorf("POST /charges without a token: %d %s, want 401 {\"message\":\"Unauthorized\"}", anonymous.status, anonymous.body)
	}
	if e := s.stack.Sim.Ledger().References[providerReference(t, created.body)]; e.Charges != 1 {
		t.Errorf("provider ledger for order-3001: %+v, want one charge for two POSTs", e)
	}
	s.refundAPI(base, id, token)
	s.moveAPI(base)
}

// moveAPI authorizes two charges through the template's routes, captures
// part of one twice with no key, cancels the other, then tries to cancel
// the captured one: one provider capture, one cancel, and a conflict.
func (s *session) moveAPI(base string) {
	t := s.t
	auth := map[string]string{"Authorization": "Bearer dev:acme", "Content-Type": "application/json"}
	authorize := func(key string) (id, ref string) {
		t.Helper()
		headers := map[string]string{"Authorization": auth["Authorization"], "Content-Type": auth["Content-Type"], "Idempotency-Key": key}
		a := s.do(base, http.MethodPost, "/charges", headers, `{"amount":4000,"currency":"EUR","source":"tok_visa","capture":false}`)
		if a.status != http.StatusCreated || !strings.Contains(a.body, `"status":"requires_capture"`) {
			t.Fatalf("POST /charges with capture false: %d %s, want 201 requires_capture", a.status, a.body)
		}
		return chargeID(t, a.body), providerReference(t, a.body)
	}
	captured, capturedRef := authorize("order-3003")
	capture := s.do(base, http.MethodPost, "/charges/"+captured+"/capture", auth, `{"amount":3000}`)
	again := s.do(base, http.MethodPost, "/charges/"+captured+"/capture", auth, `{"amount":3000}`)
	if capture.status != http.StatusOK || again.status != http.StatusOK || again.body != capture.body ||
		!strings.Contains(capture.body, `"status":"succeeded"`) || !strings.Contains(capture.body, `"amount":3000`) {
		t.Errorf("capture twice: %d %s, then %d %s; want 200 succeeded with amount 3000, twice the same", capture.status, capture.body, again.status, again.body)
	}
	if e := s.stack.Sim.Ledger().References[capturedRef]; e.Captures != 1 || e.Captured != 3000 {
		t.Errorf("provider ledger for order-3003: %+v, want one capture of 3000 for two POSTs", e)
	}

	canceled, canceledRef := authorize("order-3004")
	cancel := s.do(base, http.MethodPost, "/charges/"+canceled+"/cancel", map[string]string{"Authorization": auth["Authorization"]}, "")
	if cancel.status != http.StatusOK || !strings.Contains(cancel.body, `"status":"canceled"`) {
		t.Errorf("cancel: %d %s, want 200 canceled", cancel.status, cancel.body)
	}
	if e := s.stack.Sim.Ledger().References[canceledRef]; !e.Canceled || e.Captures != 0 {
		t.Errorf("provider ledger for order-3004: %+v, want canceled, never captured", e)
	}

	late := s.do(base, http.MethodPost, "/charges/"+captured+"/cancel", map[string]string{"Authorization": auth["Authorization"]}, "")
	wantProblem(t, "cancel of a captured charge", late.status, late.body, http.StatusConflict, "charge-state-conflict")
	if !strings.Contains(late.body, `"charge_status":"succeeded"`) {
		t.Errorf("cancel of a captured charge: %s, want charge_status succeeded", late.body)
	}
	if e := s.stack.Sim.Ledger().References[capturedRef]; e.Canceled || e.Captures != 1 {
		t.Errorf("provider ledger for order-3003 after the cancel: %+v, want its one capture, not canceled", e)
	}
}

// refundAPI refunds part of the charge id twice with one key through the
// template's refund routes: one refund, replayed, read back.
func (s *session) refundAPI(base, id string, token map[string]string) {
	t := s.t
	token["Idempotency-Key"] = "return-3001"
	refund := s.do(base, http.MethodPost, "/charges/"+id+"/refunds", token, `{"amount":1000}`)
	again := s.do(base, http.MethodPost, "/charges/"+id+"/refunds", token, `{"amount":1000}`)
	if refund.status != http.StatusCreated || again.status != http.StatusCreated || again.body != refund.body || again.header.Get(httpapi.HeaderReplayed) != "true" {
		t.Fatalf("POST refunds twice: %d %s, then %d %v %s; want 201, then it replayed", refund.status, refund.body, again.status, again.header, again.body)
	}
	read := s.do(base, http.MethodGet, refund.header.Get("Location"), map[string]string{"Authorization": "Bearer dev:acme"}, "")
	if read.status != http.StatusOK || read.body != refund.body {
		t.Errorf("GET %s: %d %s, want 200 %s", refund.header.Get("Location"), read.status, read.body, refund.body)
	}
	got := s.do(base, http.MethodGet, "/charges/"+id, map[string]string{"Authorization": "Bearer dev:acme"}, "")
	if !strings.Contains(got.body, `"amount_refunded":1000`) {
		t.Errorf("GET /charges/%s after the refund: %s, want amount_refunded 1000", id, got.body)
	}
	n := 0
	for _, rf := range s.stack.Sim.Ledger().Refunds {
		n += rf.Refunds
	}
	if n != 1 {
		t.Errorf("provider refunds: %d, want one for two POSTs", n)
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

// do sends one request to the API and checks the answer against the
// contract.
func (s *session) do(base, method, path string, headers map[string]string, body string) answer {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("%-4s %-34s -> %d in %s", method, path, res.StatusCode, time.Since(start).Round(time.Millisecond))
	h := map[string]string{}
	for k := range res.Header {
		h[k] = res.Header.Get(k)
	}
	testkit.CheckAnswer(s.t, method, path, headers, res.StatusCode, h, string(b))
	return answer{res.StatusCode, res.Header, string(b)}
}

func freePort(t *testing.T) int {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func chargeID(t *testing.T, body string) string {
	t.Helper()
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || c.ID == "" {
		t.Fatalf("no charge id in %s: %v", body, err)
	}
	return c.ID
}

func providerReference(t *testing.T, body string) string {
	t.Helper()
	var c struct {
		Ref string `json:"provider_reference"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	return c.Ref
}

func wantProblem(t *testing.T, what string, status int, body string, wantStatus int, slug string) {
	t.Helper()
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || status != wantStatus || p.Type != httpapi.ProblemBase+slug {
		t.Errorf("%s: %d %s, want %d %s", what, status, body, wantStatus, slug)
	}
}

// checkEvent checks a function's answer to events/<name>.json against the
// contract, for the request the event describes.
func checkEvent(t *testing.T, root, name string, res events.APIGatewayV2HTTPResponse) {
	t.Helper()
	b, err := os.ReadFile(event(root, name))
	if err != nil {
		t.Fatal(err)
	}
	var req events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(fmt.Errorf("events/%s.json: %w", name, err))
	}
	testkit.CheckAnswer(t, req.RequestContext.HTTP.Method, req.RawPath, req.Headers, res.StatusCode, res.Headers, res.Body)
}
