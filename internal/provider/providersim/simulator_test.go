package providersim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// start serves a new simulator and returns it with a client for it.
func start(t *testing.T, opts ...func(*providersim.Options)) (*providersim.Simulator, *httptest.Server, *provider.Client) {
	t.Helper()
	sim := providersim.New(opts...)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv, provider.NewClient(srv.URL, "", provider.WithHTTPClient(srv.Client()))
}

func charge(ref, source string) provider.ChargeRequest {
	return provider.ChargeRequest{Reference: ref, Amount: 1250, Currency: "EUR", Source: source}
}

// post sends a raw POST with the given headers and returns status, headers
// and body; err is the transport error, if any.
func post(t *testing.T, srv *httptest.Server, path string, body any, header http.Header) (int, http.Header, []byte, error) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return send(t, srv, req)
}

func get(t *testing.T, srv *httptest.Server, path string, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	code, h, body, err := send(t, srv, req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return code, h, body
}

func send(t *testing.T, srv *httptest.Server, req *http.Request) (int, http.Header, []byte, error) {
	t.Helper()
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, resp.Header, data, nil
}

func mustCharge(t *testing.T, c *provider.Client, req provider.ChargeRequest) provider.Result {
	t.Helper()
	res, err := c.Charge(t.Context(), req)
	if err != nil {
		t.Fatalf("Charge(%s): %v", req.Reference, err)
	}
	return res
}

func mustLookup(t *testing.T, c *provider.Client, ref string) provider.Result {
	t.Helper()
	res, err := c.Lookup(t.Context(), ref)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", ref, err)
	}
	return res
}

// wantEntry compares the ledger's entry for ref with want, whose ID, if
// empty, matches any.
func wantEntry(t *testing.T, sim *providersim.Simulator, ref string, want providersim.LedgerEntry) {
	t.Helper()
	got := sim.Ledger().References[ref]
	if want.ID == "" {
		got.ID = ""
	}
	if got != want {
		t.Errorf("ledger[%s] = %+v, want %+v", ref, got, want)
	}
}

// withoutIDs is l with its charges' ids left out.
func withoutIDs(l providersim.Ledger) providersim.Ledger {
	for name, e := range l.References {
		e.ID = ""
		l.References[name] = e
	}
	return l
}

var chargeID = regexp.MustCompile(`^pc_[0-9a-f]{16}$`)

func TestChargeBySource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		source      string
		status      provider.Status
		declineCode string
	}{
		{providersim.SourceVisa, provider.StatusCharged, ""},
		{"tok_mastercard", provider.StatusCharged, ""},
		{"pm_anything", provider.StatusCharged, ""},
		{providersim.SourceDecline, provider.StatusDeclined, providersim.DeclineCode},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			t.Parallel()
			sim, _, c := start(t)
			res := mustCharge(t, c, charge("order-1", tt.source))
			if res.Status != tt.status || res.DeclineCode != tt.declineCode || res.Reference != "order-1" {
				t.Errorf("Charge = %+v, want status %s, decline code %q", res, tt.status, tt.declineCode)
			}
			if !chargeID.MatchString(res.ChargeID) {
				t.Errorf("charge id %q does not match %s", res.ChargeID, chargeID)
			}
			wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: tt.status, Amount: 1250})
			if got := mustLookup(t, c, "order-1"); got != res {
				t.Errorf("Lookup = %+v, want %+v", got, res)
			}
		})
	}
}

func TestChargeIDsDiffer(t *testing.T) {
	t.Parallel()
	_, _, c := start(t)
	a := mustCharge(t, c, charge("order-a", providersim.SourceVisa))
	b := mustCharge(t, c, charge("order-b", providersim.SourceVisa))
	if a.ChargeID == b.ChargeID {
		t.Errorf("two references share charge id %s", a.ChargeID)
	}
}

func TestDedupeReturnsFirstResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		first, second string
		status        provider.Status
	}{
		{"charged then decline source", providersim.SourceVisa, providersim.SourceDecline, provider.StatusCharged},
		{"declined then visa source", providersim.SourceDecline, providersim.SourceVisa, provider.StatusDeclined},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim, _, c := start(t)
			first := mustCharge(t, c, charge("order-1", tt.first))
			again := charge("order-1", tt.second)
			again.Amount, again.Currency = 99999, "USD"
			second := mustCharge(t, c, again)
			if second != first {
				t.Errorf("second Charge = %+v, want the first result %+v", second, first)
			}
			if first.Status != tt.status {
				t.Errorf("status = %s, want %s", first.Status, tt.status)
			}
			wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 2, Status: tt.status, Amount: 1250})
			if l := sim.Ledger(); l.TotalCharges != 1 || l.TotalCalls != 2 {
				t.Errorf("totals = %d charges, %d calls; want 1, 2", l.TotalCharges, l.TotalCalls)
			}
		})
	}
}

func TestUnavailableOnceThenCharges(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	req := charge("order-1", providersim.SourceUnavailableOnce)
	if _, err := c.Charge(t.Context(), req); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("first Charge error = %v, want ErrUnavailable", err)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 0, Calls: 1, Status: provider.StatusNotFound})
	if got := mustLookup(t, c, "order-1"); got.Status != provider.StatusNotFound {
		t.Errorf("Lookup after the 503 = %+v, want not_found", got)
	}
	res := mustCharge(t, c, req)
	if res.Status != provider.StatusCharged {
		t.Errorf("retry = %+v, want charged", res)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 2, Status: provider.StatusCharged, Amount: 1250})
}

