package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// lostRefundAnswers has the provider refund and the answer time out.
type lostRefundAnswers struct{}

func (lostRefundAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/refunds") {
		req = req.Clone(req.Context())
		req.Header.Set(providersim.HeaderFault, providersim.FaultTimeout)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// inFlightRefund charges 1500 and refunds amount of it under clientKey,
// the provider's answer lost: the refund stays IN_FLIGHT with its hold.
// It returns the charge's id.
func (s *adminStack) inFlightRefund(t *testing.T, clientKey string, amount string) string {
	t.Helper()
	h := s.Deployment.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Deps.ProviderOptions = append(w.Deps.ProviderOptions, provider.WithHTTPClient(&http.Client{Transport: lostRefundAnswers{}}))
	})
	created, err := h.Handle(t.Context(), testkit.PostCharge("acme", testkit.UniqueName("order"), settleBody))
	if err != nil || created.StatusCode != http.StatusCreated {
		t.Fatalf("charge: %d %v", created.StatusCode, err)
	}
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(created.Body), &c); err != nil {
		t.Fatal(err)
	}
	resp, err := h.Handle(t.Context(), testkit.PostRefund("acme", clientKey, c.ID, `{"amount":`+amount+`}`))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("refund, its answer lost: %d %v %s, want 503", resp.StatusCode, err, resp.Body)
	}
	return c.ID
}

// TestAdminSettleRefund: an operator settles a refund left IN_FLIGHT as
// the provider's records say. The evidence names the refund's provider
// reference, its amount and its charge; the refund row and the 201 the
// API answers are written, and the charge's refunds count it.
func TestAdminSettleRefund(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	chargeID := s.inFlightRefund(t, "return-6001", "400")
	key, err := idem.NewKey("acme", charge.RefundOperation, "return-6001")
	if err != nil {
		t.Fatal(err)
	}
	code, rec, _ := s.admin(t, "record", "--operation", charge.RefundOperation, "acme", "return-6001")
	if code != exitOK || !strings.Contains(rec, "(create-refund)") || !strings.Contains(rec, "IN_FLIGHT") {
		t.Fatalf("record --operation create-refund: exit %d\n%s", code, rec)
	}
	code, out, errOut := s.admin(t, "settle", "--json", "--yes", "--operation", charge.RefundOperation, "--refunded", "re_operator_6001", "acme", "return-6001")
	var settled settleOutput
	if err := json.Unmarshal([]byte(out), &settled); code != exitOK || err != nil {
		t.Fatalf("settle --refunded: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	ref := charge.RefundReference(key, settled.Evidence.CreatedAt)
	switch {
	case settled.Evidence.ProviderReference != ref || settled.Evidence.Amount != 400 || settled.Evidence.Currency != "EUR" ||
		settled.Evidence.Charge != chargeID || settled.Evidence.Operation != charge.RefundOperation:
		t.Fatalf("evidence %+v, want the refund's reference %s, 400 EUR of %s", settled.Evidence, ref, chargeID)
	case !strings.Contains(errOut, "provider reference:  "+ref) || !strings.Contains(errOut, "refunds charge:") ||
		!strings.Contains(errOut, "refunded by provider refund re_operator_6001"):
		t.Fatalf("evidence on stderr lacks the reference, the charge or the plan:\n%s", errOut)
	case settled.SettledAs != "refunded" || settled.Outcome != charge.OutcomeResolvedRefunded || settled.ProviderChargeID != "re_operator_6001" ||
		settled.Record == nil || settled.Record.Status != idem.StatusSucceeded || settled.Record.Answer == nil || settled.Record.Answer.Status != http.StatusCreated:
		t.Fatalf("settled %+v", settled)
	}
	var refund struct {
		ID             string `json:"id"`
		ProviderRefund string `json:"provider_refund_id"`
	}
	if err := json.Unmarshal([]byte(settled.Record.Answer.Body), &refund); err != nil || refund.ID != charge.RefundID(key, settled.Evidence.CreatedAt) {
		t.Fatalf("stored answer %s: %v", settled.Record.Answer.Body, err)
	}
}

// TestAdminSettleRefusesTheOtherOperationsOutcome: --charged names a
// charge's outcome and --refunded a refund's. Either on a key of the
// other operation is a usage error: nothing is read or written.
func TestAdminSettleRefusesTheOtherOperationsOutcome(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	for name, args := range map[string][]string{
		"charged refund":  {"settle", "--yes", "--operation", charge.RefundOperation, "--charged", "pc_1", "acme", "k"},
		"refunded charge": {"settle", "--yes", "--refunded", "re_1", "acme", "k"},
		"unknown op":      {"record", "--operation", "capture-charge", "acme", "k"},
	} {
		if code, _, errOut := s.admin(t, args...); code != exitUsage {
			t.Errorf("%s: exit %d, want %d (usage)\n%s", name, code, exitUsage, errOut)
		}
	}
}
