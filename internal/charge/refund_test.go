package charge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

func TestRefundTwiceWithOneKeyRefundsOnceAndReplays(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1500)
	key := newKey()
	first := h.do(postRefund("acme", key, id, `{"amount":500,"reason":"requested_by_customer"}`))
	wantStatus(t, first, http.StatusCreated)
	again := h.do(postRefund("acme", key, id, `{ "reason": "requested_by_customer", "amount": 5e2 }`))
	wantStatus(t, again, http.StatusCreated)
	if again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" || again.Headers["Location"] != first.Headers["Location"] {
		t.Fatalf("replay %v %s, want the first answer %s replayed", again.Headers, again.Body, first.Body)
	}
	var rf struct {
		ID       string
		ChargeID string `json:"charge_id"`
	}
	if err := json.Unmarshal([]byte(first.Body), &rf); err != nil || rf.ChargeID != id || !charge.IsRefundID(rf.ID) {
		t.Fatalf("refund body %s: %v", first.Body, err)
	}
	if want := "/charges/" + id + "/refunds/" + rf.ID; first.Headers["Location"] != want {
		t.Fatalf("Location %q, want %q", first.Headers["Location"], want)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 500 || n != 1 {
		t.Fatalf("provider refunded %d in %d refunds, want 500 in 1", got, n)
	}
	c := h.readCharge(t, "acme", id)
	if c.AmountRefunded != 500 || len(c.Refunds) != 1 || c.Refunds[0].ID != rf.ID {
		t.Fatalf("charge read %+v, want 500 refunded by %s", c, rf.ID)
	}
	read := h.do(getRefund("acme", id, rf.ID))
	wantStatus(t, read, http.StatusOK)
	if read.Body != first.Body {
		t.Fatalf("GET refund %s, want %s", read.Body, first.Body)
	}
	wantStatus(t, h.do(getRefund("other", id, rf.ID)), http.StatusNotFound)
}

// TestOneKeyOnAChargeAndARefundNamesTwoIntents: keys are scoped by
// operation, so a client reusing its order id for both is not refused.
func TestOneKeyOnAChargeAndARefundNamesTwoIntents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := newKey()
	resp := h.do(post("acme", key, visa))
	wantStatus(t, resp, http.StatusCreated)
	id, _ := chargeOf(t, resp.Body)
	refund := h.do(postRefund("acme", key, id, ""))
	wantStatus(t, refund, http.StatusCreated)
	if refund.Headers["Idempotent-Replayed"] != "" {
		t.Fatalf("the refund replayed the charge's answer: %s", refund.Body)
	}
	if got, _ := h.providerRefunded(t, "acme", id); got != 1500 {
		t.Fatalf("an empty body refunded %d, want all 1500", got)
	}
}

// TestRefundKeyReusedWithAnotherRequestIsRefused: another amount, or the
// same body on another charge, is another request.
func TestRefundKeyReusedWithAnotherRequestIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id, other := h.charged(t, "acme", 1500), h.charged(t, "acme", 1500)
	key := newKey()
	wantStatus(t, h.do(postRefund("acme", key, id, `{"amount":500}`)), http.StatusCreated)
	for name, req := range map[string]events.APIGatewayV2HTTPRequest{
		"another amount": postRefund("acme", key, id, `{"amount":600}`),
		"another charge": postRefund("acme", key, other, `{"amount":500}`),
	} {
		resp := h.do(req)
		if resp.StatusCode != http.StatusUnprocessableEntity || problemType(t, resp) != "idempotency-key-reused" {
			t.Errorf("%s: %d %s, want 422 idempotency-key-reused", name, resp.StatusCode, resp.Body)
		}
	}
	if got, n := h.providerRefunded(t, "acme", other); n != 0 {
		t.Fatalf("the other charge was refunded %d", got)
	}
}