func TestUnavailableAlwaysChargesNothing(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	for i := range 3 {
		if _, err := c.Charge(t.Context(), charge("order-1", providersim.SourceUnavailable)); !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("call %d: error = %v, want ErrUnavailable", i+1, err)
		}
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 0, Calls: 3, Status: provider.StatusNotFound})
	if l := sim.Ledger(); l.TotalCharges != 0 {
		t.Errorf("total charges = %d, want 0", l.TotalCharges)
	}
}

func TestTimeoutCreatesChargeOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		source      string
		retryIsLost bool // the retry's response is dropped too
	}{
		{providersim.SourceTimeoutOnce, false},
		{providersim.SourceTimeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			t.Parallel()
			sim, _, c := start(t)
			req := charge("order-1", tt.source)
			if _, err := c.Charge(t.Context(), req); !errors.Is(err, provider.ErrAmbiguous) {
				t.Fatalf("Charge error = %v, want ErrAmbiguous", err)
			}
			found := mustLookup(t, c, "order-1")
			if found.Status != provider.StatusCharged || !chargeID.MatchString(found.ChargeID) {
				t.Fatalf("Lookup = %+v, want charged with an id", found)
			}
			retry, err := c.Charge(t.Context(), req)
			switch {
			case tt.retryIsLost && !errors.Is(err, provider.ErrAmbiguous):
				t.Errorf("retry error = %v, want ErrAmbiguous", err)
			case !tt.retryIsLost && err != nil:
				t.Errorf("retry error = %v", err)
			case !tt.retryIsLost && retry != found:
				t.Errorf("retry = %+v, want the stored %+v", retry, found)
			}
			wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 2, Status: provider.StatusCharged, Amount: 1250})
		})
	}
}

func TestSlowChargeIsRecordedBeforeTheWait(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t, providersim.WithSlowDelay(time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Charge(ctx, charge("order-1", providersim.SourceSlow))
		done <- err
	}()
	for sim.Ledger().References["order-1"].Charges == 0 {
		select {
		case err := <-done:
			t.Fatalf("slow Charge returned early: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if got := mustLookup(t, c, "order-1"); got.Status != provider.StatusCharged {
		t.Errorf("Lookup during the wait = %+v, want charged", got)
	}
	select {
	case err := <-done:
		t.Fatalf("slow Charge returned before its delay: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, provider.ErrAmbiguous) {
		t.Errorf("cancelled slow Charge error = %v, want ErrAmbiguous", err)
	}
}

func TestFaultHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		header  http.Header
		source  string
		code    int // 0: the connection is dropped
		charges int
	}{
		{"unavailable", http.Header{providersim.HeaderFault: {providersim.FaultUnavailable}}, providersim.SourceVisa, http.StatusServiceUnavailable, 0},
		{"timeout", http.Header{providersim.HeaderFault: {providersim.FaultTimeout}}, providersim.SourceVisa, 0, 1},
		{"slow", http.Header{providersim.HeaderFault: {providersim.FaultSlow}, providersim.HeaderDelay: {"1ms"}}, providersim.SourceVisa, http.StatusOK, 1},
		{"header overrides source", http.Header{providersim.HeaderFault: {providersim.FaultUnavailable}}, providersim.SourceTimeout, http.StatusServiceUnavailable, 0},
		{"delay for tok_slow", http.Header{providersim.HeaderDelay: {"1ms"}}, providersim.SourceSlow, http.StatusOK, 1},
		{"unknown fault", http.Header{providersim.HeaderFault: {"explode"}}, providersim.SourceVisa, http.StatusBadRequest, 0},
		{"bad delay", http.Header{providersim.HeaderDelay: {"soon"}}, providersim.SourceSlow, http.StatusBadRequest, 0},
		{"negative delay", http.Header{providersim.HeaderDelay: {"-1s"}}, providersim.SourceSlow, http.StatusBadRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// An hour-long default delay fails the test by timeout if
			// Sim-Delay is ignored.
			sim, srv, _ := start(t, providersim.WithSlowDelay(time.Hour))
			code, h, _, err := post(t, srv, "/v1/charges", charge("order-1", tt.source), tt.header)
			switch {
			case tt.code == 0 && err == nil:
				t.Fatalf("got HTTP %d, want a dropped connection", code)
			case tt.code != 0 && err != nil:
				t.Fatalf("POST: %v", err)
			case code != tt.code:
				t.Fatalf("code = %d, want %d", code, tt.code)
			}
			if notProcessed := h.Get(provider.HeaderNotProcessed) == "true"; notProcessed != (code == http.StatusServiceUnavailable) {
				t.Errorf("%s header = %q with code %d", provider.HeaderNotProcessed, h.Get(provider.HeaderNotProcessed), code)
			}
			if got := sim.Ledger().References["order-1"]; got.Charges != tt.charges || got.Calls != 1 {
				t.Errorf("ledger = %+v, want %d charges, 1 call", got, tt.charges)
			}
		})
	}
}

