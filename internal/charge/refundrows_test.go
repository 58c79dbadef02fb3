package charge_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

// maxRefunds lowers a charge's limit of refunds, so a test reaches it fast.
func maxRefunds(n int) func(*app.ChargeConfig) {
	return func(c *app.ChargeConfig) { c.MaxRefunds = n }
}

// TestRefundBeyondTheLimitIsRefusedForGood: a charge's settled refunds
// at the limit refuse one more, whatever its amount. Settled refunds
// never go away, so the refusal is final: stored for its key, and a new
// key meets it too. The provider is never asked.
func TestRefundBeyondTheLimitIsRefusedForGood(t *testing.T) {
	t.Parallel()
	h := newHarness(t, maxRefunds(2))
	id := h.charged(t, "acme", 1000)
	h.refunded(t, "acme", id, 2)
	key := newKey()
	first := h.do(postRefund("acme", key, id, `{"amount":100}`))
	if first.StatusCode != http.StatusConflict || problemType(t, first) != "refund-limit-reached" || first.Headers["Retry-After"] != "" {
		t.Fatalf("a third refund of a charge limited to 2: %d %v %s, want a final 409 refund-limit-reached", first.StatusCode, first.Headers, first.Body)
	}
	if again := h.do(postRefund("acme", key, id, `{"amount":100}`)); again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("retry %d %v %s, want the 409 replayed", again.StatusCode, again.Headers, again.Body)
	}
	if other := h.do(postRefund("acme", newKey(), id, "")); other.StatusCode != http.StatusConflict || problemType(t, other) != "refund-limit-reached" {
		t.Fatalf("a new key: %d %s, want 409 refund-limit-reached", other.StatusCode, other.Body)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 2 || n != 2 {
		t.Fatalf("provider refunded %d in %d, want 2 in 2", got, n)
	}
}

// TestRefundLimitHeldByOneInFlightIsNotFinal: when a refund in flight
// fills the last place, one more is refused with Retry-After and nothing
// stored. Once that refund is proven not made, its place is free, and
// the same key succeeds.
func TestRefundLimitHeldByOneInFlightIsNotFinal(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t, maxRefunds(2))
	id := h.charged(t, "acme", 1000)
	h.refunded(t, "acme", id, 1)
	lost := newKey()
	h.faultOn("/refunds", edge502) // never forwarded, but the service cannot know
	if pending := h.do(postRefund("acme", lost, id, `{"amount":100}`)); pending.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("refund behind a 502: %d %s, want 503", pending.StatusCode, pending.Body)
	}
	h.faultOn("", "")
	key := newKey()
	held := h.do(postRefund("acme", key, id, `{"amount":100}`))
	if held.StatusCode != http.StatusConflict || problemType(t, held) != "refund-limit-reached" || held.Headers["Retry-After"] == "" {
		t.Fatalf("a refund while one in flight fills the limit: %d %v %s, want 409 refund-limit-reached with Retry-After", held.StatusCode, held.Headers, held.Body)
	}
	h.clock.Advance(10 * time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), refundKey(t, "acme", lost)); err != nil || out != charge.OutcomeReleased {
		t.Fatalf("reconcile: %s, %v; want %s", out, err, charge.OutcomeReleased)
	}
	again := h.do(postRefund("acme", key, id, `{"amount":100}`))
	wantStatus(t, again, http.StatusCreated)
	if again.Headers["Idempotent-Replayed"] != "" {
		t.Fatalf("the retry replayed %s, want a new answer", again.Body)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 101 || n != 2 {
		t.Fatalf("provider refunded %d in %d, want 101 in 2", got, n)
	}
}

// TestRefundNotMadeGivesBackItsPlace: a refund the provider could not be
// asked frees its place under the limit with its hold.
func TestRefundNotMadeGivesBackItsPlace(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t, maxRefunds(1))
	id := h.charged(t, "acme", 1000)
	h.faultOn("/refunds", providersim.FaultUnavailable)
	if down := h.do(postRefund("acme", newKey(), id, `{"amount":100}`)); down.StatusCode != http.StatusServiceUnavailable || problemType(t, down) != "provider-unavailable" {
		t.Fatalf("provider down: %d %s, want 503 provider-unavailable", down.StatusCode, down.Body)
	}
	h.faultOn("", "")
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":100}`)), http.StatusCreated)
}
