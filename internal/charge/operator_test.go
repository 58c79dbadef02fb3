package charge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestOperatorSettleRefusesTheOtherOperationsStatus: a refund's key
// settled as charged (or the reverse) is an operator's mistake. It is
// refused before the lease is preempted, so the attempt that holds it can
// still record its outcome.
func TestOperatorSettleRefusesTheOtherOperationsStatus(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t)
	id := h.charged(t, "acme", 1000)
	client := newKey()
	h.faultOn("/refunds", providersim.FaultTimeout) // sent, answer lost: IN_FLIGHT
	pending := h.do(postRefund("acme", client, id, `{"amount":300}`))
	if pending.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("lost refund answer: %d %s, want 503", pending.StatusCode, pending.Body)
	}
	h.faultOn("", "")
	key := refundKey(t, "acme", client)
	before, err := h.store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	charged := provider.Result{Status: provider.StatusCharged, ChargeID: "ch_wrong", Reference: charge.RefundReference(key, before.CreatedAt)}
	_, _, settleErr := h.recon.SettleByOperator(t.Context(), key, charged)
	after, err := h.store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if after.LeaseToken != before.LeaseToken || after.Status != before.Status {
		t.Fatalf("the refused settlement (%v) preempted the lease: %s %s…, was %s %s…",
			settleErr, after.Status, after.LeaseToken[:8], before.Status, before.LeaseToken[:8])
	}
	if settleErr == nil || !strings.Contains(settleErr.Error(), "refunded") {
		t.Fatalf("refund key settled as charged: %v, want an error naming the refund's status", settleErr)
	}

	// A charge whose record is lost after the provider charged it.
	chargeClient := newKey()
	h.loseCommits.Store(true)
	if resp := h.do(post("acme", chargeClient, `{"amount":500,"currency":"EUR","source":"tok_visa"}`)); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("lost charge record: %d %s, want 503", resp.StatusCode, resp.Body)
	}
	h.loseCommits.Store(false)
	chargeKey, err := idem.NewKey("acme", charge.ChargeOperation, chargeClient)
	if err != nil {
		t.Fatal(err)
	}
	before, err = h.store.Get(t.Context(), chargeKey)
	if err != nil {
		t.Fatal(err)
	}
	refunded := provider.Result{Status: provider.StatusRefunded, ChargeID: "re_wrong", Reference: charge.ProviderReference(chargeKey, before.CreatedAt)}
	_, _, settleErr = h.recon.SettleByOperator(t.Context(), chargeKey, refunded)
	if after, err := h.store.Get(t.Context(), chargeKey); err != nil || after.LeaseToken != before.LeaseToken || after.Status != before.Status {
		t.Fatalf("the refused settlement (%v) of a charge preempted the lease (%v)", settleErr, err)
	}
	if settleErr == nil || !strings.Contains(settleErr.Error(), "charged") {
		t.Fatalf("charge key settled as refunded: %v, want an error naming the charge's status", settleErr)
	}
}
