package provider_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/providertest"
)

// secretSource stands for a real card source, which must never leak.
const secretSource = "tok_visa_4242424242424242"

var sentinels = []error{provider.ErrUnavailable, provider.ErrAmbiguous, provider.ErrRejected}

// wantKind checks that err wraps want and none of the other sentinels, and
// that it does not reveal the source.
func wantKind(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want %v", want)
	}
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%v, %v) = %v", err, s, got)
		}
	}
	if strings.Contains(err.Error(), secretSource) {
		t.Errorf("error reveals the source: %v", err)
	}
}

func request(ref string) provider.ChargeRequest {
	return provider.ChargeRequest{Reference: ref, Amount: 1250, Currency: "EUR", Source: secretSource}
}

// counting serves h and counts the requests it receives.
func counting(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func status(code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"error":"nope"}`)
	}
}

func body(code int, s string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, s)
	}
}

func drop(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// closedURL is the address of a server that no longer listens.
func closedURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

// TestErrorClassification: a charge's answers, a refund's, a capture's
// and a cancel's read the same way, but for a result, which must be one
// of the request's kind.
func TestErrorClassification(t *testing.T) {
	t.Parallel()
	ops := map[string]func(context.Context, *provider.Client) (provider.Result, error){
		"charge": func(ctx context.Context, c *provider.Client) (provider.Result, error) {
			return c.Charge(ctx, request("order-1"))
		},
		"refund": func(ctx context.Context, c *provider.Client) (provider.Result, error) {
			return c.Refund(ctx, refundRequest("order-1"))
		},
		"capture": func(ctx context.Context, c *provider.Client) (provider.Result, error) {
			return c.Capture(ctx, paymentRequest("order-1"))
		},
		"cancel": func(ctx context.Context, c *provider.Client) (provider.Result, error) {
			return c.Cancel(ctx, paymentRequest("order-1"))
		},
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
		only    string // the ops the row is for, space-separated; empty for all
	}{
		{"503 not processed", status(http.StatusServiceUnavailable, provider.HeaderNotProcessed, "true"), provider.ErrUnavailable, ""},
		{"503 not processed, any case", status(http.StatusServiceUnavailable, provider.HeaderNotProcessed, " TRUE "), provider.ErrUnavailable, ""},
		{"429", status(http.StatusTooManyRequests), provider.ErrUnavailable, ""},
		{"503 without the signal", status(http.StatusServiceUnavailable), provider.ErrAmbiguous, ""},
		{"503 with a false signal", status(http.StatusServiceUnavailable, provider.HeaderNotProcessed, "false"), provider.ErrAmbiguous, ""},
		{"500", status(http.StatusInternalServerError), provider.ErrAmbiguous, ""},
		{"502", status(http.StatusBadGateway), provider.ErrAmbiguous, ""},
		{"504", status(http.StatusGatewayTimeout), provider.ErrAmbiguous, ""},
		{"409 in flight", status(http.StatusConflict), provider.ErrAmbiguous, ""},
		{"202", status(http.StatusAccepted), provider.ErrAmbiguous, ""},
		{"dropped connection", drop, provider.ErrAmbiguous, ""},
		{"200 not JSON", body(http.StatusOK, "<html>"), provider.ErrAmbiguous, ""},
		{"200 unknown status", body(http.StatusOK, `{"id":"pc_1","reference":"order-1","status":"pending"}`), provider.ErrAmbiguous, ""},
		{"200 other reference", body(http.StatusOK, `{"id":"pc_1","reference":"order-2","status":"charged"}`), provider.ErrAmbiguous, ""},
		{"200 charged without id", body(http.StatusOK, `{"reference":"order-1","status":"charged"}`), provider.ErrAmbiguous, ""},
		{"200 not_found", body(http.StatusOK, `{"status":"not_found"}`), provider.ErrAmbiguous, ""},
		{"400", status(http.StatusBadRequest), provider.ErrRejected, ""},
		{"401", status(http.StatusUnauthorized), provider.ErrRejected, ""},
		{"404", status(http.StatusNotFound), provider.ErrRejected, ""},
		{"422", status(http.StatusUnprocessableEntity), provider.ErrRejected, ""},
		{"200 refunded without id", body(http.StatusOK, `{"reference":"order-1","status":"refunded"}`), provider.ErrAmbiguous, "refund"},
		{"200 charged", body(http.StatusOK, `{"id":"pc_1","reference":"order-1","status":"charged"}`), provider.ErrAmbiguous, "refund capture cancel"},
		{"200 refunded", body(http.StatusOK, `{"id":"rf_1","reference":"order-1","status":"refunded"}`), provider.ErrAmbiguous, "charge capture cancel"},
		{"200 authorized", body(http.StatusOK, `{"id":"pc_1","reference":"order-1","status":"authorized"}`), provider.ErrAmbiguous, ""},
		{"200 canceled without id", body(http.StatusOK, `{"reference":"order-1","status":"canceled"}`), provider.ErrAmbiguous, ""},
		{"200 another charge charged", body(http.StatusOK, `{"id":"pc_other","reference":"order-1","status":"charged","amount":1}`), provider.ErrAmbiguous, "capture"},
		{"200 another charge canceled", body(http.StatusOK, `{"id":"pc_other","reference":"order-1","status":"canceled"}`), provider.ErrAmbiguous, "cancel"},
	}
	for _, tt := range tests {
		for op, call := range ops {
			if tt.only != "" && !slices.Contains(strings.Fields(tt.only), op) {
				continue
			}
			t.Run(op+" "+tt.name, func(t *testing.T) {
				t.Parallel()
				srv, hits := counting(t, tt.handler)
				c := provider.NewClient(srv.URL, "", provider.WithHTTPClient(srv.Client()))
				res, err := call(t.Context(), c)
				wantKind(t, err, tt.want)
				if res != (provider.Result{}) {
					t.Errorf("result = %+v alongside an error", res)
				}
				if !strings.Contains(err.Error(), op+" order-1") {
					t.Errorf("error does not name the %s's reference: %v", op, err)
				}
				if n := hits.Load(); n != 1 {
					t.Errorf("provider received %d requests, want exactly 1 (no retries)", n)
				}
			})
		}
	}
}

func TestChargeStatusErrorIsVisible(t *testing.T) {
	t.Parallel()
	srv, _ := counting(t, status(http.StatusBadGateway))
	_, err := provider.NewClient(srv.URL, "").Charge(t.Context(), request("order-1"))
	var se *provider.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadGateway {
		t.Errorf("errors.As(%v, *StatusError) = %v, want status 502", err, se)
	}
}

func TestChargeConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	c := provider.NewClient(closedURL(t), "")
	_, err := c.Charge(t.Context(), request("order-1"))
	wantKind(t, err, provider.ErrUnavailable)
}

// TestChargeDroppedOnReusedConnectionIsAmbiguous: the provider executes a
// charge sent on a kept-alive connection that then drops without an
// answer, and the provider stops listening. Go's transport does not
// re-send a POST without an Idempotency-Key, so no dial follows; the
// charge may have happened either way.
func TestChargeDroppedOnReusedConnectionIsAmbiguous(t *testing.T) {
	t.Parallel()
	sim := providersim.New()
	var posts atomic.Int32
	srv := providertest.DropServer(t, sim, func(r *http.Request) bool {
		return r.Method == http.MethodPost && posts.Add(1) == 2
	})
	c := provider.NewClient(srv.URL, "", provider.WithHTTPClient(srv.Client()))
	// The first charge leaves its connection in the client's pool.
	if _, err := c.Charge(t.Context(), request("order-0")); err != nil {
		t.Fatal(err)
	}
	_, err := c.Charge(t.Context(), request("order-1"))
	wantKind(t, err, provider.ErrAmbiguous)
	if e := sim.Ledger().References["order-1"]; e.Charges != 1 || e.Calls != 1 {
		t.Errorf("ledger = %+v, want the dropped request executed once", e)
	}
}

// TestChargeUntracedTransportErrorIsAmbiguous: a transport that reports
// no attempt to get a connection proves nothing about what it sent, even
// when it fails with a dial error.
func TestChargeUntracedTransportErrorIsAmbiguous(t *testing.T) {
	t.Parallel()
	hc := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	})}
	_, err := provider.NewClient("http://provider.invalid", "", provider.WithHTTPClient(hc)).Charge(t.Context(), request("order-1"))
	wantKind(t, err, provider.ErrAmbiguous)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestChargeNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			t.Parallel()
			var elsewhere atomic.Int32
			srv, hits := counting(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					elsewhere.Add(1)
					_, _ = io.WriteString(w, `{"id":"pc_1","reference":"order-1","status":"charged"}`)
					return
				}
				http.Redirect(w, r, "/elsewhere", code)
			})
			hc := srv.Client()
			c := provider.NewClient(srv.URL, "", provider.WithHTTPClient(hc))
			_, err := c.Charge(t.Context(), request("order-1"))
			wantKind(t, err, provider.ErrAmbiguous)
			if n := hits.Load(); n != 1 || elsewhere.Load() != 0 {
				t.Errorf("provider received %d requests (%d redirected), want 1 and none redirected", n, elsewhere.Load())
			}
			if hc.CheckRedirect != nil {
				t.Error("NewClient modified the caller's http.Client")
			}
		})
	}
}

func TestChargeRequestShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, secret, auth string
		prefix             string
	}{
		{"no secret", "", "", ""},
		{"secret", "s3cret", "Bearer s3cret", ""},
		{"base URL with path and slash", "", "", "/api/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			type seen struct {
				method, path, auth, contentType string
				body                            map[string]any
			}
			got := make(chan seen, 1)
			srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
				s := seen{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"), contentType: r.Header.Get("Content-Type")}
				if err := json.NewDecoder(r.Body).Decode(&s.body); err != nil {
					t.Errorf("decode body: %v", err)
				}
				got <- s
				_, _ = io.WriteString(w, `{"id":"pc_0123456789abcdef","reference":"order-1","status":"charged"}`)
			})
			c := provider.NewClient(srv.URL+tt.prefix, tt.secret)
			res, err := c.Charge(t.Context(), request("order-1"))
			if err != nil {
				t.Fatal(err)
			}
			want := provider.Result{Status: provider.StatusCharged, Reference: "order-1", ChargeID: "pc_0123456789abcdef"}
			if res != want {
				t.Errorf("Charge = %+v, want %+v", res, want)
			}
			s := <-got
			wantPath := strings.TrimSuffix(tt.prefix, "/") + "/v1/charges"
			if s.method != http.MethodPost || s.path != wantPath || s.auth != tt.auth || s.contentType != "application/json" {
				t.Errorf("request = %s %s, Authorization %q, Content-Type %q; want POST %s, %q, application/json",
					s.method, s.path, s.auth, s.contentType, wantPath, tt.auth)
			}
			wantBody := map[string]any{"reference": "order-1", "amount": 1250.0, "currency": "EUR", "source": secretSource}
			if fmt.Sprint(s.body) != fmt.Sprint(wantBody) {
				t.Errorf("body = %v, want %v", s.body, wantBody)
			}
		})
	}
}

func TestChargeDeclinedIsNotAnError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(providersim.New())
	t.Cleanup(srv.Close)
	c := provider.NewClient(srv.URL, "")
	req := request("order-1")
	req.Source = providersim.SourceDecline
	res, err := c.Charge(t.Context(), req)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if res.Status != provider.StatusDeclined || res.DeclineCode != providersim.DeclineCode {
		t.Errorf("Charge = %+v, want declined with %s", res, providersim.DeclineCode)
	}
}

func TestChargeRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		req     provider.ChargeRequest
		baseURL string // empty: the counting server
		want    error
	}{
		{"empty reference", t.Context(), request(""), "", provider.ErrRejected},
		{"cancelled context", cancelled, request("order-1"), "", provider.ErrUnavailable},
		{"invalid base URL", t.Context(), request("order-1"), "http://bad host", provider.ErrRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, hits := counting(t, status(http.StatusOK))
			baseURL := cmp.Or(tt.baseURL, srv.URL)
			_, err := provider.NewClient(baseURL, "").Charge(tt.ctx, tt.req)
			wantKind(t, err, tt.want)
			if n := hits.Load(); n != 0 {
				t.Errorf("provider received %d requests, want none", n)
			}
		})
	}
}

func TestChargeTimeoutDuringSlowChargeIsAmbiguous(t *testing.T) {
	t.Parallel()
	sim := providersim.New(providersim.WithSlowDelay(time.Hour))
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	c := provider.NewClient(srv.URL, "", provider.WithHTTPClient(srv.Client()), provider.WithTimeout(50*time.Millisecond))
	req := request("order-1")
	req.Source = providersim.SourceSlow

	start := time.Now()
	_, err := c.Charge(t.Context(), req)
	wantKind(t, err, provider.ErrAmbiguous)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want the deadline as its cause", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Charge took %s with a 50ms timeout", elapsed)
	}

	// The request reached the provider, which charged it before waiting;
	// the server may still be catching up with a request it read late.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := c.Lookup(t.Context(), "order-1")
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		if res.Status == provider.StatusCharged {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lookup = %+v, want charged", res)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := sim.Ledger().References["order-1"]; e.Charges != 1 || e.Calls != 1 {
		t.Errorf("ledger = %+v, want one charge from one call", e)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    provider.Result
		wantErr bool // always ErrUnavailable
	}{
		{"charged", body(http.StatusOK, `{"id":"pc_1","reference":"order-1","status":"charged"}`),
			provider.Result{Status: provider.StatusCharged, Reference: "order-1", ChargeID: "pc_1"}, false},
		{"declined", body(http.StatusOK, `{"id":"pc_2","reference":"order-1","status":"declined","decline_code":"card_declined"}`),
			provider.Result{Status: provider.StatusDeclined, Reference: "order-1", ChargeID: "pc_2", DeclineCode: "card_declined"}, false},
		{"not found", body(http.StatusNotFound, `{"status":"not_found"}`),
			provider.Result{Status: provider.StatusNotFound, Reference: "order-1"}, false},
		{"bare 404", body(http.StatusNotFound, "404 page not found"), provider.Result{}, true},
		{"200 not_found", body(http.StatusOK, `{"status":"not_found"}`), provider.Result{}, true},
		{"other reference", body(http.StatusOK, `{"id":"pc_1","reference":"order-2","status":"charged"}`), provider.Result{}, true},
		{"500", status(http.StatusInternalServerError), provider.Result{}, true},
		{"503 not processed", status(http.StatusServiceUnavailable, provider.HeaderNotProcessed, "true"), provider.Result{}, true},
		{"401", status(http.StatusUnauthorized), provider.Result{}, true},
		{"dropped connection", drop, provider.Result{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/v1/charges/order-1" {
					t.Errorf("request = %s %s, want GET /v1/charges/order-1", r.Method, r.URL.Path)
				}
				tt.handler(w, r)
			})
			res, err := provider.NewClient(srv.URL, "").Lookup(t.Context(), "order-1")
			if tt.wantErr {
				wantKind(t, err, provider.ErrUnavailable)
				return
			}
			if err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			if res != tt.want {
				t.Errorf("Lookup = %+v, want %+v", res, tt.want)
			}
		})
	}
}

func TestLookupFailsUnavailable(t *testing.T) {
	t.Parallel()
	srv, hits := counting(t, status(http.StatusOK))
	tests := []struct {
		name, baseURL, ref string
	}{
		{"connection refused", closedURL(t), "order-1"},
		{"empty reference", srv.URL, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := provider.NewClient(tt.baseURL, "").Lookup(t.Context(), tt.ref)
			wantKind(t, err, provider.ErrUnavailable)
		})
	}
	t.Cleanup(func() {
		if n := hits.Load(); n != 0 {
			t.Errorf("provider received %d requests, want none", n)
		}
	})
}

func TestLookupEscapesReference(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(providersim.New())
	t.Cleanup(srv.Close)
	c := provider.NewClient(srv.URL, "")
	for _, ref := range []string{"order/1", "order 2?x=y#z", "ünïcode%20"} {
		charged, err := c.Charge(t.Context(), request(ref))
		if err != nil {
			t.Fatalf("Charge(%q): %v", ref, err)
		}
		found, err := c.Lookup(t.Context(), ref)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", ref, err)
		}
		if found != charged {
			t.Errorf("Lookup(%q) = %+v, want %+v", ref, found, charged)
		}
	}
}

func TestChargeRequestRedactsSource(t *testing.T) {
	t.Parallel()
	req := request("order-1")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("charging", "req", req)
	outputs := map[string]string{
		"%v":   fmt.Sprintf("%v", req),
		"%+v":  fmt.Sprintf("%+v", req),
		"%#v":  fmt.Sprintf("%#v", req),
		"slog": logged.String(),
	}
	for verb, out := range outputs {
		if strings.Contains(out, secretSource) {
			t.Errorf("%s shows the source: %s", verb, out)
		}
		if !strings.Contains(out, "order-1") {
			t.Errorf("%s lacks the reference: %s", verb, out)
		}
	}
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(secretSource)) {
		t.Errorf("JSON for the provider lacks the source: %s", data)
	}
}

func paymentRequest(ref string) provider.PaymentRequest {
	return provider.PaymentRequest{Reference: ref, Charge: "pc_0123456789abcdef", Amount: 700}
}

// TestAuthorizeOnlyAnswersAuthorized: an authorize-only charge sends
// authorize_only and takes only an authorization for an answer, and a
// charge only a charge.
func TestAuthorizeOnlyAnswersAuthorized(t *testing.T) {
	t.Parallel()
	var sent map[string]any
	srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&sent); err != nil {
			t.Errorf("decode body: %v", err)
		}
		_, _ = io.WriteString(w, `{"id":"pc_1","reference":"order-1","status":"authorized"}`)
	})
	req := request("order-1")
	req.AuthorizeOnly = true
	res, err := provider.NewClient(srv.URL, "").Charge(t.Context(), req)
	if want := (provider.Result{Status: provider.StatusAuthorized, Reference: "order-1", ChargeID: "pc_1"}); err != nil || res != want {
		t.Fatalf("Charge = %+v, %v; want %+v", res, err, want)
	}
	if sent["authorize_only"] != true {
		t.Errorf("body = %v, want authorize_only true", sent)
	}
	if !strings.Contains(fmt.Sprintf("%v %#v", req, req), "AuthorizeOnly:true") {
		t.Errorf("printed requests leave AuthorizeOnly out: %v", req)
	}
}

// TestPaymentRequestShape: POST /v1/payments/{id}/capture or /cancel
// with the bearer token, the reference and a capture's amount as JSON.
func TestPaymentRequestShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op, answer string
		call       func(*provider.Client, context.Context, provider.PaymentRequest) (provider.Result, error)
		want       map[string]any
		result     provider.Result
	}{
		{"capture", `{"id":"pc_0123456789abcdef","reference":"cap-1","status":"charged","amount":700}`, (*provider.Client).Capture,
			map[string]any{"reference": "cap-1", "amount": 700.0},
			provider.Result{Status: provider.StatusCharged, Reference: "cap-1", ChargeID: "pc_0123456789abcdef", Amount: 700}},
		{"cancel", `{"id":"pc_0123456789abcdef","reference":"cap-1","status":"canceled"}`, (*provider.Client).Cancel,
			map[string]any{"reference": "cap-1"},
			provider.Result{Status: provider.StatusCanceled, Reference: "cap-1", ChargeID: "pc_0123456789abcdef"}},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			t.Parallel()
			var (
				path, auth string
				sent       map[string]any
			)
			srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
				path, auth = r.Method+" "+r.URL.Path, r.Header.Get("Authorization")
				if err := json.NewDecoder(r.Body).Decode(&sent); err != nil {
					t.Errorf("decode body: %v", err)
				}
				_, _ = io.WriteString(w, tt.answer)
			})
			res, err := tt.call(provider.NewClient(srv.URL, "s3cret"), t.Context(), paymentRequest("cap-1"))
			if err != nil || res != tt.result {
				t.Fatalf("%s = %+v, %v; want %+v", tt.op, res, err, tt.result)
			}
			if want := "POST /v1/payments/pc_0123456789abcdef/" + tt.op; path != want || auth != "Bearer s3cret" {
				t.Errorf("request = %s, Authorization %q; want %s", path, auth, want)
			}
			if fmt.Sprint(sent) != fmt.Sprint(tt.want) {
				t.Errorf("body = %v, want %v", sent, tt.want)
			}
		})
	}
}

// TestPaymentRefusedBeforeSending: without a reference the provider could
// not deduplicate, without a charge it could not capture, and a negative
// amount is no amount; none is sent.
func TestPaymentRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	srv, hits := counting(t, status(http.StatusOK))
	c := provider.NewClient(srv.URL, "")
	noCharge, negative := paymentRequest("cap-1"), paymentRequest("cap-1")
	noCharge.Charge, negative.Amount = "", -1
	for _, req := range []provider.PaymentRequest{paymentRequest(""), noCharge, negative} {
		_, err := c.Capture(t.Context(), req)
		wantKind(t, err, provider.ErrRejected)
	}
	for _, req := range []provider.PaymentRequest{paymentRequest(""), noCharge} {
		_, err := c.Cancel(t.Context(), req)
		wantKind(t, err, provider.ErrRejected)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("provider received %d requests, want none", n)
	}
}

func TestState(t *testing.T) {
	t.Parallel()
	const id = "pc_0123456789abcdef"
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    provider.Result
		wantErr bool // always ErrUnavailable
	}{
		{"authorized", body(http.StatusOK, `{"id":"pc_0123456789abcdef","reference":"order-1","status":"authorized","amount":1250}`),
			provider.Result{Status: provider.StatusAuthorized, Reference: "order-1", ChargeID: id, Amount: 1250}, false},
		{"charged", body(http.StatusOK, `{"id":"pc_0123456789abcdef","reference":"order-1","status":"charged","amount":700}`),
			provider.Result{Status: provider.StatusCharged, Reference: "order-1", ChargeID: id, Amount: 700}, false},
		{"canceled", body(http.StatusOK, `{"id":"pc_0123456789abcdef","reference":"order-1","status":"canceled"}`),
			provider.Result{Status: provider.StatusCanceled, Reference: "order-1", ChargeID: id}, false},
		{"not found", body(http.StatusNotFound, `{"status":"not_found"}`), provider.Result{Status: provider.StatusNotFound}, false},
		{"bare 404", body(http.StatusNotFound, "404 page not found"), provider.Result{}, true},
		{"another charge", body(http.StatusOK, `{"id":"pc_other","reference":"order-1","status":"canceled"}`), provider.Result{}, true},
		{"a refund's result", body(http.StatusOK, `{"id":"pc_0123456789abcdef","status":"refunded"}`), provider.Result{}, true},
		{"503 not processed", status(http.StatusServiceUnavailable, provider.HeaderNotProcessed, "true"), provider.Result{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/v1/payments/"+id {
					t.Errorf("request = %s %s, want GET /v1/payments/%s", r.Method, r.URL.Path, id)
				}
				tt.handler(w, r)
			})
			res, err := provider.NewClient(srv.URL, "").State(t.Context(), id)
			if tt.wantErr {
				wantKind(t, err, provider.ErrUnavailable)
				return
			}
			if err != nil || res != tt.want {
				t.Errorf("State = %+v, %v; want %+v", res, err, tt.want)
			}
		})
	}
}

func refundRequest(ref string) provider.RefundRequest {
	return provider.RefundRequest{Reference: ref, Charge: "pc_0123456789abcdef", Amount: 500, Currency: "EUR", Command: "acme#refund#r-1"}
}

// TestRefundRequestShape: POST /v1/refunds with the bearer token and the
// request as JSON, the command left out.
func TestRefundRequestShape(t *testing.T) {
	t.Parallel()
	var (
		path, auth string
		sent       map[string]any
	)
	srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.Method+" "+r.URL.Path, r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&sent); err != nil {
			t.Errorf("decode body: %v", err)
		}
		_, _ = io.WriteString(w, `{"id":"rf_1","reference":"rf-1","status":"refunded"}`)
	})
	res, err := provider.NewClient(srv.URL, "s3cret").Refund(t.Context(), refundRequest("rf-1"))
	if want := (provider.Result{Status: provider.StatusRefunded, Reference: "rf-1", ChargeID: "rf_1"}); err != nil || res != want {
		t.Fatalf("Refund = %+v, %v; want %+v", res, err, want)
	}
	if path != "POST /v1/refunds" || auth != "Bearer s3cret" {
		t.Errorf("request = %s, Authorization %q", path, auth)
	}
	want := map[string]any{"reference": "rf-1", "charge": "pc_0123456789abcdef", "amount": 500.0, "currency": "EUR"}
	if fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("body = %v, want %v", sent, want)
	}
}

// TestRefundRefusedBeforeSending: without a reference the provider could
// not deduplicate, without a charge it could not refund; neither is sent.
func TestRefundRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	srv, hits := counting(t, status(http.StatusOK))
	c := provider.NewClient(srv.URL, "")
	noCharge := refundRequest("rf-1")
	noCharge.Charge = ""
	for _, req := range []provider.RefundRequest{refundRequest(""), noCharge} {
		_, err := c.Refund(t.Context(), req)
		wantKind(t, err, provider.ErrRejected)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("provider received %d requests, want none", n)
	}
}

func TestLookupRefund(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    provider.Result
		wantErr bool // always ErrUnavailable
	}{
		{"refunded", body(http.StatusOK, `{"id":"rf_1","reference":"rf-1","status":"refunded"}`),
			provider.Result{Status: provider.StatusRefunded, Reference: "rf-1", ChargeID: "rf_1"}, false},
		{"declined", body(http.StatusOK, `{"id":"rf_2","reference":"rf-1","status":"declined","decline_code":"expired_or_canceled_card"}`),
			provider.Result{Status: provider.StatusDeclined, Reference: "rf-1", ChargeID: "rf_2", DeclineCode: "expired_or_canceled_card"}, false},
		{"not found", body(http.StatusNotFound, `{"status":"not_found"}`),
			provider.Result{Status: provider.StatusNotFound, Reference: "rf-1"}, false},
		{"bare 404", body(http.StatusNotFound, "404 page not found"), provider.Result{}, true},
		{"a charge's result", body(http.StatusOK, `{"id":"pc_1","reference":"rf-1","status":"charged"}`), provider.Result{}, true},
		{"503 not processed", status(http.StatusServiceUnavailable, provider.HeaderNotProcessed, "true"), provider.Result{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/v1/refunds/rf-1" {
					t.Errorf("request = %s %s, want GET /v1/refunds/rf-1", r.Method, r.URL.Path)
				}
				tt.handler(w, r)
			})
			res, err := provider.NewClient(srv.URL, "").LookupRefund(t.Context(), refundRequest("rf-1"))
			if tt.wantErr {
				wantKind(t, err, provider.ErrUnavailable)
				return
			}
			if err != nil || res != tt.want {
				t.Errorf("LookupRefund = %+v, %v; want %+v", res, err, tt.want)
			}
		})
	}
}