// TestConcurrentRefundsWithDistinctKeysNeverExceedTheCharge: two clerks,
// one order. Eight refunds of 300 on a charge of 1000 race; three fit.
func TestConcurrentRefundsWithDistinctKeysNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[string]int{}
	)
	for range 8 {
		wg.Go(func() {
			resp, err := h.handler.Handle(t.Context(), postRefund("acme", newKey(), id, `{"amount":300}`))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			kind := fmt.Sprint(resp.StatusCode)
			if resp.StatusCode != http.StatusCreated {
				kind += " " + problemType(t, resp)
			}
			statuses[kind]++
		})
	}
	wg.Wait()
	if statuses["201"] != 3 || statuses["409 refund-exceeds-charge"] != 5 {
		t.Fatalf("answers %v, want 3 201 and 5 409 refund-exceeds-charge", statuses)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 900 || n != 3 {
		t.Fatalf("provider refunded %d in %d refunds, want 900 in 3", got, n)
	}
	if c := h.readCharge(t, "acme", id); c.AmountRefunded != 900 || len(c.Refunds) != 3 {
		t.Fatalf("charge read %+v, want 900 refunded in 3", c)
	}
}

// TestRefundBeyondSettledRefundsIsFinal: what settled refunds returned
// never shrinks, so the refusal is stored and replayed.
func TestRefundBeyondSettledRefundsIsFinal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":800}`)), http.StatusCreated)
	key := newKey()
	first := h.do(postRefund("acme", key, id, `{"amount":300}`))
	if first.StatusCode != http.StatusConflict || problemType(t, first) != "refund-exceeds-charge" || first.Headers["Retry-After"] != "" {
		t.Fatalf("refund beyond what remains: %d %v %s, want a final 409 refund-exceeds-charge", first.StatusCode, first.Headers, first.Body)
	}
	again := h.do(postRefund("acme", key, id, `{"amount":300}`))
	if again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("retry %d %s, want the 409 replayed", again.StatusCode, again.Body)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 800 || n != 1 {
		t.Fatalf("provider refunded %d in %d, want 800 in 1", got, n)
	}
	// What remains is still refundable with a new key.
	wantStatus(t, h.do(postRefund("acme", newKey(), id, "")), http.StatusCreated)
	if c := h.readCharge(t, "acme", id); c.AmountRefunded != 1000 {
		t.Fatalf("refunded %d, want 1000", c.AmountRefunded)
	}
	full := h.do(postRefund("acme", newKey(), id, ""))
	if full.StatusCode != http.StatusConflict || problemType(t, full) != "refund-exceeds-charge" {
		t.Fatalf("a refund of a fully refunded charge: %d %s", full.StatusCode, full.Body)
	}
}

// TestRefundBlockedByOneInFlightMaySucceedLater: a refund refused because
// another refund holds the amount is not final: once that one is proven
// not made, the same key succeeds.
func TestRefundBlockedByOneInFlightMaySucceedLater(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.charged(t, "acme", 1000)
	first := newKey()
	h.faultOn("/refunds", providersim.FaultTimeout) // sent, answer lost: the hold stays
	pending := h.do(postRefund("acme", first, id, `{"amount":700}`))
	if pending.StatusCode != http.StatusServiceUnavailable || problemType(t, pending) != "outcome-pending" {
		t.Fatalf("lost refund answer: %d %s, want 503 outcome-pending", pending.StatusCode, pending.Body)
	}
	h.faultOn("", "")
	second := newKey()
	blocked := h.do(postRefund("acme", second, id, `{"amount":500}`))
	if blocked.StatusCode != http.StatusConflict || problemType(t, blocked) != "refund-exceeds-charge" || blocked.Headers["Retry-After"] == "" {
		t.Fatalf("refund blocked by one in flight: %d %v %s, want 409 with Retry-After", blocked.StatusCode, blocked.Headers, blocked.Body)
	}
	// The first refund landed at the provider: the reconciler records it.
	h.clock.Advance(10 * time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), refundKey(t, "acme", first)); err != nil || out != charge.OutcomeResolvedRefunded {
		t.Fatalf("reconcile: %s, %v; want %s", out, err, charge.OutcomeResolvedRefunded)
	}
	again := h.do(postRefund("acme", second, id, `{"amount":500}`))
	if again.StatusCode != http.StatusConflict || again.Headers["Retry-After"] != "" || again.Headers["Idempotent-Replayed"] != "" {
		t.Fatalf("retry once 700 settled: %d %v %s, want a final 409 (not a replay of the first)", again.StatusCode, again.Headers, again.Body)
	}
	wantStatus(t, h.do(postRefund("acme", first, id, `{"amount":700}`)), http.StatusCreated)
	if got, n := h.providerRefunded(t, "acme", id); got != 700 || n != 1 {
		t.Fatalf("provider refunded %d in %d, want 700 in 1", got, n)
	}
}

