package stripe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

const testWhsec = "whsec_test_chargeonce"

// endpoint is a webhook endpoint that records each delivery and answers
// the statuses it is given, then 200.
type endpoint struct {
	mu       sync.Mutex
	answers  []int
	payloads [][]byte
	sigs     []string
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.payloads, e.sigs = append(e.payloads, body), append(e.sigs, r.Header.Get("Stripe-Signature"))
	status := http.StatusOK
	if len(e.answers) > 0 {
		status, e.answers = e.answers[0], e.answers[1:]
	}
	w.WriteHeader(status)
}

// TestSimulatorSendsSignedWebhooks: stripesim sends a signed event for each
// settled PaymentIntent, including a charge that lands after its edge
// timed out, redelivers one not acknowledged, each delivery signed anew;
// ParseWebhook verifies them and reads our reference, the command and the
// outcome.
func TestSimulatorSendsSignedWebhooks(t *testing.T) {
	t.Parallel()
	ep := &endpoint{answers: []int{http.StatusServiceUnavailable}}
	hook := httptest.NewServer(ep)
	t.Cleanup(hook.Close)
	b := newBackend(t, func(o *stripesim.Options) {
		o.WebhookURL, o.WebhookSecret, o.WebhookRetry = hook.URL, testWhsec, 10*time.Millisecond
	})
	ctx := context.Background()
	late := charge("co_hook_late", stripesim.PMLate)
	late.Command = "acme#create-charge#order-late"
	if _, err := b.adapter.Charge(ctx, late); !errors.Is(err, provider.ErrAmbiguous) {
		t.Fatalf("late charge: want ErrAmbiguous, got %v", err)
	}
	b.sim.WaitWebhooks()
	if n := len(ep.payloads); n != 0 {
		t.Fatalf("%d deliveries before the charge landed, want none", n)
	}
	b.sim.Land()
	b.sim.WaitWebhooks()
	declined := charge("co_hook_declined", stripesim.PMInsufficientFunds)
	declined.Command = "acme#create-charge#order-declined"
	if res, err := b.adapter.Charge(ctx, declined); err != nil || res.Status != provider.StatusDeclined {
		t.Fatalf("declined charge: %+v, %v", res, err)
	}
	b.sim.WaitWebhooks()

	if len(ep.payloads) != 3 || b.sim.WebhooksDelivered() != 2 {
		t.Fatalf("%d deliveries, %d acknowledged; want 3 (the first refused, then redelivered) and 2", len(ep.payloads), b.sim.WebhooksDelivered())
	}
	if string(ep.payloads[0]) != string(ep.payloads[1]) {
		t.Fatalf("the redelivery differs from the first delivery")
	}
	var events []stripe.Event
	for i, p := range ep.payloads {
		ev, err := stripe.ParseWebhook(p, ep.sigs[i], testWhsec, 0)
		if err != nil {
			t.Fatalf("delivery %d does not verify: %v", i, err)
		}
		events = append(events, ev)
	}
	succeeded, failed := events[1], events[2]
	if events[0].ID != succeeded.ID {
		t.Errorf("the redelivery has event id %s, the first %s: want the same", succeeded.ID, events[0].ID)
	}
	if succeeded.Type != stripe.EventSucceeded || succeeded.Reference != late.Reference || succeeded.Command != late.Command ||
		succeeded.Result.Status != provider.StatusCharged || !strings.HasPrefix(succeeded.Result.ChargeID, "pi_") {
		t.Errorf("succeeded event = %+v", succeeded)
	}
	if failed.Type != stripe.EventFailed || failed.Reference != declined.Reference || failed.Command != declined.Command ||
		failed.Result.Status != provider.StatusDeclined || failed.Result.DeclineCode != "insufficient_funds" {
		t.Errorf("payment_failed event = %+v", failed)
	}
}