func TestBadChargeRequests(t *testing.T) {
	t.Parallel()
	valid := charge("order-1", providersim.SourceVisa)
	with := func(edit func(*provider.ChargeRequest)) provider.ChargeRequest {
		r := valid
		edit(&r)
		return r
	}
	tests := []struct {
		name  string
		body  any
		calls int // counted against order-1
	}{
		{"malformed JSON", "not an object", 0},
		{"missing reference", with(func(r *provider.ChargeRequest) { r.Reference = "" }), 0},
		{"zero amount", with(func(r *provider.ChargeRequest) { r.Amount = 0 }), 1},
		{"negative amount", with(func(r *provider.ChargeRequest) { r.Amount = -5 }), 1},
		{"empty currency", with(func(r *provider.ChargeRequest) { r.Currency = "" }), 1},
		{"empty source", with(func(r *provider.ChargeRequest) { r.Source = "" }), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim, srv, _ := start(t)
			code, _, body, err := post(t, srv, "/v1/charges", tt.body, nil)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusBadRequest {
				t.Errorf("code = %d, want 400", code)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Errorf("body %s: want a JSON error message", body)
			}
			l := sim.Ledger()
			if l.TotalCharges != 0 || l.References["order-1"].Calls != tt.calls {
				t.Errorf("ledger = %+v, want no charges and %d calls for order-1", l, tt.calls)
			}
		})
	}
}

func TestDown(t *testing.T) {
	t.Parallel()
	sim, srv, c := start(t)
	mustCharge(t, c, charge("before", providersim.SourceVisa))
	sim.SetDown(true)

	if _, err := c.Charge(t.Context(), charge("during", providersim.SourceVisa)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Charge while down: error = %v, want ErrUnavailable", err)
	}
	if _, err := c.Charge(t.Context(), charge("timeout", providersim.SourceTimeoutOnce)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("tok_timeout_once while down: error = %v, want ErrUnavailable", err)
	}
	if _, err := c.Lookup(t.Context(), "before"); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Lookup while down: error = %v, want ErrUnavailable", err)
	}
	code, h, _ := get(t, srv, "/v1/charges/before", nil)
	if code != http.StatusServiceUnavailable || h.Get(provider.HeaderNotProcessed) != "true" {
		t.Errorf("raw lookup while down = %d, %s: %q", code, provider.HeaderNotProcessed, h.Get(provider.HeaderNotProcessed))
	}
	if l := sim.Ledger(); l.TotalCharges != 1 || l.References["during"].Calls != 1 {
		t.Errorf("ledger while down = %+v, want 1 charge and the call counted", l)
	}

	// Back up through the endpoint.
	code, _, body, err := post(t, srv, "/v1/faults", map[string]bool{"down": false}, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("POST /v1/faults = %d %s, %v", code, body, err)
	}
	if res := mustCharge(t, c, charge("during", providersim.SourceVisa)); res.Status != provider.StatusCharged {
		t.Errorf("Charge after recovery = %+v", res)
	}
	// The first call for this reference was swallowed by the outage, so the
	// once-only timeout does not fire again.
	if res := mustCharge(t, c, charge("timeout", providersim.SourceTimeoutOnce)); res.Status != provider.StatusCharged {
		t.Errorf("tok_timeout_once after recovery = %+v", res)
	}

	// And down again through the endpoint.
	if code, _, _, err := post(t, srv, "/v1/faults", map[string]bool{"down": true}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("POST /v1/faults = %d, %v", code, err)
	}
	if _, err := c.Charge(t.Context(), charge("after", providersim.SourceVisa)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Charge when down again: error = %v, want ErrUnavailable", err)
	}
	if code, _, _, _ := post(t, srv, "/v1/faults", map[string]string{"up": "yes"}, nil); code != http.StatusBadRequest {
		t.Errorf("POST /v1/faults without down = %d, want 400", code)
	}
}

func TestSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header string
		code   int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"not bearer", "Basic s3cret", http.StatusUnauthorized},
		{"right token", "Bearer s3cret", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim, srv, _ := start(t, providersim.WithSecret("s3cret"))
			authed := provider.NewClient(srv.URL, "s3cret", provider.WithHTTPClient(srv.Client()))
			mustCharge(t, authed, charge("order-1", providersim.SourceVisa))

			h := http.Header{}
			if tt.header != "" {
				h.Set("Authorization", tt.header)
			}
			if code, _, _ := get(t, srv, "/v1/charges/order-1", h); code != tt.code {
				t.Errorf("GET /v1/charges/order-1 = %d, want %d", code, tt.code)
			}
			// The simulator's own ledger takes no key.
			if code, _, _ := get(t, srv, "/v1/ledger", h); code != http.StatusOK {
				t.Errorf("GET /v1/ledger = %d, want 200", code)
			}
			code, _, _, err := post(t, srv, "/v1/charges", charge("order-2", providersim.SourceVisa), h)
			if err != nil || code != tt.code {
				t.Errorf("POST /v1/charges = %d, %v; want %d", code, err, tt.code)
			}
			wantCharges := 1
			if tt.code == http.StatusOK {
				wantCharges = 2
			}
			if got := sim.Ledger().TotalCharges; got != wantCharges {
				t.Errorf("total charges = %d, want %d", got, wantCharges)
			}
		})
	}
}