// TestRefundNotMadeFreesItsHold: a provider outage proves nothing was
// refunded; the answer says so, and the amount is free again.
func TestRefundNotMadeFreesItsHold(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.charged(t, "acme", 1000)
	h.faultOn("/refunds", providersim.FaultUnavailable)
	key := newKey()
	down := h.do(postRefund("acme", key, id, ""))
	if down.StatusCode != http.StatusServiceUnavailable || problemType(t, down) != "provider-unavailable" || !strings.Contains(down.Body, "Nothing was refunded") {
		t.Fatalf("provider down: %d %s, want 503 provider-unavailable, nothing refunded", down.StatusCode, down.Body)
	}
	h.faultOn("", "")
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":1000}`)), http.StatusCreated)
	if got, n := h.providerRefunded(t, "acme", id); got != 1000 || n != 1 {
		t.Fatalf("provider refunded %d in %d, want 1000 in 1", got, n)
	}
}

// TestRefundCrashBetweenEffectAndRecord: the provider refunded, and the
// transaction that records it is lost. The client hears outcome-pending;
// the reconciler records the refund from the provider's word, with its
// hold settled; the retry gets the 201.
func TestRefundCrashBetweenEffectAndRecord(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.charged(t, "acme", 1000)
	key := newKey()
	h.loseCommits.Store(true)
	pending := h.do(postRefund("acme", key, id, `{"amount":400}`))
	if pending.StatusCode != http.StatusServiceUnavailable || problemType(t, pending) != "outcome-pending" {
		t.Fatalf("lost record: %d %s, want 503 outcome-pending", pending.StatusCode, pending.Body)
	}
	h.loseCommits.Store(false)
	h.clock.Advance(time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), refundKey(t, "acme", key)); err != nil || out != charge.OutcomeResolvedRefunded {
		t.Fatalf("reconcile: %s, %v; want %s", out, err, charge.OutcomeResolvedRefunded)
	}
	again := h.do(postRefund("acme", key, id, `{"amount":400}`))
	wantStatus(t, again, http.StatusCreated)
	if again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("retry after the reconciler: %v", again.Headers)
	}
	// The hold became the settled refund: 600 remain, no more.
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":600}`)), http.StatusCreated)
	if got, n := h.providerRefunded(t, "acme", id); got != 1000 || n != 2 {
		t.Fatalf("provider refunded %d in %d, want 1000 in 2", got, n)
	}
	if c := h.readCharge(t, "acme", id); c.AmountRefunded != 1000 {
		t.Fatalf("refunded %d, want 1000", c.AmountRefunded)
	}
}

// TestRefundNeverSentIsReleasedWithItsHold: the function died after its
// hold and before the provider; once the settle window has passed, the
// reconciler frees the hold and releases the key.
func TestRefundNeverSentIsReleasedWithItsHold(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.charged(t, "acme", 1000)
	key := newKey()
	h.faultOn("/refunds", providersim.FaultUnavailable)
	h.loseCommits.Store(true) // and the release is lost too: the record stays IN_FLIGHT
	h.do(postRefund("acme", key, id, ""))
	h.faultOn("", "")
	h.loseCommits.Store(false)
	h.clock.Advance(10 * time.Minute)
	out, err := h.recon.Reconcile(t.Context(), refundKey(t, "acme", key))
	if err != nil || (out != charge.OutcomeReleased && out != charge.OutcomeNothingToDo) {
		t.Fatalf("reconcile: %s, %v", out, err)
	}
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":1000}`)), http.StatusCreated)
}

// TestRefundOfAChargeNotOursIsNotFoundAndStoresNothing: an unknown id,
// another tenant's charge, or a malformed id.
func TestRefundOfAChargeNotOursIsNotFoundAndStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	for name, req := range map[string]events.APIGatewayV2HTTPRequest{
		"another tenant's": postRefund("globex", "k-"+newKey(), id, ""),
		"unknown":          postRefund("acme", "k-"+newKey(), "ch_000000000000000000000000", ""),
		"malformed":        postRefund("acme", "k-"+newKey(), "ch_x", ""),
	} {
		resp := h.do(req)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", name, resp.StatusCode, resp.Body)
		}
		key := refundKey(t, tenantOf(req), req.Headers["idempotency-key"])
		if _, err := h.store.Get(t.Context(), key); err == nil {
			t.Errorf("%s: a record was stored", name)
		}
	}
	if l := h.sim.Ledger(); len(l.Refunds) != 0 {
		t.Fatalf("the provider was asked: %+v", l.Refunds)
	}
}

