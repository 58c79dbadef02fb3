package intake_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// A refund message refunds once, however often it is delivered, and an
// HTTP retry with its command id and body replays its 201.
func TestRefundMessageRefundsOnceThatHTTPReplays(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	created, _ := s.api.Handle(t.Context(), testkit.PostCharge("acme", "order-9", renewal))
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(created.Body), &c); err != nil || created.StatusCode != http.StatusCreated {
		t.Fatalf("charge: %d %s", created.StatusCode, created.Body)
	}
	body, err := intake.EncodeRefund("acme", "return-9", c.ID, []byte(`{"amount":500}`))
	if err != nil {
		t.Fatal(err)
	}
	if failed := s.handle(t, record("r1", body), record("r1-copy", body)); len(failed) != 0 {
		t.Fatalf("reported for redelivery: %v", failed)
	}
	if got := s.outcomes(t); !slices.Equal(got["r1"], []string{"created"}) || !slices.Equal(got["r1-copy"], []string{"replayed"}) {
		t.Fatalf("outcomes %v, want created then replayed", got)
	}
	replay, _ := s.api.Handle(t.Context(), testkit.PostRefund("acme", "return-9", c.ID, `{"amount":500.0}`))
	if replay.StatusCode != http.StatusCreated || replay.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("HTTP retry: %d %v %s, want the message's 201 replayed", replay.StatusCode, replay.Headers, replay.Body)
	}
	n := 0
	for _, rf := range s.d.Sim.Ledger().Refunds {
		n += rf.Refunds
	}
	if n != 1 {
		t.Fatalf("provider refunds %d, want 1", n)
	}
}

func TestRefundMessagesMalformed(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"refund without a charge":  `{"tenant":"acme","command_id":"r","operation":"create-refund","request":{}}`,
		"charge naming a charge":   `{"tenant":"acme","command_id":"r","charge_id":"ch_000000000000000000000000","request":{}}`,
		"impossible charge id":     `{"tenant":"acme","command_id":"r","operation":"create-refund","charge_id":"x","request":{}}`,
		"unknown operation":        `{"tenant":"acme","command_id":"r","operation":"capture","charge_id":"ch_000000000000000000000000","request":{}}`,
		"refund with a bad amount": `{"tenant":"acme","command_id":"r","operation":"create-refund","charge_id":"ch_000000000000000000000000","request":{"amount":0}}`,
	} {
		if _, err := intake.ParseMessage(body); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cmd, err := intake.ParseMessage(`{"tenant":"acme","command_id":"r","operation":"create-refund","charge_id":"ch_000000000000000000000000","request":{}}`)
	if err != nil || cmd.Key.Operation() != charge.RefundOperation || cmd.ChargeID != "ch_000000000000000000000000" {
		t.Fatalf("refund message: %+v, %v", cmd, err)
	}
}
