package model_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// webhookActions are what Stripe does on its own and reports by webhook,
// in Stripe mode: a card's issuer returns refunds later. Holds Stripe
// cancels after seven days are captures_test.go's authorizationExpires.
var webhookActions = []action{
	{"refundFailsLater", 1, (*history).refundFailsLater},
}

// webhookInvariant: no delivery is refused as unreadable, and every event
// is acknowledged in the end.
var webhookInvariant = invariant{soFar: (*history).hooksReadable, final: (*history).hooksAcknowledged}

const (
	// webhookSecret signs stripesim's deliveries; the charge function
	// reads it from a secret.
	webhookSecret = "whsec_chargeonce_model"
	// hookRetry is stripesim's first pause before it delivers an event
	// again. The pause doubles; after five attempts, well within a second,
	// Stripe gives up until the history settles.
	hookRetry = 20 * time.Millisecond
	// hookPatience is how long a delivery runs before the clock moves on
	// for it: it may wait for a crashed attempt, which only the clock ends.
	hookPatience = 50 * time.Millisecond
)

// webhooks is the endpoint stripesim posts its events to: the charge
// function's webhook route behind the local API Gateway. It keeps the
// history's events, whether each was acknowledged, the commands they
// named, and the deliveries refused as unreadable. Deliveries run on
// while the history takes its next steps, as Stripe's do.
type webhooks struct {
	url, secretName string
	sim             *stripesim.Simulator

	// mu guards what deliveries read and write.
	mu       sync.Mutex
	api      http.Handler
	order    []string   // event ids, as first delivered
	keys     []idem.Key // their deduplication keys, for those naming a command
	payloads map[string][]byte
	acked    map[string]bool
	named    []idem.Key // commands named by deliveries done, not yet noted
	refused  []string
	// running are the deliveries under way, by when each began.
	running map[*http.Request]time.Time
	// acknowledged counts the events acknowledged, by type, over the
	// run; redelivered those delivered again when a history settled.
	acknowledged map[string]int
	redelivered  int
	nudges       atomic.Int64 // clock moves for a delivery that waited
	preempted    atomic.Int64 // reconciles whose lease an event preempted
}

// newWebhooks starts the endpoint; serve gives it the charge function.
func newWebhooks(t *testing.T) *webhooks {
	t.Helper()
	h := &webhooks{secretName: testkit.Secret(t, webhookSecret), acknowledged: map[string]int{}}
	h.reset()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/webhooks/stripe"
	return h
}

// options points stripesim's webhooks at h.
func (h *webhooks) options(o *stripesim.Options) {
	o.WebhookURL, o.WebhookSecret, o.WebhookRetry = h.url, webhookSecret, hookRetry
}

// serve hands the deliveries to the charge function, through the gateway
// as deployed, and waits on sim's.
func (h *webhooks) serve(t *testing.T, fn *httpapi.Handler, sim *stripesim.Simulator) {
	t.Helper()
	gw, err := gateway.New(fn.Handle, httpapi.Routes, gateway.WithPublicRoutes(httpapi.RouteWebhook),
		gateway.WithTenantClaim(testkit.TenantClaim), gateway.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h.sim = sim
	t.Cleanup(sim.WaitWebhooks)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.api = gw
}

// reset forgets the events of the history before.
func (h *webhooks) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.order, h.keys, h.payloads, h.acked, h.named, h.refused = nil, nil, map[string][]byte{}, map[string]bool{}, nil, nil
	h.running = map[*http.Request]time.Time{}
}

func (h *webhooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	ev, perr := stripe.ParseWebhook(body, r.Header.Get(httpapi.HeaderStripeSignature), webhookSecret, 0)
	h.mu.Lock()
	api := h.api
	h.running[r] = time.Now()
	h.mu.Unlock()
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, r)
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())

	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.running, r)
	if perr != nil {
		h.refused = append(h.refused, fmt.Sprintf("a delivery the model cannot read (%v) was answered %d %s", perr, rec.Code, rec.Body))
		return
	}
	if _, seen := h.payloads[ev.ID]; !seen {
		h.order = append(h.order, ev.ID)
		h.payloads[ev.ID] = body
		if command, err := idem.ParseKey(ev.Command); err == nil {
			if k, err := (charge.Notification{Provider: app.ProviderStripe, EventID: ev.ID, Command: command}).Key(); err == nil {
				h.keys = append(h.keys, k)
			}
		}
	}
	switch {
	case rec.Code < http.StatusMultipleChoices:
		if !h.acked[ev.ID] {
			h.acknowledged[ev.Type]++
		}
		h.acked[ev.ID] = true
	case rec.Code < http.StatusInternalServerError && rec.Code != http.StatusConflict:
		// Only a delivery being processed (409) or the service's trouble
		// (5xx) asks Stripe to deliver again.
		h.refused = append(h.refused, fmt.Sprintf("%s %s was answered %d %s", ev.Type, ev.ID, rec.Code, rec.Body))
	}
	if k, err := idem.ParseKey(ev.Command); err == nil {
		h.named = append(h.named, k)
	}
}

// hooksNoted runs at each step's end, without waiting: the commands the
// events delivered so far named are touched. If a delivery has run
// hookPatience, the clock moves on for it.
func (r *history) hooksNoted() {
	h := r.env.hooks
	if h == nil {
		return
	}
	h.mu.Lock()
	stuck := slices.ContainsFunc(slices.Collect(maps.Values(h.running)), func(began time.Time) bool { return time.Since(began) > hookPatience })
	h.mu.Unlock()
	if stuck {
		r.nudge()
	}
	r.touchNamed()
}