// TestParseWebhookRefuses what is not a verified, readable event.
func TestParseWebhookRefuses(t *testing.T) {
	t.Parallel()
	signed := func(payload string) (string, string) {
		return payload, webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: testWhsec}).Header
	}
	good, goodSig := signed(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","status":"succeeded","metadata":{"chargeonce_reference":"co_1"}}}}`)
	if ev, err := stripe.ParseWebhook([]byte(good), goodSig, testWhsec, 0); err != nil || ev.Reference != "co_1" || ev.Result.Status != provider.StatusCharged {
		t.Fatalf("a good delivery: %+v, %v", ev, err)
	}
	old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(good), Secret: testWhsec, Timestamp: time.Now().Add(-6 * time.Minute)}).Header
	disagree, disagreeSig := signed(`{"id":"evt_2","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_2","object":"payment_intent","status":"requires_payment_method","last_payment_error":{"code":"card_declined"},"metadata":{}}}}`)
	notEvent, notEventSig := signed(`{"id":"pi_3","object":"payment_intent"}`)
	for name, c := range map[string]struct {
		payload, sig, secret string
		want                 error
	}{
		"no signature":    {good, "", testWhsec, stripe.ErrSignature},
		"wrong secret":    {good, goodSig, "whsec_other", stripe.ErrSignature},
		"no secret":       {good, goodSig, "", stripe.ErrSignature},
		"too old":         {good, old, testWhsec, stripe.ErrSignature},
		"tampered":        {strings.Replace(good, "co_1", "co_2", 1), goodSig, testWhsec, stripe.ErrSignature},
		"type and status": {disagree, disagreeSig, testWhsec, stripe.ErrUnreadable},
		"not an event":    {notEvent, notEventSig, testWhsec, stripe.ErrUnreadable},
	} {
		if _, err := stripe.ParseWebhook([]byte(c.payload), c.sig, c.secret, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: want %v, got %v", name, c.want, err)
		}
	}
}