func TestLookupNotFound(t *testing.T) {
	t.Parallel()
	_, srv, c := start(t)
	code, _, body := get(t, srv, "/v1/charges/nobody", nil)
	if code != http.StatusNotFound || strings.TrimSpace(string(body)) != `{"status":"not_found"}` {
		t.Errorf("GET unknown = %d %s", code, body)
	}
	if res := mustLookup(t, c, "nobody"); res.Status != provider.StatusNotFound {
		t.Errorf("Lookup = %+v, want not_found", res)
	}
}

func TestLedgerEndpointMatchesMethod(t *testing.T) {
	t.Parallel()
	sim, srv, c := start(t)
	mustCharge(t, c, charge("charged", providersim.SourceVisa))
	mustCharge(t, c, charge("charged", providersim.SourceVisa))
	mustCharge(t, c, charge("declined", providersim.SourceDecline))
	_, _ = c.Charge(t.Context(), charge("unavailable", providersim.SourceUnavailable))

	code, _, body := get(t, srv, "/v1/ledger", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/ledger = %d", code)
	}
	var fromHTTP providersim.Ledger
	if err := json.Unmarshal(body, &fromHTTP); err != nil {
		t.Fatal(err)
	}
	want := providersim.Ledger{
		References: map[string]providersim.LedgerEntry{
			"charged":     {Charges: 1, Calls: 2, Status: provider.StatusCharged, Amount: 1250},
			"declined":    {Charges: 1, Calls: 1, Status: provider.StatusDeclined, Amount: 1250},
			"unavailable": {Charges: 0, Calls: 1, Status: provider.StatusNotFound},
		},
		TotalCharges: 2,
		TotalCalls:   4,
	}
	if got := withoutIDs(sim.Ledger()); !reflect.DeepEqual(got, want) {
		t.Errorf("Ledger() = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(withoutIDs(fromHTTP), want) {
		t.Errorf("GET /v1/ledger = %+v, want %+v", fromHTTP, want)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"references", "total_charges", "total_calls"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("ledger JSON %s lacks %q", body, key)
		}
	}
}

func TestEmptyLedgerHasEmptyReferences(t *testing.T) {
	t.Parallel()
	_, srv, _ := start(t)
	_, _, body := get(t, srv, "/v1/ledger", nil)
	if got := strings.TrimSpace(string(body)); got != `{"references":{},"total_charges":0,"total_calls":0}` {
		t.Errorf("empty ledger = %s", got)
	}
}

func TestConcurrentChargesOneReference(t *testing.T) {
	t.Parallel()
	const n = 64
	sim, _, c := start(t)
	release := make(chan struct{})
	results := make([]provider.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-release
			results[i], errs[i] = c.Charge(t.Context(), charge("order-1", providersim.SourceVisa))
		})
	}
	close(release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if results[i] != results[0] {
			t.Errorf("call %d = %+v, call 0 = %+v", i, results[i], results[0])
		}
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: n, Status: provider.StatusCharged, Amount: 1250})
}