// hooksDelivered waits until Stripe has delivered every event so far, or
// given up, and touches the commands they named. While it waits, the
// clock moves on every hookPatience.
func (r *history) hooksDelivered() {
	h := r.env.hooks
	if h == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		h.sim.WaitWebhooks()
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(hookPatience):
			r.nudge()
		}
	}
	r.touchNamed()
}

// nudge moves the clock on by InflightWait for a delivery that waits on
// an attempt, short of a pending charge's settle window. It is not
// r.advance: landing a charge would raise an event while WaitWebhooks
// waits.
func (r *history) nudge() {
	if next := r.env.clock.Now().Add(inflightWait); r.pendingSince.IsZero() || !next.After(r.pendingSince.Add(r.env.settleWindow)) {
		r.env.clock.Advance(inflightWait)
		r.env.hooks.nudges.Add(1)
	}
}

// touchNamed touches the commands the deliveries done named.
func (r *history) touchNamed() {
	h := r.env.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range h.named {
		r.touched[k] = true
	}
	h.named = nil
}

// hooksSettled ends a settled history's webhooks: Stripe cancels the holds
// seven days old, and delivers every event again until it is
// acknowledged, as it does for three days.
func (r *history) hooksSettled(rt *rapid.T) {
	h := r.env.hooks
	if h == nil {
		return
	}
	r.env.sim.entries() // stripesim expires holds when it is next read
	r.hooksDelivered()
	h.mu.Lock()
	unacked := slices.DeleteFunc(slices.Clone(h.order), func(id string) bool { return h.acked[id] })
	h.redelivered += len(unacked)
	h.mu.Unlock()
	for _, id := range unacked {
		for range 3 {
			if h.redeliver(rt, id) {
				break
			}
		}
	}
	r.hooksDelivered()
}

// redeliver delivers event id again, signed now, and reports whether it
// was acknowledged.
func (h *webhooks) redeliver(rt *rapid.T, id string) bool {
	h.mu.Lock()
	payload := h.payloads[id]
	h.mu.Unlock()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: webhookSecret, Timestamp: time.Now()})
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.url, bytes.NewReader(payload))
	if err != nil {
		rt.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpapi.HeaderStripeSignature, signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		rt.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode < http.StatusMultipleChoices
}

// hooksReadable runs between steps: every delivery so far was readable,
// or asked to be delivered again.
func (r *history) hooksReadable(rt *rapid.T) {
	if h := r.env.hooks; h != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.refused) > 0 {
			rt.Fatalf("webhook deliveries refused: %v", h.refused)
		}
	}
}

// hooksAcknowledged checks, once the history has settled, that every event
// Stripe sent was acknowledged.
func (r *history) hooksAcknowledged(rt *rapid.T) {
	h := r.env.hooks
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range h.order {
		if !h.acked[id] {
			rt.Fatalf("event %s was never acknowledged: %s", id, h.payloads[id])
		}
	}
}

// String sums up the run's events, for its log.
func (h *webhooks) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("webhook events acknowledged: %v; %d delivered again as histories settled; "+
		"the clock moved %d times for a waiting delivery; %d reconciles lost their lease to an event",
		h.acknowledged, h.redelivered, h.nudges.Load(), h.preempted.Load())
}

// eventKeys are the keys under which the service deduplicated the
// history's events, for removeItems.
func (h *webhooks) eventKeys() []idem.Key {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.keys)
}

// refundFailsLater refunds a charge of a card whose issuer returns refunds
// (stripesim.PMRefundFail), charging one first if the history has none.
// Stripe then fails every such refund: at once, before the refund's answer
// reaches the service, later, or once the refund's record has expired.
// Its refund.failed event settles the refund's row.
func (r *history) refundFailsLater(rt *rapid.T) {
	b := r.env.sim.(*stripeBackend)
	t, ok := r.failingTarget(rt)
	if !ok {
		return
	}
	rs := r.refundKey(rt, t, rapid.SampledFrom(refundClientKeys).Draw(rt, "refundKey"))
	when := rapid.SampledFrom([]string{"atOnce", "later", "pastRetention"}).Draw(rt, "refundFails")
	if when == "atOnce" {
		b.failRefund.Store(true)
		defer b.failRefund.Store(false)
	}
	r.refundOnce(rt, rs)
	if when == "pastRetention" {
		r.retentionPasses(rt)
	}
	if when != "atOnce" {
		b.sim.FailRefunds()
	}
}

// failingTarget draws a captured charge of stripesim.PMRefundFail,
// charging one first if the history has none.
func (r *history) failingTarget(rt *rapid.T) (chargeTarget, bool) {
	failing := func() []chargeTarget {
		return slices.DeleteFunc(r.targets(rt), func(t chargeTarget) bool { return t.source != stripesim.PMRefundFail || t.amount == 0 })
	}
	ts := failing()
	if len(ts) == 0 {
		r.requestNew(rt, func(b *body) { b.Source, b.AuthorizeOnly = stripesim.PMRefundFail, false })
		r.note(rt)
		ts = failing()
	}
	if len(ts) == 0 {
		return chargeTarget{}, false
	}
	return rapid.SampledFrom(ts).Draw(rt, "failingCharge"), true
}