// TestCheckSignatureRefusesWhatNoSecretVerifies: the check without the
// secret refuses a header exactly when stripe-go would refuse it whatever
// the secret, and never one that verifies with the right secret.
func TestCheckSignatureRefusesWhatNoSecretVerifies(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}`)
	at := func(ts time.Time) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: testWhsec, Timestamp: ts}).Header
	}
	now := at(time.Now())
	unix := strconv.FormatInt(time.Now().Unix(), 10)
	for header, refused := range map[string]bool{
		now:                                  false,
		now + ",v0=abc,scheme=x":             false,
		"v1=zz," + now:                       false,
		at(time.Now().Add(-4 * time.Minute)): false,
		at(time.Now().Add(-6 * time.Minute)): true,
		"":                                   true,
		"garbage":                            true,
		"t=" + unix:                          true,
		"t=" + unix + ",v1=zz":               true,
		"t=abc,v1=00":                        true,
		now + ",":                            true,
		now + ",v1=a=b":                      true,
		"v1=00":                              true, // no timestamp: the epoch, too old
	} {
		err := stripe.CheckSignature(header, 0)
		if refused != (err != nil) || err != nil && !errors.Is(err, stripe.ErrSignature) {
			t.Errorf("CheckSignature(%q) = %v, want refused %v with ErrSignature", header, err, refused)
		}
		// Whatever the secret: the one that signed does not verify it either.
		if verr := webhook.ValidatePayloadWithTolerance(payload, header, testWhsec, webhook.DefaultTolerance); refused && verr == nil {
			t.Errorf("CheckSignature refuses %q, which stripe-go verifies", header)
		}
	}
}

// TestSimulatorSendsRefundWebhooks: a refund raises refund.created and
// charge.refunded, both read as our refund with its command; its failure
// raises refund.updated and refund.failed, read as declined.
func TestSimulatorSendsRefundWebhooks(t *testing.T) {
	t.Parallel()
	ep := &endpoint{}
	hook := httptest.NewServer(ep)
	t.Cleanup(hook.Close)
	b := newBackend(t, func(o *stripesim.Options) { o.WebhookURL, o.WebhookSecret = hook.URL, testWhsec })
	pi := mustCharge(t, b, "co_hook_refund", stripesim.PMRefundFail)
	req := refund("co_hook_refund_1", pi, 700)
	req.Command, req.Row = "acme#refund-charge#r-hook", "ch_2#re_2"
	refunded, err := b.adapter.Refund(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	b.sim.FailRefunds()
	b.sim.WaitWebhooks()

	events := map[string]stripe.Event{}
	for i, p := range ep.payloads {
		ev, err := stripe.ParseWebhook(p, ep.sigs[i], testWhsec, 0)
		if err != nil {
			t.Fatalf("delivery %d does not verify: %v", i, err)
		}
		events[ev.Type] = ev
	}
	refundedResult := provider.Result{Status: provider.StatusRefunded, Reference: req.Reference, ChargeID: refunded.ChargeID}
	failedResult := provider.Result{Status: provider.StatusDeclined, Reference: req.Reference, ChargeID: refunded.ChargeID, DeclineCode: "expired_or_canceled_card"}
	for typ, want := range map[string]provider.Result{
		stripe.EventRefundCreated:  refundedResult,
		stripe.EventChargeRefunded: refundedResult,
		stripe.EventRefundUpdated:  failedResult,
		stripe.EventRefundFailed:   failedResult,
	} {
		ev, ok := events[typ]
		if !ok || ev.Reference != req.Reference || ev.Command != req.Command || ev.Row != req.Row || ev.Result != want {
			t.Errorf("%s: %+v (delivered: %v); want our refund with %+v", typ, ev, ok, want)
		}
	}
}

// TestParseRefundWebhooks: a charge.refunded event names the newest of its
// refunds that carries our reference, or nothing of ours; a refund.failed
// event about a refund that did not fail is refused.
func TestParseRefundWebhooks(t *testing.T) {
	t.Parallel()
	parse := func(payload string) (stripe.Event, error) {
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: testWhsec}).Header
		return stripe.ParseWebhook([]byte(payload), sig, testWhsec, 0)
	}
	ev, err := parse(`{"id":"evt_1","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_1","object":"charge","refunds":{"object":"list","data":[
		{"id":"re_old","object":"refund","status":"succeeded","created":1,"metadata":{"chargeonce_reference":"co_old"}},
		{"id":"re_theirs","object":"refund","status":"succeeded","created":3,"metadata":{}},
		{"id":"re_new","object":"refund","status":"pending","created":2,"metadata":{"chargeonce_reference":"co_new"}}]}}}}`)
	if want := (provider.Result{Status: provider.StatusRefunded, Reference: "co_new", ChargeID: "re_new"}); err != nil || ev.Reference != "co_new" || ev.Result != want {
		t.Errorf("charge.refunded with our refunds: %+v, %v; want %+v", ev, err, want)
	}
	ev, err = parse(`{"id":"evt_2","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_2","object":"charge"}}}`)
	if err != nil || ev.Reference != "" || ev.Result != (provider.Result{}) || ev.ID != "evt_2" {
		t.Errorf("charge.refunded without its refunds (API versions since 2022-11-15): %+v, %v; want an event about nothing of ours", ev, err)
	}
	if _, err := parse(`{"id":"evt_3","object":"event","type":"refund.failed","data":{"object":{"id":"re_3","object":"refund","status":"succeeded","metadata":{}}}}`); !errors.Is(err, stripe.ErrUnreadable) {
		t.Errorf("refund.failed about a succeeded refund: %v, want ErrUnreadable", err)
	}
	if _, err := parse(`{"id":"evt_4","object":"event","type":"refund.created","data":{"object":{"object":"refund"}}}`); !errors.Is(err, stripe.ErrUnreadable) {
		t.Errorf("refund.created without a refund id: %v, want ErrUnreadable", err)
	}
}
