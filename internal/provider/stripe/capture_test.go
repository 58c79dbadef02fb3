package stripe_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

// sentForm records each request's path, Idempotency-Key and form.
type sentForm struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []string
}

func (s *sentForm) RoundTrip(req *http.Request) (*http.Response, error) {
	form := ""
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		data, _ := io.ReadAll(body)
		values, _ := url.ParseQuery(string(data))
		form = values.Encode()
	}
	s.mu.Lock()
	s.sent = append(s.sent, req.Method+" "+req.URL.Path+" key="+req.Header.Get("Idempotency-Key")+" "+form)
	s.mu.Unlock()
	return s.next.RoundTrip(req)
}

// authorize authorizes 1500 under reference and returns the PaymentIntent.
func authorize(t *testing.T, a *stripe.Adapter, reference string) string {
	t.Helper()
	req := charge(reference, stripesim.PMVisa)
	req.AuthorizeOnly = true
	res, err := a.Charge(t.Context(), req)
	if err != nil || res.Status != provider.StatusAuthorized || !strings.HasPrefix(res.ChargeID, "pi_") {
		t.Fatalf("authorize %s: %+v, %v", reference, res, err)
	}
	return res.ChargeID
}

// TestCaptureAndCancelSendTheirKeys: an authorization is a PaymentIntent
// with capture_method manual; a capture sends amount_to_capture, and
// both a capture and a cancel send our reference as the Idempotency-Key.
func TestCaptureAndCancelSendTheirKeys(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	rec := &sentForm{next: http.DefaultTransport}
	a := newAdapter(t, b.url, func(o *stripe.Options) { o.HTTPClient = &http.Client{Transport: rec} })
	pi := authorize(t, a, "co_auth")
	if res, err := a.Capture(t.Context(), provider.PaymentRequest{Reference: "co_auth.capture", Charge: pi, Amount: 1000}); err != nil ||
		res != (provider.Result{Status: provider.StatusCharged, Reference: "co_auth.capture", ChargeID: pi, Amount: 1000}) {
		t.Fatalf("capture: %+v, %v", res, err)
	}
	if res, err := a.Cancel(t.Context(), provider.PaymentRequest{Reference: "co_auth.cancel", Charge: pi}); err != nil ||
		res != (provider.Result{Status: provider.StatusCharged, Reference: "co_auth.cancel", ChargeID: pi, Amount: 1000}) {
		t.Fatalf("cancel after the capture: %+v, %v; want charged 1000", res, err)
	}
	want := []string{
		"POST /v1/payment_intents key=co_auth ",
		"POST /v1/payment_intents/" + pi + "/capture key=co_auth.capture amount_to_capture=1000",
		"POST /v1/payment_intents/" + pi + "/cancel key=co_auth.cancel ",
		"GET /v1/payment_intents/" + pi + " key= ",
	}
	if len(rec.sent) != len(want) {
		t.Fatalf("sent %q, want %d requests", rec.sent, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(rec.sent[i], w) {
			t.Errorf("request %d = %q, want it to start %q", i, rec.sent[i], w)
		}
	}
	if !strings.Contains(rec.sent[0], "capture_method=manual") {
		t.Errorf("authorization sent %q, want capture_method=manual", rec.sent[0])
	}
	if e, _ := b.sim.Intent(pi); e.Captures != 1 || e.Captured != 1000 || e.Canceled != 0 {
		t.Errorf("the PaymentIntent: %+v, want one capture of 1000, not canceled", e)
	}
}

// TestCaptureKeyReusedIsRejected: a capture key Stripe holds for another
// amount captures nothing more, and says why.
func TestCaptureKeyReusedIsRejected(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := authorize(t, b.adapter, "co_reused")
	req := provider.PaymentRequest{Reference: "co_reused.capture", Charge: pi, Amount: 1000}
	if _, err := b.adapter.Capture(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	req.Amount = 500
	if _, err := b.adapter.Capture(t.Context(), req); !errors.Is(err, provider.ErrRejected) || !errors.Is(err, stripe.ErrKeyReused) {
		t.Errorf("capture under a key held for another amount: %v, want ErrRejected wrapping ErrKeyReused", err)
	}
	_, err := b.adapter.Capture(t.Context(), provider.PaymentRequest{Reference: "co_declined.capture", Charge: mustDecline(t, b), Amount: 0})
	if !errors.Is(err, provider.ErrRejected) {
		t.Errorf("capture of a declined PaymentIntent: %v, want ErrRejected", err)
	}
}

func mustDecline(t *testing.T, b *backend) string {
	t.Helper()
	res, err := b.adapter.Charge(t.Context(), charge("co_declined", stripesim.PMDeclined))
	if err != nil || res.Status != provider.StatusDeclined {
		t.Fatalf("decline: %+v, %v", res, err)
	}
	return res.ChargeID
}

// TestAuthorizationExpiresAfterSevenDays: Stripe cancels an authorization
// it has held seven days (cancellation_reason automatic); State reads it
// canceled and a capture captures nothing. Its webhooks say the same.
func TestAuthorizationExpiresAfterSevenDays(t *testing.T) {
	t.Parallel()
	ep := &endpoint{}
	hook := httptest.NewServer(ep)
	t.Cleanup(hook.Close)
	b := newBackend(t, func(o *stripesim.Options) { o.WebhookURL, o.WebhookSecret = hook.URL, testWhsec })
	req := charge("co_expiring", stripesim.PMVisa)
	req.AuthorizeOnly, req.Command, req.Row = true, "acme#create-charge#order-7", "ch_7"
	res, err := b.adapter.Charge(t.Context(), req)
	if err != nil || res.Status != provider.StatusAuthorized {
		t.Fatalf("authorize: %+v, %v", res, err)
	}
	pi := res.ChargeID
	b.clock.Advance(stripesim.AuthorizationWindow - time.Second)
	if st, err := b.adapter.State(t.Context(), pi); err != nil || st != (provider.Result{Status: provider.StatusAuthorized, Reference: "co_expiring", ChargeID: pi, Amount: 1500}) {
		t.Fatalf("state before seven days: %+v, %v", st, err)
	}
	b.clock.Advance(time.Second)
	if st, err := b.adapter.State(t.Context(), pi); err != nil || st != (provider.Result{Status: provider.StatusCanceled, Reference: "co_expiring", ChargeID: pi}) {
		t.Fatalf("state after seven days: %+v, %v", st, err)
	}
	if got, err := b.adapter.Capture(t.Context(), provider.PaymentRequest{Reference: "co_expiring.capture", Charge: pi}); err != nil ||
		got != (provider.Result{Status: provider.StatusCanceled, Reference: "co_expiring.capture", ChargeID: pi}) {
		t.Fatalf("capture after the expiry: %+v, %v; want canceled", got, err)
	}
	if e, _ := b.sim.Intent(pi); e.Captures != 0 || e.Canceled != 1 {
		t.Errorf("the PaymentIntent: %+v, want canceled and never captured", e)
	}
	b.sim.WaitWebhooks()
	ep.mu.Lock()
	defer ep.mu.Unlock()
	got := map[string]provider.Result{}
	for i, payload := range ep.payloads {
		ev, err := stripe.ParseWebhook(payload, ep.sigs[i], testWhsec, 0)
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if ev.Reference != "co_expiring" || ev.Command != req.Command || ev.Row != req.Row {
			t.Errorf("%s names %q, %q, %q", ev.Type, ev.Reference, ev.Command, ev.Row)
		}
		got[ev.Type] = ev.Result
	}
	want := map[string]provider.Result{
		stripe.EventAuthorized: {Status: provider.StatusAuthorized, Reference: "co_expiring", ChargeID: pi, Amount: 1500},
		stripe.EventCanceled:   {Status: provider.StatusCanceled, Reference: "co_expiring", ChargeID: pi},
	}
	if len(got) != len(want) || got[stripe.EventAuthorized] != want[stripe.EventAuthorized] || got[stripe.EventCanceled] != want[stripe.EventCanceled] {
		t.Errorf("webhooks read %+v, want %+v", got, want)
	}
}

// TestParsePaymentWebhooks: a capture's payment_intent.succeeded carries
// the amount received; an event whose PaymentIntent disagrees with its
// type is refused.
func TestParsePaymentWebhooks(t *testing.T) {
	t.Parallel()
	parse := func(payload string) (stripe.Event, error) {
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: testWhsec}).Header
		return stripe.ParseWebhook([]byte(payload), sig, testWhsec, 0)
	}
	ev, err := parse(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent",
		"status":"succeeded","amount":1500,"amount_received":1000,"capture_method":"manual","metadata":{"chargeonce_reference":"co_1"}}}}`)
	if want := (provider.Result{Status: provider.StatusCharged, Reference: "co_1", ChargeID: "pi_1", Amount: 1000}); err != nil || ev.Result != want {
		t.Errorf("succeeded after a partial capture: %+v, %v; want %+v", ev, err, want)
	}
	for _, payload := range []string{
		`{"id":"evt_2","object":"event","type":"payment_intent.canceled","data":{"object":{"id":"pi_2","object":"payment_intent","status":"succeeded","metadata":{}}}}`,
		`{"id":"evt_3","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_3","object":"payment_intent","status":"canceled","metadata":{}}}}`,
	} {
		if _, err := parse(payload); !errors.Is(err, stripe.ErrUnreadable) {
			t.Errorf("an event whose PaymentIntent disagrees: %v, want ErrUnreadable", err)
		}
	}
}