func TestLogsNeverShowTheSource(t *testing.T) {
	t.Parallel()
	var buf testkit.LogBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	_, srv, c := start(t, providersim.WithLogger(logger))
	const secretSource = "tok_visa_4242424242424242"
	mustCharge(t, c, charge("order-1", secretSource))
	_, _, _, _ = post(t, srv, "/v1/charges", charge("order-2", secretSource), http.Header{providersim.HeaderFault: {"bogus"}})
	_, _, _, _ = post(t, srv, "/v1/charges", fmt.Sprintf(`{"reference":"x","source":%q`, secretSource), nil)

	logs := buf.String()
	if strings.Contains(logs, secretSource) {
		t.Errorf("logs show the source:\n%s", logs)
	}
	for _, want := range []string{`"reference":"order-1"`, `"outcome":"created"`, `"method":"POST"`, `"path":"/v1/charges"`, `"outcome":"rejected"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

// TestLateChargeLandsAfterNotFound: tok_late_once is a provider whose
// edge gives up while its backend goes on: the first call is closed
// unanswered, lookups say not_found and retries 409 until the charge
// lands, and then it is the reference's one result.
func TestLateChargeLandsAfterNotFound(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	req := charge("order-1", providersim.SourceLateOnce)
	if _, err := c.Charge(t.Context(), req); !errors.Is(err, provider.ErrAmbiguous) {
		t.Fatalf("Charge error = %v, want ErrAmbiguous", err)
	}
	if got := mustLookup(t, c, "order-1"); got.Status != provider.StatusNotFound {
		t.Fatalf("Lookup before landing = %+v, want not_found", got)
	}
	if _, err := c.Charge(t.Context(), req); !errors.Is(err, provider.ErrAmbiguous) {
		t.Fatalf("retry while pending: %v, want ErrAmbiguous (409)", err)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Calls: 2, Status: provider.StatusNotFound, Pending: true})
	if n := sim.Land(); n != 1 {
		t.Fatalf("Land = %d, want 1", n)
	}
	found := mustLookup(t, c, "order-1")
	if found.Status != provider.StatusCharged {
		t.Fatalf("Lookup after landing = %+v, want charged", found)
	}
	if retry, err := c.Charge(t.Context(), req); err != nil || retry != found {
		t.Fatalf("retry after landing = %+v, %v; want the landed %+v", retry, err, found)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 3, Status: provider.StatusCharged, Amount: 1250})
}

func refund(ref, chargeID string, amount int64) provider.RefundRequest {
	return provider.RefundRequest{Reference: ref, Charge: chargeID, Amount: amount, Currency: "EUR"}
}

var refundID = regexp.MustCompile(`^rf_[0-9a-f]{16}$`)

// TestRefundDeduplicatesByReference: a refund sent again answers the first
// result and refunds nothing more; the ledger shows one refund, under the
// charge it refunded.
func TestRefundDeduplicatesByReference(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	charged := mustCharge(t, c, charge("order-1", providersim.SourceVisa))
	first, err := c.Refund(t.Context(), refund("refund-1", charged.ChargeID, 500))
	if err != nil || first.Status != provider.StatusRefunded || !refundID.MatchString(first.ChargeID) || first.Reference != "refund-1" {
		t.Fatalf("Refund = %+v, %v", first, err)
	}
	if again, err := c.Refund(t.Context(), refund("refund-1", charged.ChargeID, 500)); err != nil || again != first {
		t.Fatalf("Refund sent again = %+v, %v; the first %+v", again, err, first)
	}
	if found, err := c.LookupRefund(t.Context(), refund("refund-1", "", 0)); err != nil || found != first {
		t.Fatalf("LookupRefund = %+v, %v; the refund %+v", found, err, first)
	}
	l := sim.Ledger()
	want := map[string]providersim.LedgerRefund{"refund-1": {Refunds: 1, Calls: 2, Charge: "order-1", ChargeID: charged.ChargeID, ID: first.ChargeID, Amount: 500}}
	if got := l.RefundsOf("order-1"); !reflect.DeepEqual(got, want) {
		t.Errorf("refunds of order-1 = %+v, want %+v", got, want)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusCharged, Amount: 1250, Refunded: 500})
}

// TestRefundsNeverExceedTheCharge: partial refunds under their own
// references add up to the charge, and one more cent is refused with
// nothing refunded.
func TestRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	charged := mustCharge(t, c, charge("order-1", providersim.SourceVisa))
	if _, err := c.Refund(t.Context(), refund("too-much", charged.ChargeID, 1251)); !errors.Is(err, provider.ErrRejected) {
		t.Fatalf("a refund beyond the charge: %v, want ErrRejected", err)
	}
	for _, r := range []provider.RefundRequest{refund("part-1", charged.ChargeID, 1000), refund("part-2", charged.ChargeID, 250)} {
		if res, err := c.Refund(t.Context(), r); err != nil || res.Status != provider.StatusRefunded {
			t.Fatalf("Refund(%s) = %+v, %v", r.Reference, res, err)
		}
	}
	if _, err := c.Refund(t.Context(), refund("one-more", charged.ChargeID, 1)); !errors.Is(err, provider.ErrRejected) {
		t.Fatalf("a refund of a fully refunded charge: %v, want ErrRejected", err)
	}
	l := sim.Ledger()
	if e := l.References["order-1"]; e.Refunded != 1250 {
		t.Errorf("refunded %d of the charge, want 1250", e.Refunded)
	}
	for _, ref := range []string{"too-much", "one-more"} {
		if e := l.Refunds[ref]; e != (providersim.LedgerRefund{Calls: 1}) {
			t.Errorf("ledger of %s = %+v, want one call that refunded nothing", ref, e)
		}
		if res, err := c.LookupRefund(t.Context(), refund(ref, "", 0)); err != nil || res.Status != provider.StatusNotFound {
			t.Errorf("LookupRefund(%s) = %+v, %v; want not_found", ref, res, err)
		}
	}
}

// TestRefundRefusals: every refusal is a 4xx and refunds nothing.
func TestRefundRefusals(t *testing.T) {
	t.Parallel()
	sim, srv, c := start(t)
	charged := mustCharge(t, c, charge("order-1", providersim.SourceVisa))
	declined := mustCharge(t, c, charge("order-2", providersim.SourceDecline))
	if _, err := c.Refund(t.Context(), refund("used", charged.ChargeID, 100)); err != nil {
		t.Fatal(err)
	}
	dollars := refund("dollars", charged.ChargeID, 100)
	dollars.Currency = "USD"
	tests := []struct {
		name string
		body any
		code int
	}{
		{"malformed JSON", "not an object", http.StatusBadRequest},
		{"no reference", refund("", charged.ChargeID, 100), http.StatusBadRequest},
		{"no charge", refund("r-1", "", 100), http.StatusBadRequest},
		{"zero amount", refund("r-2", charged.ChargeID, 0), http.StatusBadRequest},
		{"no currency", provider.RefundRequest{Reference: "r-3", Charge: charged.ChargeID, Amount: 100}, http.StatusBadRequest},
		{"unknown charge", refund("r-4", "pc_0000000000000000", 100), http.StatusNotFound},
		{"declined charge", refund("r-5", declined.ChargeID, 100), http.StatusBadRequest},
		{"other currency", dollars, http.StatusBadRequest},
		{"reference used for another refund", refund("used", charged.ChargeID, 200), http.StatusUnprocessableEntity},
	}
	for _, tt := range tests {
		code, _, body, err := post(t, srv, "/v1/refunds", tt.body, nil)
		var e struct{ Error string }
		if err != nil || code != tt.code || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, %v; want %d with a JSON error message", tt.name, code, body, err, tt.code)
		}
	}
	if e := sim.Ledger().References["order-1"]; e.Refunded != 100 {
		t.Errorf("refunded %d of the charge, want the 100 of the first refund alone", e.Refunded)
	}
}

// TestRefundFaults: while down or under Sim-Fault unavailable nothing is
// refunded; under Sim-Fault timeout the refund is made and its answer lost.
func TestRefundFaults(t *testing.T) {
	t.Parallel()
	sim, srv, c := start(t)
	charged := mustCharge(t, c, charge("order-1", providersim.SourceVisa))
	sim.SetDown(true)
	if _, err := c.Refund(t.Context(), refund("during", charged.ChargeID, 100)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Refund while down: %v, want ErrUnavailable", err)
	}
	if _, err := c.LookupRefund(t.Context(), refund("during", "", 0)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("LookupRefund while down: %v, want ErrUnavailable", err)
	}
	sim.SetDown(false)
	header := func(fault string) http.Header { return http.Header{providersim.HeaderFault: {fault}} }
	if code, h, _, err := post(t, srv, "/v1/refunds", refund("unavailable", charged.ChargeID, 100), header(providersim.FaultUnavailable)); err != nil ||
		code != http.StatusServiceUnavailable || h.Get(provider.HeaderNotProcessed) != "true" {
		t.Errorf("Sim-Fault unavailable = %d, %v", code, err)
	}
	if code, _, _, err := post(t, srv, "/v1/refunds", refund("timeout", charged.ChargeID, 100), header(providersim.FaultTimeout)); err == nil {
		t.Errorf("Sim-Fault timeout answered %d, want a dropped connection", code)
	}
	l := sim.Ledger()
	for ref, want := range map[string]int{"during": 0, "unavailable": 0, "timeout": 1} {
		if e := l.Refunds[ref]; e.Refunds != want || e.Calls != 1 {
			t.Errorf("ledger of %s = %+v, want %d refunds in 1 call", ref, e, want)
		}
	}
	if res, err := c.LookupRefund(t.Context(), refund("timeout", "", 0)); err != nil || res.Status != provider.StatusRefunded {
		t.Errorf("LookupRefund after a lost answer = %+v, %v", res, err)
	}
}

// TestRefundsNeedTheSecret as charges do.
func TestRefundsNeedTheSecret(t *testing.T) {
	t.Parallel()
	sim, srv, _ := start(t, providersim.WithSecret("s3cret"))
	authed := provider.NewClient(srv.URL, "s3cret", provider.WithHTTPClient(srv.Client()))
	charged := mustCharge(t, authed, charge("order-1", providersim.SourceVisa))
	wrong := http.Header{"Authorization": {"Bearer nope"}}
	if code, _, _, err := post(t, srv, "/v1/refunds", refund("r-1", charged.ChargeID, 100), wrong); err != nil || code != http.StatusUnauthorized {
		t.Errorf("POST /v1/refunds with a wrong token = %d, %v; want 401", code, err)
	}
	if code, _, _ := get(t, srv, "/v1/refunds/r-1", wrong); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/refunds/r-1 with a wrong token = %d, want 401", code)
	}
	if e := sim.Ledger().References["order-1"]; e.Refunded != 0 {
		t.Errorf("refunded %d, want nothing", e.Refunded)
	}
	if res, err := authed.Refund(t.Context(), refund("r-1", charged.ChargeID, 100)); err != nil || res.Status != provider.StatusRefunded {
		t.Errorf("Refund with the secret = %+v, %v", res, err)
	}
}

// authorize makes an authorize-only charge of 1250 under ref and returns
// its id.
func authorize(t *testing.T, c *provider.Client, ref string) string {
	t.Helper()
	req := charge(ref, providersim.SourceVisa)
	req.AuthorizeOnly = true
	res := mustCharge(t, c, req)
	if res.Status != provider.StatusAuthorized || !chargeID.MatchString(res.ChargeID) {
		t.Fatalf("authorize %s = %+v, want authorized with an id", ref, res)
	}
	return res.ChargeID
}

func payment(ref, id string, amount int64) provider.PaymentRequest {
	return provider.PaymentRequest{Reference: ref, Charge: id, Amount: amount}
}

// TestCaptureOnceWhateverTheReference: a capture sent again answers its
// first result; one under another reference answers the charge's state.
// Either way the authorization is captured once, and a cancel after it
// cancels nothing.
func TestCaptureOnceWhateverTheReference(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	id := authorize(t, c, "order-1")
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250, Authorized: 1250})
	want := provider.Result{Status: provider.StatusCharged, Reference: "cap-1", ChargeID: id, Amount: 1000}
	for i := range 2 {
		if res, err := c.Capture(t.Context(), payment("cap-1", id, 1000)); err != nil || res != want {
			t.Fatalf("capture %d = %+v, %v; want %+v", i+1, res, err, want)
		}
	}
	want.Reference = "cap-2"
	if res, err := c.Capture(t.Context(), payment("cap-2", id, 0)); err != nil || res != want {
		t.Fatalf("capture under another reference = %+v, %v; want %+v", res, err, want)
	}
	want.Reference = "cancel-1"
	if res, err := c.Cancel(t.Context(), payment("cancel-1", id, 0)); err != nil || res != want {
		t.Fatalf("cancel after the capture = %+v, %v; want %+v", res, err, want)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250,
		Authorized: 1250, Captures: 1, Captured: 1000})
	if res, err := c.State(t.Context(), id); err != nil || res != (provider.Result{Status: provider.StatusCharged, Reference: "order-1", ChargeID: id, Amount: 1000}) {
		t.Errorf("State = %+v, %v", res, err)
	}
	// The lookup answers the charge's first result, as a charge sent again does.
	if res := mustLookup(t, c, "order-1"); res.Status != provider.StatusAuthorized || res.ChargeID != id {
		t.Errorf("Lookup = %+v, want the authorization", res)
	}
}

// TestCancelOnceAndCaptureAfterItCapturesNothing.
func TestCancelOnceAndCaptureAfterItCapturesNothing(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	id := authorize(t, c, "order-1")
	for _, ref := range []string{"cancel-1", "cancel-1", "cancel-2"} {
		want := provider.Result{Status: provider.StatusCanceled, Reference: ref, ChargeID: id}
		if res, err := c.Cancel(t.Context(), payment(ref, id, 0)); err != nil || res != want {
			t.Fatalf("cancel %s = %+v, %v; want %+v", ref, res, err, want)
		}
	}
	if res, err := c.Capture(t.Context(), payment("cap-1", id, 0)); err != nil || res.Status != provider.StatusCanceled {
		t.Fatalf("capture after the cancel = %+v, %v; want canceled", res, err)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250, Authorized: 1250, Canceled: true})
	if res, err := c.State(t.Context(), id); err != nil || res.Status != provider.StatusCanceled || res.Amount != 0 {
		t.Errorf("State = %+v, %v; want canceled", res, err)
	}
	if _, err := c.Refund(t.Context(), refund("r-1", id, 100)); !errors.Is(err, provider.ErrRejected) {
		t.Errorf("refund of a canceled authorization: %v, want ErrRejected", err)
	}
}

// TestAuthorizationExpiresAfterTheTTL on the simulator's clock, and at
// once through the expiry endpoint.
func TestAuthorizationExpiresAfterTheTTL(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sim, srv, c := start(t, providersim.WithClock(clock.Now), providersim.WithAuthorizationTTL(time.Hour))
	id := authorize(t, c, "order-1")
	clock.Advance(time.Hour - time.Nanosecond)
	if res, err := c.State(t.Context(), id); err != nil || res != (provider.Result{Status: provider.StatusAuthorized, Reference: "order-1", ChargeID: id, Amount: 1250}) {
		t.Fatalf("State before the TTL = %+v, %v", res, err)
	}
	clock.Advance(time.Nanosecond)
	if res, err := c.Capture(t.Context(), payment("cap-1", id, 0)); err != nil || res.Status != provider.StatusCanceled {
		t.Fatalf("capture after the TTL = %+v, %v; want canceled", res, err)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250, Authorized: 1250, Canceled: true})

	other := authorize(t, c, "order-2")
	code, _, body, err := post(t, srv, "/v1/authorizations/"+other+"/expire", nil, nil)
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"expired":true`) {
		t.Fatalf("POST expire = %d %s, %v", code, body, err)
	}
	if res, err := c.State(t.Context(), other); err != nil || res.Status != provider.StatusCanceled {
		t.Errorf("State after the expiry = %+v, %v; want canceled", res, err)
	}
	if sim.Expire(other) {
		t.Error("Expire of an ended authorization reports it ended it")
	}
}

