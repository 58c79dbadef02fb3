package stripesim

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	stripego "github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"
)

// Webhook delivery defaults; see Options.
const (
	DefaultWebhookRetry    = time.Second
	DefaultWebhookAttempts = 5
	webhookTimeout         = 10 * time.Second
)

// event is a webhook event as Stripe sends it.
type event struct {
	ID         string    `json:"id"`
	Object     string    `json:"object"`
	APIVersion string    `json:"api_version"`
	Created    int64     `json:"created"`
	Type       string    `json:"type"`
	Livemode   bool      `json:"livemode"`
	Data       eventData `json:"data"`
}

type eventData struct {
	Object any `json:"object"`
}

// webhooks sends the simulator's events to Options.WebhookURL.
type webhooks struct {
	opts      Options
	secret    atomic.Pointer[string] // signs the deliveries
	wg        sync.WaitGroup
	mu        sync.Mutex
	delivered int
}

// settled sends the event a PaymentIntent's outcome raises, if it raises
// one. A success raises payment_intent.succeeded, a capture's too. An
// authorization raises payment_intent.amount_capturable_updated. A cancel
// raises payment_intent.canceled. A decline raises
// payment_intent.payment_failed.
func (w *webhooks) settled(pi *intent, now time.Time) {
	switch {
	case pi.Status == "succeeded":
		w.send("payment_intent.succeeded", pi, now)
	case pi.Status == "requires_capture":
		w.send("payment_intent.amount_capturable_updated", pi, now)
	case pi.Status == "canceled":
		w.send("payment_intent.canceled", pi, now)
	case pi.Status == "requires_payment_method" && pi.LastPaymentError != nil:
		w.send("payment_intent.payment_failed", pi, now)
	}
}

// refunded sends the events a new refund raises: refund.created, and
// charge.refunded with the charge c it refunded.
func (w *webhooks) refunded(rf *refund, c *charge, now time.Time) {
	w.send("refund.created", rf, now)
	w.send("charge.refunded", c, now)
}

// refundFailed sends the events a failed refund raises: refund.updated
// and refund.failed.
func (w *webhooks) refundFailed(rf *refund, now time.Time) {
	w.send("refund.updated", rf, now)
	w.send("refund.failed", rf, now)
}

// send sends an event of type typ about a copy of object, if webhooks are
// configured. The event is built now, under the simulator's lock. It is
// sent from its own goroutine. Stripe too sends events apart from the
// request that caused them, in no promised order.
func (w *webhooks) send(typ string, object any, now time.Time) {
	if w.opts.WebhookURL == "" {
		return
	}
	body := mustJSON(event{ID: newID("evt_"), Object: "event", APIVersion: stripego.APIVersion, Created: now.Unix(),
		Type: typ, Data: eventData{Object: object}})
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.deliver(typ, body)
	}()
}

// deliver posts one event until the endpoint answers 2xx, at most
// WebhookAttempts times. It pauses WebhookRetry, then twice as long each
// time, as Stripe redelivers. Stripe's pauses are minutes to hours. Each
// attempt is signed anew, with its own timestamp, as Stripe's are.
func (w *webhooks) deliver(typ string, body []byte) {
	pause := w.opts.WebhookRetry
	for attempt := 1; attempt <= w.opts.WebhookAttempts; attempt++ {
		status := w.post(body)
		w.opts.Logger.LogAttrs(context.Background(), slog.LevelInfo, "webhook",
			slog.String("type", typ), slog.Int("attempt", attempt), slog.Int("code", status))
		if status >= 200 && status < 300 {
			w.mu.Lock()
			w.delivered++
			w.mu.Unlock()
			return
		}
		time.Sleep(pause)
		pause *= 2
	}
}

// post sends one signed delivery and returns the answer's status, 0 if
// none came. It is signed at the wall clock's time, not the simulator's:
// the receiver checks the timestamp against its own clock.
func (w *webhooks) post(body []byte) int {
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload: body, Secret: *w.secret.Load(), Timestamp: time.Now(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.opts.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := w.opts.WebhookClient.Do(req)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// WebhooksDelivered counts the events an endpoint has acknowledged (2xx).
func (s *Simulator) WebhooksDelivered() int {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	return s.hooks.delivered
}

// WaitWebhooks waits until every event raised so far is delivered or has
// run out of attempts.
func (s *Simulator) WaitWebhooks() { s.hooks.wg.Wait() }