// TestRefundBodyRefusedStoresNothing: bad input is a problem, with no
// record and no provider call.
func TestRefundBodyRefusedStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	for _, body := range []string{`{"amount":0}`, `{"amount":-5}`, `{"amount":1.5}`, `{"amount":"5"}`, `{"reason":"because"}`, `{"amount":5,"extra":1}`, `[]`, `null`, `{"amount":null}`, `{"reason":""}`} {
		key := newKey()
		resp := h.do(postRefund("acme", key, id, body))
		if resp.StatusCode != http.StatusBadRequest || problemType(t, resp) != "invalid-request" {
			t.Errorf("%s: %d %s, want 400 invalid-request", body, resp.StatusCode, resp.Body)
		}
		if _, err := h.store.Get(t.Context(), refundKey(t, "acme", key)); err == nil {
			t.Errorf("%s: a record was stored", body)
		}
	}
	noKey := h.do(postRefund("acme", "", id, ""))
	if noKey.StatusCode != http.StatusBadRequest || problemType(t, noKey) != "invalid-idempotency-key" {
		t.Errorf("no key: %d %s", noKey.StatusCode, noKey.Body)
	}
	if l := h.sim.Ledger(); len(l.Refunds) != 0 {
		t.Fatalf("the provider was asked: %+v", l.Refunds)
	}
}

// TestFirstRefundBeyondTheChargeIsFinal: a charge's first refund finds no
// refund_claimed on its row, and must still be held within the amount:
// refused as a final 409, never sent to the provider.
func TestFirstRefundBeyondTheChargeIsFinal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	key := newKey()
	first := h.do(postRefund("acme", key, id, `{"amount":1001}`))
	if first.StatusCode != http.StatusConflict || problemType(t, first) != "refund-exceeds-charge" || first.Headers["Retry-After"] != "" {
		t.Fatalf("first refund beyond the charge: %d %v %s, want a final 409 refund-exceeds-charge", first.StatusCode, first.Headers, first.Body)
	}
	if again := h.do(postRefund("acme", key, id, `{"amount":1001}`)); again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("retry %d %s, want the 409 replayed", again.StatusCode, again.Body)
	}
	if l := h.sim.Ledger(); len(l.Refunds) != 0 {
		t.Fatalf("the provider was asked: %+v", l.Refunds)
	}
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":1000}`)), http.StatusCreated)
}

// TestRefundKeyReusedAfterRetentionIsANewRefund: once a refund key's
// retention has passed, it names a new intent: its own refund, its own
// hold, and the first refund's row stays as it was.
func TestRefundKeyReusedAfterRetentionIsANewRefund(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.charged(t, "acme", 1000)
	key := newKey()
	first := h.do(postRefund("acme", key, id, `{"amount":300}`))
	wantStatus(t, first, http.StatusCreated)
	h.clock.Advance(h.d.Charge().Retention + time.Minute)
	again := h.do(postRefund("acme", key, id, `{"amount":300}`))
	wantStatus(t, again, http.StatusCreated)
	if again.Headers["Idempotent-Replayed"] != "" || again.Headers["Location"] == first.Headers["Location"] {
		t.Fatalf("after retention the key replayed the first refund: %v %s", again.Headers, again.Body)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 600 || n != 2 {
		t.Fatalf("provider refunded %d in %d, want 600 in 2", got, n)
	}
	c := h.readCharge(t, "acme", id)
	if c.AmountRefunded != 600 || len(c.Refunds) != 2 {
		t.Fatalf("charge read %+v, want 600 refunded in 2", c)
	}
	if read := h.do(getRefund("acme", id, strings.TrimPrefix(first.Headers["Location"], "/charges/"+id+"/refunds/"))); read.Body != first.Body {
		t.Fatalf("the first refund reads %s, want %s", read.Body, first.Body)
	}
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