// TestPaymentRefusals change nothing and save nothing under the reference.
func TestPaymentRefusals(t *testing.T) {
	t.Parallel()
	sim, _, c := start(t)
	id := authorize(t, c, "order-1")
	declined := mustCharge(t, c, charge("declined", providersim.SourceDecline))
	captured := mustCharge(t, c, charge("captured", providersim.SourceVisa))
	tests := []struct {
		name string
		call func() (provider.Result, error)
	}{
		{"beyond the amount authorized", func() (provider.Result, error) { return c.Capture(t.Context(), payment("cap-over", id, 1251)) }},
		{"capture of an unknown charge", func() (provider.Result, error) { return c.Capture(t.Context(), payment("cap-x", "pc_unknown", 0)) }},
		{"cancel of an unknown charge", func() (provider.Result, error) { return c.Cancel(t.Context(), payment("cancel-x", "pc_unknown", 0)) }},
		{"capture of a declined charge", func() (provider.Result, error) { return c.Capture(t.Context(), payment("cap-d", declined.ChargeID, 0)) }},
		{"cancel of a declined charge", func() (provider.Result, error) {
			return c.Cancel(t.Context(), payment("cancel-d", declined.ChargeID, 0))
		}},
	}
	for _, tt := range tests {
		if res, err := tt.call(); !errors.Is(err, provider.ErrRejected) {
			t.Errorf("%s = %+v, %v; want ErrRejected", tt.name, res, err)
		}
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250, Authorized: 1250})
	// Refused, the reference is free; answered, it is not.
	if res, err := c.Capture(t.Context(), payment("cap-over", id, 1250)); err != nil || res.Amount != 1250 {
		t.Fatalf("capture after the refusal = %+v, %v", res, err)
	}
	for name, req := range map[string]provider.PaymentRequest{
		"another amount": payment("cap-over", id, 1000), "another charge": payment("cap-over", captured.ChargeID, 1250),
	} {
		if _, err := c.Capture(t.Context(), req); !errors.Is(err, provider.ErrRejected) {
			t.Errorf("the reference reused for %s: %v, want ErrRejected", name, err)
		}
	}
	if _, err := c.Cancel(t.Context(), payment("cap-over", id, 0)); !errors.Is(err, provider.ErrRejected) {
		t.Errorf("the reference reused for a cancel: %v, want ErrRejected", err)
	}
	// A charge captured at once is captured: a capture or cancel answers so.
	for _, call := range []func(context.Context, provider.PaymentRequest) (provider.Result, error){c.Capture, c.Cancel} {
		if res, err := call(t.Context(), payment(fmt.Sprintf("op-%p", call), captured.ChargeID, 0)); err != nil || res.Status != provider.StatusCharged || res.Amount != 1250 {
			t.Errorf("capture or cancel of a charge = %+v, %v; want charged 1250", res, err)
		}
	}
	if res, err := c.State(t.Context(), "pc_unknown"); err != nil || res.Status != provider.StatusNotFound {
		t.Errorf("State of an unknown charge = %+v, %v", res, err)
	}
	if res, err := c.State(t.Context(), declined.ChargeID); err != nil || res.Status != provider.StatusDeclined {
		t.Errorf("State of a declined charge = %+v, %v", res, err)
	}
}

