package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/client"

	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

// runCLI runs chargectl against url and returns its exit status and output.
func runCLI(t *testing.T, url string, stderr *testkit.LogBuffer, args ...string) (int, string) {
	t.Helper()
	var stdout bytes.Buffer
	args = append(args[:1:1], append([]string{"--url", url, "--token", "dev:acme"}, args[1:]...)...)
	code := run(context.Background(), args, &stdout, stderr)
	return code, stdout.String()
}

var mintedID = regexp.MustCompile(`command id: ([0-9a-f-]{36}) \(resume with --id `)

func TestCreatePrintsIDFirstAndResumes(t *testing.T) {
	t.Parallel()
	stderr := &testkit.LogBuffer{}
	// The API records whether the id was on stderr when the first request
	// arrived.
	var requests atomic.Int32
	var idBeforeFirst atomic.Bool
	st := newStack(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if requests.Add(1) == 1 {
				idBeforeFirst.Store(mintedID.MatchString(stderr.String()))
			}
			next.ServeHTTP(w, r)
		})
	})

	code, out := runCLI(t, st.URL, stderr, "create", "--amount", "1500", "--currency", "EUR", "--source", "tok_visa", "--description", "Order 9")
	if code != exitOK {
		t.Fatalf("create: exit %d, stderr %s", code, stderr)
	}
	if !idBeforeFirst.Load() {
		t.Fatalf("the command id was not on stderr before the first request: %s", stderr)
	}
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	chargeID := regexp.MustCompile(`charge: +(ch_[0-9a-f]{24})`).FindStringSubmatch(out)
	if chargeID == nil || !strings.Contains(out, "replayed:     no") || !strings.Contains(out, "1500 EUR") || !strings.Contains(out, "Order 9") {
		t.Fatalf("create printed:\n%s", out)
	}

	resumed := &testkit.LogBuffer{}
	code, out = runCLI(t, st.URL, resumed, "create", "--amount", "1500", "--currency", "EUR", "--source", "tok_visa", "--description", "Order 9", "--id", id, "--json")
	if code != exitOK || !strings.Contains(resumed.String(), "resuming command id: "+id) {
		t.Fatalf("resume: exit %d, stderr %s", code, resumed)
	}
	var res createOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("resume --json printed %q: %v", out, err)
	}
	if string(res.CommandID) != id || !res.Replayed || res.Charge.ID != chargeID[1] || res.KeyExpiresAt.IsZero() {
		t.Fatalf("resume: %+v, want a replay of %s under id %s", res, chargeID[1], id)
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}

	code, out = runCLI(t, st.URL, &testkit.LogBuffer{}, "get", chargeID[1])
	if code != exitOK || !strings.Contains(out, chargeID[1]) || !strings.Contains(out, "succeeded") {
		t.Fatalf("get: exit %d, printed:\n%s", code, out)
	}
	getErr := &testkit.LogBuffer{}
	if code, _ = runCLI(t, st.URL, getErr, "get", "ch_000000000000000000000000"); code != exitFailed || !strings.Contains(getErr.String(), "404") {
		t.Fatalf("get unknown: exit %d, stderr %s", code, getErr)
	}
}

func TestCreateRetriesADroppedResponse(t *testing.T) {
	t.Parallel()
	// The first answer is produced, then the connection is dropped.
	var dropped atomic.Bool
	st := newStack(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if dropped.CompareAndSwap(false, true) {
				next.ServeHTTP(httptest.NewRecorder(), r)
				panic(http.ErrAbortHandler)
			}
			next.ServeHTTP(w, r)
		})
	})
	stderr := &testkit.LogBuffer{}
	code, out := runCLI(t, st.URL, stderr, "create", "--amount", "700", "--source", "tok_visa")
	if code != exitOK || !strings.Contains(out, "replayed:     yes") || !strings.Contains(stderr.String(), "attempt 1:") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}
}

