package charge_test

// Review 32: failing tests for the refunds feature. Each test states the
// contract it holds the code to.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// hookRig is a clocked charge function and reconciler whose DynamoDB and
// provider requests pass through hooks the test sets.
type hookRig struct {
	*harness
	clock *testkit.Clock
	recon *charge.Service
	db    atomic.Pointer[func(req *http.Request, body []byte) *http.Response]
	prov  atomic.Pointer[func(req *http.Request, body []byte) *http.Request]
}

func newHookRig(t *testing.T) *hookRig {
	t.Helper()
	r := &hookRig{clock: testkit.NewClock(time.Now())}
	deps := func(d *app.Deps) {
		d.Clock = r.clock.Now
		d.ProviderOptions = append(d.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: provHook{r}}))
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: dbHook{r}} })
	}
	r.harness = newHarnessWith(t, harnessConfig{deps: deps})
	r.recon = r.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.SettleWindow = 2 * time.Minute
		w.Deps.Clock = r.clock.Now
	})
	return r
}

func readBody(req *http.Request) []byte {
	if req.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b
}

type dbHook struct{ r *hookRig }

func (h dbHook) RoundTrip(req *http.Request) (*http.Response, error) {
	if f := h.r.db.Load(); f != nil {
		if resp := (*f)(req, readBody(req)); resp != nil {
			return resp, nil // the hook answered instead
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

type provHook struct{ r *hookRig }

func (h provHook) RoundTrip(req *http.Request) (*http.Response, error) {
	if f := h.r.prov.Load(); f != nil {
		req = (*f)(req, readBody(req))
	}
	return http.DefaultTransport.RoundTrip(req)
}

// isHold reports whether a DynamoDB request is a refund's hold on its
// charge's row (Rows.hold).
func isHold(req *http.Request, body []byte) bool {
	return strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") && bytes.Contains(body, []byte("SET #hold = :amount"))
}

// TestRefundOfWhatRemainsRacingAnotherRefundIsNotRefusedForGood:
// POST /charges/{id}/refunds without an amount "refunds all that remains"
// (api/openapi.yaml). The service turns "all that remains" into a number
// read before the hold; if another refund settles in between, the hold
// of that stale number fails, and the failure is classified as "settled
// refunds leave less than this amount": stored, final for the key. The
// client asked for the rest, 900 remain, and every retry of its key is
// answered 409 for the key's lifetime.
func TestRefundOfWhatRemainsRacingAnotherRefundIsNotRefusedForGood(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	var armed atomic.Bool
	armed.Store(true)
	hook := func(req *http.Request, body []byte) *http.Response {
		if isHold(req, body) && armed.CompareAndSwap(true, false) {
			// Another clerk refunds 100 between the read and the hold.
			wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":100}`)), http.StatusCreated)
		}
		return nil
	}
	h.db.Store(&hook)
	key := newKey()
	rest := h.do(postRefund("acme", key, id, `{}`))
	h.db.Store(nil)
	again := h.do(postRefund("acme", key, id, `{}`))
	got, _ := h.providerRefunded(t, "acme", id)
	if rest.StatusCode != http.StatusCreated && again.StatusCode != http.StatusCreated {
		t.Fatalf("refund of all that remains (900 remain): first %d %v %s; retry with its key %d %v %s; provider refunded %d of 1000",
			rest.StatusCode, rest.Headers, rest.Body, again.StatusCode, again.Headers, again.Body, got)
	}
}

// TestRefundOfWhatRemainsDoesNotShrinkToWhatHoldsLeave: "left
// out, all that remains of the charge". While another refund of 700 is
// in flight (held, not made), a refund without an amount is made for 300
// and answered 201, final. When the refund in flight then proves not
// made, 700 of the charge stay unrefunded although the client asked for
// all of it. An explicit amount the holds block is answered 409 with
// Retry-After instead (the documented answer for refunds in flight).
func TestRefundOfWhatRemainsDoesNotShrinkToWhatHoldsLeave(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	first := newKey()
	entered, leave := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(req *http.Request, body []byte) *http.Request {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/refunds") && bytes.Contains(body, []byte(`"amount":700`)) {
			once.Do(func() { close(entered) })
			<-leave
			req = req.Clone(req.Context())
			req.Header.Set("Sim-Fault", "unavailable") // the provider says it did nothing
		}
		return req
	}
	h.prov.Store(&hook)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := h.handler.Handle(t.Context(), postRefund("acme", first, id, `{"amount":700}`))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("the refund of 700: %d %s, %v; want 503 provider-unavailable", resp.StatusCode, resp.Body, err)
		}
	}()
	<-entered // 700 held, the provider being asked
	rest := h.do(postRefund("acme", newKey(), id, ``))
	close(leave)
	<-done
	h.prov.Store(nil)
	got, n := h.providerRefunded(t, "acme", id)
	c := h.readCharge(t, "acme", id)
	if rest.StatusCode == http.StatusCreated && got != 1000 {
		t.Fatalf("refund of all that remains answered 201 %s; the charge of 1000 ends with %d refunded by the provider (%d refunds), %d recorded",
			rest.Body, got, n, c.AmountRefunded)
	}
}

// TestChargeListsItsRefundsOldestFirst: api/openapi.yaml, Charge
// .refunds: "The charge's refunds, oldest first." GetWithRefunds returns
// them in the order of their row ids, "<charge id>#re_<hash>", which is a
// hash's order, not their creation's.
func TestChargeListsItsRefundsOldestFirst(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	for range 8 {
		h.clock.Advance(3 * time.Second)
		wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":100}`)), http.StatusCreated)
	}
	resp := h.do(get("acme", id))
	wantStatus(t, resp, http.StatusOK)
	var c struct {
		Refunds []struct {
			ID        string
			CreatedAt string `json:"created_at"`
		}
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Refunds) != 8 {
		t.Fatalf("refunds %d, want 8: %s", len(c.Refunds), resp.Body)
	}
	if !sort.SliceIsSorted(c.Refunds, func(i, j int) bool { return c.Refunds[i].CreatedAt < c.Refunds[j].CreatedAt }) {
		t.Fatalf("GET /charges/%s lists its refunds out of creation order: %+v", id, c.Refunds)
	}
}

// TestRefundFailedAfterSucceedingIsRecorded: the Stripe adapter
// counts a pending refund as refunded because, in its words, "Should the
// issuer return it later, its status turns failed and a webhook says so"
// (refundOutcome). The webhook (refund.failed, StatusDeclined) reaches
// Notify, which does nothing for a settled command: the refund stays
// "succeeded" in GET, amount_refunded keeps counting money the customer
// never got, and that amount can never be refunded again.
func TestRefundFailedAfterSucceedingIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	client := newKey()
	made := h.do(postRefund("acme", client, id, `{"amount":1000}`))
	wantStatus(t, made, http.StatusCreated)
	key := refundKey(t, "acme", client)
	rec, err := h.store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.recon.Notify(t.Context(), charge.Notification{
		Provider: "stripe", EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""), Command: key,
		Reference: charge.RefundReference(key, rec.CreatedAt),
		Result:    provider.Result{Status: provider.StatusDeclined, ChargeID: "re_failedlater", DeclineCode: "expired_or_canceled_card"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := h.readCharge(t, "acme", id)
	if c.AmountRefunded != 0 {
		t.Fatalf("refund.failed for a refund answered 201 (Notify outcome %q): the charge still reads %d refunded, refunds %+v",
			res.Outcome, c.AmountRefunded, c.Refunds)
	}
}