// TestPaymentFaults: while down or under Sim-Fault unavailable nothing is
// captured or canceled; under Sim-Fault timeout the capture is made and
// its answer lost, and a capture sent again answers it.
func TestPaymentFaults(t *testing.T) {
	t.Parallel()
	sim, srv, c := start(t)
	id := authorize(t, c, "order-1")
	sim.SetDown(true)
	if _, err := c.Capture(t.Context(), payment("during", id, 0)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Capture while down: %v, want ErrUnavailable", err)
	}
	if _, err := c.Cancel(t.Context(), payment("during-cancel", id, 0)); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Cancel while down: %v, want ErrUnavailable", err)
	}
	if _, err := c.State(t.Context(), id); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("State while down: %v, want ErrUnavailable", err)
	}
	sim.SetDown(false)
	header := func(fault string) http.Header { return http.Header{providersim.HeaderFault: {fault}} }
	path := "/v1/payments/" + id
	if code, h, _, err := post(t, srv, path+"/cancel", map[string]any{"reference": "unavailable"}, header(providersim.FaultUnavailable)); err != nil ||
		code != http.StatusServiceUnavailable || h.Get(provider.HeaderNotProcessed) != "true" {
		t.Errorf("Sim-Fault unavailable = %d, %v", code, err)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250, Authorized: 1250})
	if code, _, _, err := post(t, srv, path+"/capture", map[string]any{"reference": "timeout", "amount": 700}, header(providersim.FaultTimeout)); err == nil {
		t.Errorf("Sim-Fault timeout answered %d, want a dropped connection", code)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250,
		Authorized: 1250, Captures: 1, Captured: 700})
	if res, err := c.Capture(t.Context(), payment("timeout", id, 700)); err != nil || res.Status != provider.StatusCharged || res.Amount != 700 {
		t.Errorf("the capture sent again = %+v, %v; want charged 700", res, err)
	}
}