func TestCreateDeclined(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	stderr := &testkit.LogBuffer{}
	code, out := runCLI(t, st.URL, stderr, "create", "--amount", "1500", "--source", providersim.SourceDecline, "--json")
	if code != exitFailed || !strings.Contains(stderr.String(), "402") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var res errorOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Retryable || res.Problem == nil || res.Problem.Slug() != "card-declined" || res.CommandID == "" {
		t.Fatalf("--json printed %q (%v)", out, err)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no command":      {},
		"unknown command": {"void"},
		"no amount":       {"create", "--source", "tok_visa"},
		"no source":       {"create", "--amount", "1"},
		"bad id":          {"create", "--amount", "1", "--source", "tok_visa", "--id", "bad\tid"},
		"bad url":         {"create", "--amount", "1", "--source", "tok_visa", "--url", "localhost"},
		"get without id":  {"get"},
		"unknown flag":    {"get", "--nope", "x"},
		"refund no id":    {"refund", "--amount", "5"},
		"refund two ids":  {"refund", "ch_1", "ch_2"},
		"refund zero":     {"refund", "ch_1", "--amount", "0"},
		"refund bad id":   {"refund", "ch_1", "--id", "bad\tid"},
		"refunds no id":   {"refunds"},
		"refunds two ids": {"refunds", "ch_1", "ch_2"},
		"capture no id":   {"capture", "--amount", "5"},
		"capture two ids": {"capture", "ch_1", "ch_2"},
		"capture zero":    {"capture", "ch_1", "--amount", "0"},
		"cancel no id":    {"cancel"},
		"cancel amount":   {"cancel", "ch_1", "--amount", "5"},
		"cancel an id":    {"cancel", "ch_1", "--id", "x"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage || stderr.Len() == 0 {
			t.Errorf("%s: exit %d, stderr %q; want %d with a message", name, code, stderr.String(), exitUsage)
		}
	}
}

// refundAPI answers POST /charges/{id}/refunds as the contract does: 201
// the first time for a key, the same body replayed after. It records the
// requests, and whether a minted command id was on stderr before the first.
type refundAPI struct {
	stderr        *testkit.LogBuffer
	mu            sync.Mutex
	requests      []string // method, path, key and body
	idBeforeFirst bool
}

func (a *refundAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	if len(a.requests) == 0 {
		a.idBeforeFirst = mintedID.MatchString(a.stderr.String())
	}
	replay := slices.ContainsFunc(a.requests, func(s string) bool { return strings.Contains(s, " "+key+" ") })
	a.requests = append(a.requests, r.Method+" "+r.URL.Path+" "+key+" "+string(b))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotency-Expires", "Fri, 03 Jan 2025 03:04:05 GMT")
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"re_89abcdef0123456789abcdef","charge_id":"ch_0123456789abcdef01234567","amount":500,"currency":"EUR","reason":"duplicate","status":"succeeded","provider_reference":"rf_1","created_at":"2025-01-02T04:05:06Z"}`)
}

func TestRefundPrintsIDFirstAndResumes(t *testing.T) {
	t.Parallel()
	stderr := &testkit.LogBuffer{}
	api := &refundAPI{stderr: stderr}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	code, out := runCLI(t, srv.URL, stderr, "refund", "ch_0123456789abcdef01234567", "--amount", "500", "--reason", "duplicate")
	if code != exitOK || !api.idBeforeFirst {
		t.Fatalf("refund: exit %d, id on stderr before the first request %v, stderr %s", code, api.idBeforeFirst, stderr)
	}
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	if !strings.Contains(out, "refund:       re_89abcdef0123456789abcdef") || !strings.Contains(out, "500 EUR") || !strings.Contains(out, "replayed:     no") {
		t.Fatalf("refund printed:\n%s", out)
	}

	resumed := &testkit.LogBuffer{}
	code, out = runCLI(t, srv.URL, resumed, "refund", "ch_0123456789abcdef01234567", "--amount", "500", "--reason", "duplicate", "--id", id, "--json")
	var res refundOutput
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil || !strings.Contains(resumed.String(), "resuming command id: "+id) {
		t.Fatalf("resume: exit %d, printed %q (%v), stderr %s", code, out, err, resumed)
	}
	if string(res.CommandID) != id || !res.Replayed || res.Refund.ID != "re_89abcdef0123456789abcdef" || res.KeyExpiresAt.IsZero() {
		t.Fatalf("resume: %+v, want the replay of the refund under id %s", res, id)
	}
	want := "POST /charges/ch_0123456789abcdef01234567/refunds " + id + ` {"amount":500,"reason":"duplicate"}`
	if len(api.requests) != 2 || api.requests[0] != want || api.requests[1] != want {
		t.Fatalf("requests %q, want twice %q", api.requests, want)
	}
}

// TestRefundUnknownOutcomeWarns: a bare 502 (the function failed, maybe
// after it refunded), then 503 provider-unavailable until --timeout: the
// refund may have been made, so chargectl exits 3 and says to resume with
// the same id, never a new one.
func TestRefundUnknownOutcomeWarns(t *testing.T) {
	t.Parallel()
	url := ambiguousGateway(t, http.StatusServiceUnavailable, "application/problem+json",
		`{"type":"https://chargeonce.dev/problems/provider-unavailable","title":"Provider unavailable","status":503}`)
	stderr := &testkit.LogBuffer{}
	code, _ := runCLI(t, url, stderr, "refund", "ch_0123456789abcdef01234567", "--timeout", "2s")
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	want := "the refund may have been made; resume with the same id, never a new one: chargectl refund ch_0123456789abcdef01234567 ... --id " + id
	if code != exitPending || !strings.Contains(stderr.String(), want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitPending, want)
	}
}

// TestRefundExceedingTheChargeIsFinalOnlyWithoutRetryAfter: a refund
// that exceeds the charge exits 1, final for the id, unless the answer
// asked for a retry (other refunds were in flight): then it exits 3.
func TestRefundExceedingTheChargeIsFinalOnlyWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	exceeds := func(retryAfter time.Duration) error {
		return fmt.Errorf("client: refund: %w", &client.ProblemError{
			Type: client.ProblemBase + "refund-exceeds-charge", Status: http.StatusConflict, RetryAfter: retryAfter,
		})
	}
	if pending(exceeds(0)) || !pending(exceeds(2*time.Second)) {
		t.Fatalf("pending: final %v, in flight %v; want false, true", pending(exceeds(0)), pending(exceeds(2*time.Second)))
	}
	url := ambiguousGateway(t, http.StatusConflict, "application/problem+json",
		`{"type":"https://chargeonce.dev/problems/refund-exceeds-charge","title":"Refund exceeds the charge","status":409}`)
	stderr := &testkit.LogBuffer{}
	// The first answer, a bare 502, is retried; the 409 after it is the
	// command's stored outcome, final.
	if code, _ := runCLI(t, url, stderr, "refund", "ch_0123456789abcdef01234567", "--amount", "99999"); code != exitFailed || strings.Contains(stderr.String(), "the outcome") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and no advice to resume", code, stderr, exitFailed)
	}
}

// TestRefundsListsEveryRefund: get shows a charge's oldest refunds and
// says where the rest are; refunds lists each of them once, oldest first.
func TestRefundsListsEveryRefund(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	api, err := client.New(st.URL, client.WithToken("dev:acme"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := api.Create(t.Context(), client.NewCommandID(), client.Money{Amount: 1500, Currency: "EUR"}, "tok_visa")
	if err != nil {
		t.Fatal(err)
	}
	id := res.Charge.ID
	var made []string
	for range 12 {
		re, err := api.Refund(t.Context(), id, client.NewCommandID(), client.WithRefundAmount(1))
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, re.Refund.ID)
	}
	code, out := runCLI(t, st.URL, &testkit.LogBuffer{}, "get", id)
	if code != exitOK || strings.Count(out, "  refund:") != 10 || !strings.Contains(out, "more refunds: chargectl refunds "+id) {
		t.Fatalf("get: exit %d, printed:\n%s\nwant 10 refunds and where the rest are", code, out)
	}
	code, out = runCLI(t, st.URL, &testkit.LogBuffer{}, "refunds", id)
	if code != exitOK || strings.Count(out, "refund:") != 12 {
		t.Fatalf("refunds: exit %d, printed:\n%s\nwant 12 refunds", code, out)
	}
	code, out = runCLI(t, st.URL, &testkit.LogBuffer{}, "refunds", "--json", id)
	var listed []client.Refund
	if err := json.Unmarshal([]byte(out), &listed); code != exitOK || err != nil || len(listed) != 12 {
		t.Fatalf("refunds --json: exit %d, %v, printed:\n%s", code, err, out)
	}
	for _, re := range listed {
		if !slices.Contains(made, re.ID) {
			t.Fatalf("refunds --json lists %s, not a refund made", re.ID)
		}
	}
	getErr := &testkit.LogBuffer{}
	if code, _ = runCLI(t, st.URL, getErr, "refunds", "ch_000000000000000000000000"); code != exitFailed || !strings.Contains(getErr.String(), "404") {
		t.Fatalf("refunds of an unknown charge: exit %d, stderr %s", code, getErr)
	}
}

// TestRefundLimitReachedIsFinalOnlyWithoutRetryAfter: as a refund that
// exceeds the charge, unless refunds in flight fill the limit: then the
// same id may succeed if one fails.
func TestRefundLimitReachedIsFinalOnlyWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	limit := func(retryAfter time.Duration) error {
		return fmt.Errorf("client: refund: %w", &client.ProblemError{
			Type: client.ProblemBase + "refund-limit-reached", Status: http.StatusConflict, RetryAfter: retryAfter,
		})
	}
	if pending(limit(0)) || !pending(limit(2*time.Second)) {
		t.Fatalf("pending: final %v, in flight %v; want false, true", pending(limit(0)), pending(limit(2*time.Second)))
	}
}

// stateAPI answers POST /charges/{id}/capture and /cancel as the contract
// does, from the charge's state: a capture of an authorized charge
// captures it, a repeat with the same amount gets the same charge, and any
// other request its state forbids is a charge-state-conflict. It records
// the requests.
type stateAPI struct {
	mu       sync.Mutex
	status   client.ChargeStatus
	amount   int64 // captured, once the status is succeeded
	requests []string
}

func (a *stateAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req struct {
		Amount int64 `json:"amount"`
	}
	_ = json.Unmarshal(b, &req)
	if req.Amount == 0 {
		req.Amount = 1999
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key")+" "+string(b))
	switch {
	case strings.HasSuffix(r.URL.Path, "/capture") && a.status == client.StatusRequiresCapture:
		a.status, a.amount = client.StatusSucceeded, req.Amount
	case strings.HasSuffix(r.URL.Path, "/capture") && a.status == client.StatusSucceeded && a.amount == req.Amount:
	case strings.HasSuffix(r.URL.Path, "/cancel") && (a.status == client.StatusRequiresCapture || a.status == client.StatusCanceled):
		a.status, a.amount = client.StatusCanceled, 1999
	default:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"type":"https://chargeonce.dev/problems/charge-state-conflict","title":"The charge is in another state","status":409,"detail":"The charge is %s.","charge_status":%q}`, a.status, a.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"ch_0123456789abcdef01234567","amount":%d,"amount_authorized":1999,"currency":"EUR","status":%q,"provider_reference":"pr_1","created_at":"2025-01-02T03:04:05Z","amount_refunded":0}`, a.amount, a.status)
}

// TestCaptureRepeatsAndCancelConflicts: capture mints no id and sends no
// key; the same capture again prints the same charge; a cancel of the
// captured charge exits 1 with the charge's status.
func TestCaptureRepeatsAndCancelConflicts(t *testing.T) {
	t.Parallel()
	api := &stateAPI{status: client.StatusRequiresCapture}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	const ch = "ch_0123456789abcdef01234567"

	var outs []string
	for range 2 {
		stderr := &testkit.LogBuffer{}
		code, out := runCLI(t, srv.URL, stderr, "capture", ch, "--amount", "1500")
		if code != exitOK || strings.Contains(stderr.String(), "command id") {
			t.Fatalf("capture: exit %d, stderr %s; want 0 and no command id", code, stderr)
		}
		outs = append(outs, out)
	}
	if outs[0] != outs[1] || !strings.Contains(outs[0], "status:       succeeded") || !strings.Contains(outs[0], "amount:       1500 EUR") || !strings.Contains(outs[0], "authorized:   1999 EUR") {
		t.Fatalf("capture printed:\n%s\nthen:\n%s\nwant the captured charge twice", outs[0], outs[1])
	}
	want := "POST /charges/" + ch + `/capture  {"amount":1500}`
	if len(api.requests) != 2 || api.requests[0] != want || api.requests[1] != want {
		t.Fatalf("requests %q, want twice %q (no key)", api.requests, want)
	}

	stderr := &testkit.LogBuffer{}
	code, out := runCLI(t, srv.URL, stderr, "cancel", ch, "--json")
	var res errorOutput
	if err := json.Unmarshal([]byte(out), &res); code != exitFailed || err != nil || res.Retryable || res.Problem == nil ||
		res.Problem.ChargeStatus != client.StatusSucceeded || !strings.Contains(stderr.String(), "charge status: succeeded") {
		t.Fatalf("cancel of a captured charge: exit %d, printed %q (%v), stderr %s; want exit %d, charge status succeeded", code, out, err, stderr, exitFailed)
	}
	if last := api.requests[len(api.requests)-1]; last != "POST /charges/"+ch+"/cancel  " {
		t.Fatalf("cancel sent %q, want no key and no body", last)
	}
}

// TestCancelOfAnAuthorization: cancel prints the canceled charge, and
// running it again prints the same.
func TestCancelOfAnAuthorization(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&stateAPI{status: client.StatusRequiresCapture})
	t.Cleanup(srv.Close)
	for range 2 {
		code, out := runCLI(t, srv.URL, &testkit.LogBuffer{}, "cancel", "ch_0123456789abcdef01234567", "--json")
		var ch client.Charge
		if err := json.Unmarshal([]byte(out), &ch); code != exitOK || err != nil || ch.Status != client.StatusCanceled {
			t.Fatalf("cancel: exit %d, printed %q (%v); want the canceled charge", code, out, err)
		}
	}
}

// TestSetStateUnknownOutcomeSaysRunAgain: a bare 502 (the function
// failed, maybe after the provider captured), then 503
// provider-unavailable until --timeout: the capture may have happened, so
// chargectl exits 3 and says to run the same command again, which is safe.
func TestSetStateUnknownOutcomeSaysRunAgain(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"capture": {[]string{"capture", "ch_0123456789abcdef01234567", "--amount", "500"},
			"the capture may have happened; run the same command again, which is safe: chargectl capture ch_0123456789abcdef01234567 --amount 500"},
		"cancel": {[]string{"cancel", "ch_0123456789abcdef01234567"},
			"the cancel may have happened; run the same command again, which is safe: chargectl cancel ch_0123456789abcdef01234567"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := ambiguousGateway(t, http.StatusServiceUnavailable, "application/problem+json",
				`{"type":"https://chargeonce.dev/problems/provider-unavailable","title":"Provider unavailable","status":503}`)
			stderr := &testkit.LogBuffer{}
			code, _ := runCLI(t, url, stderr, append(tc.args, "--timeout", "2s")...)
			if code != exitPending || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitPending, tc.want)
			}
		})
	}
}

// TestStateConflictWhileAnotherChangeRuns: a conflict with a charge whose
// capture or cancel is unsettled is not final (exit 3); with a settled
// one it is (exit 1).
func TestStateConflictWhileAnotherChangeRuns(t *testing.T) {
	t.Parallel()
	conflict := func(status client.ChargeStatus) error {
		return fmt.Errorf("client: cancel: %w", &client.ProblemError{
			Type: client.ProblemBase + "charge-state-conflict", Status: http.StatusConflict, ChargeStatus: status,
		})
	}
	for status, want := range map[client.ChargeStatus]bool{
		client.StatusCapturing: true, client.StatusCanceling: true, client.StatusSucceeded: false, client.StatusCanceled: false,
	} {
		if got := pending(conflict(status)); got != want {
			t.Errorf("pending(charge-state-conflict %s) = %v, want %v", status, got, want)
		}
	}
}

// TestCreateCaptureFalseAuthorizesOnly: --capture=false sends
// "capture":false; the default sends no capture member.
func TestCreateCaptureFalseAuthorizesOnly(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_0123456789abcdef01234567","amount":1500,"amount_authorized":1500,"currency":"EUR","status":"requires_capture","provider_reference":"pr_1","created_at":"2025-01-02T03:04:05Z","amount_refunded":0}`)
	}))
	t.Cleanup(srv.Close)
	code, out := runCLI(t, srv.URL, &testkit.LogBuffer{}, "create", "--amount", "1500", "--source", "tok_visa", "--capture=false")
	if code != exitOK || !strings.Contains(out, "status:       requires_capture") || !strings.Contains(out, "authorized:   1500 EUR") {
		t.Fatalf("create --capture=false: exit %d, printed:\n%s", code, out)
	}
	if code, _ := runCLI(t, srv.URL, &testkit.LogBuffer{}, "create", "--amount", "1500", "--source", "tok_visa"); code != exitOK {
		t.Fatalf("create: exit %d", code)
	}
	want := []string{`{"amount":1500,"currency":"EUR","source":"tok_visa","capture":false}`, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`}
	if !slices.Equal(bodies, want) {
		t.Fatalf("bodies %q, want %q", bodies, want)
	}
}
