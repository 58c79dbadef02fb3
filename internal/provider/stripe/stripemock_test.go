package stripe_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// stripeMockModule is the pinned stripe-mock, installed into bin/tools.
const stripeMockModule = "github.com/stripe/stripe-mock@v0.203.0"

// TestStripeMockAcceptsEveryRequest sends every kind of request the
// adapter makes to stripe-mock, which validates them against Stripe's
// OpenAPI specification, and requires every one to be accepted. stripe-mock
// keeps no state and answers fixtures, so outcomes are not checked here;
// the contract suite checks them on stripesim.
func TestStripeMockAcceptsEveryRequest(t *testing.T) {
	url := startStripeMock(t)
	rec := &recorder{next: http.DefaultTransport}
	a, err := stripe.New("sk_test_123", func(o *stripe.Options) {
		o.BaseURL, o.HTTPClient = url, &http.Client{Transport: rec}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := provider.ChargeRequest{Reference: "co_stripe_mock", Amount: 1500, Currency: "EUR", Source: stripesim.PMVisa, Command: "acme#create-charge#order-1001"}
	// stripe-mock answers its fixture whatever was sent (a declined
	// PaymentIntent): what counts is that every request was accepted.
	res, err := a.Charge(ctx, req)
	t.Logf("charge: %+v, %v", res, err)
	res, err = a.Lookup(ctx, req.Reference)
	t.Logf("lookup: %+v, %v", res, err)
	res, err = a.LookupRequest(ctx, provider.LookupRequest{ChargeRequest: req, FirstSent: time.Now()})
	t.Logf("lookup by replay: %+v, %v", res, err)
	// Nor does it keep refunds: neither their amounts nor their keys.
	rf := provider.RefundRequest{Reference: "co_stripe_mock_refund", Charge: "pi_stripemock", Amount: 500, Currency: "EUR", Command: "acme#refund-charge#r-1"}
	res, err = a.Refund(ctx, rf)
	t.Logf("refund: %+v, %v", res, err)
	res, err = a.LookupRefund(ctx, rf)
	t.Logf("refund lookup: %+v, %v", res, err)
	// Nor the state of an authorization: its captures and cancels are
	// checked on stripesim.
	auth := req
	auth.Reference, auth.AuthorizeOnly = "co_stripe_mock_auth", true
	res, err = a.Charge(ctx, auth)
	t.Logf("authorize: %+v, %v", res, err)
	res, err = a.Capture(ctx, provider.PaymentRequest{Reference: "co_stripe_mock_auth.capture", Charge: "pi_stripemock", Amount: 1000})
	t.Logf("capture: %+v, %v", res, err)
	res, err = a.Cancel(ctx, provider.PaymentRequest{Reference: "co_stripe_mock_auth.cancel", Charge: "pi_stripemock"})
	t.Logf("cancel: %+v, %v", res, err)
	res, err = a.State(ctx, "pi_stripemock")
	t.Logf("state: %+v, %v", res, err)

	calls := rec.calls()
	for _, want := range []string{"POST /v1/payment_intents", "GET /v1/payment_intents/search", "GET /v1/payment_intents/pi_", "POST /v1/refunds", "GET /v1/refunds",
		"POST /v1/payment_intents/pi_stripemock/capture", "POST /v1/payment_intents/pi_stripemock/cancel"} {
		if !slicesContainsPrefix(calls, want) {
			t.Errorf("no request %q among %v", want, calls)
		}
	}
	for _, c := range calls {
		if !strings.HasSuffix(c, " 200") {
			t.Errorf("stripe-mock refused %s", c)
		}
	}
	t.Logf("stripe-mock accepted %d of %d requests: %v", countSuffix(calls, " 200"), len(calls), calls)
}

// recorder counts the requests that pass through it, with their answers.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	log  []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	status := "error"
	if err == nil {
		status = fmt.Sprint(resp.StatusCode)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, req.Method+" "+req.URL.Path+" "+status)
	return resp, err
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

func slicesContainsPrefix(s []string, prefix string) bool {
	for _, v := range s {
		if strings.HasPrefix(v, prefix) {
			return true
		}
	}
	return false
}

func countSuffix(s []string, suffix string) int {
	n := 0
	for _, v := range s {
		if strings.HasSuffix(v, suffix) {
			n++
		}
	}
	return n
}

// startStripeMock installs the pinned stripe-mock into bin/tools, starts it
// on free loopback ports, and stops it when the test ends. It skips the
// test if the module proxy cannot be reached to install it.
func startStripeMock(t *testing.T) string {
	t.Helper()
	gobin := filepath.Join(testkit.RepoRoot(), "bin", "tools")
	install := exec.Command("go", "install", stripeMockModule)
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("go install %s: %v\n%s", stripeMockModule, err, out)
	}
	cmd := exec.Command(filepath.Join(gobin, "stripe-mock"), "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testkit.LogBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	select {
	case a := <-addr:
		return "http://" + a
	case <-exited:
		t.Fatalf("stripe-mock exited:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("stripe-mock did not listen within 30s:\n%s", stderr.String())
	}
	return ""
}