// TestPaymentsNeedTheSecret as charges do; the expiry endpoint, the
// simulator's own, does not.
func TestPaymentsNeedTheSecret(t *testing.T) {
	t.Parallel()
	sim, srv, _ := start(t, providersim.WithSecret("s3cret"))
	authed := provider.NewClient(srv.URL, "s3cret", provider.WithHTTPClient(srv.Client()))
	id := authorize(t, authed, "order-1")
	wrong := http.Header{"Authorization": {"Bearer nope"}}
	for _, op := range []string{"capture", "cancel"} {
		if code, _, _, err := post(t, srv, "/v1/payments/"+id+"/"+op, map[string]any{"reference": "r-1"}, wrong); err != nil || code != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong token = %d, %v; want 401", op, code, err)
		}
	}
	if code, _, _ := get(t, srv, "/v1/payments/"+id, wrong); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/payments/{id} with a wrong token = %d, want 401", code)
	}
	wantEntry(t, sim, "order-1", providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusAuthorized, Amount: 1250, Authorized: 1250})
	if code, _, _, err := post(t, srv, "/v1/authorizations/"+id+"/expire", nil, nil); err != nil || code != http.StatusOK {
		t.Errorf("POST expire without a token = %d, %v; want 200", code, err)
	}
}
