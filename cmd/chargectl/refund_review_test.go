package main

import (
	"context"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestAdminSettleReachesAParkedRefund: a refund is parked like a
// charge (OutcomeParked: "stays IN_FLIGHT ... until an operator settles
// it"), and SettleByOperator now settles refunds (StatusRefunded). But
// `chargectl admin settle TENANT KEY`, the operator's only way to call it,
// always names the key under create-charge (chargeKey) and derives the
// reference with charge.ProviderReference: no invocation reaches a
// refund's record. A parked refund keeps its hold on the charge and
// answers 409 to its client forever.
func TestAdminSettleReachesAParkedRefund(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	ctx := context.Background()
	st, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable)
	if err != nil {
		t.Fatal(err)
	}
	chargeID := "ch_0123456789abcdef01234567"
	_, fp, err := charge.ParseRefundBody(chargeID, []byte(`{"amount":500}`))
	if err != nil {
		t.Fatal(err)
	}
	key, err := idem.NewKey("acme", charge.RefundOperation, "return-7001")
	if err != nil {
		t.Fatal(err)
	}
	begun, err := st.Begin(ctx, key, fp, []byte(`{"charge":"`+chargeID+`","provider_charge":"pc_x","amount":500,"currency":"EUR"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Postpone(ctx, begun.Lease, time.Now().Add(30*24*time.Hour)); err != nil { // parked
		t.Fatal(err)
	}
	s.admin(t, "settle", "--yes", "--operation", "create-refund", "--released", "acme", "return-7001")
	rec, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status == idem.StatusInFlight {
		t.Fatalf("after chargectl admin settle --released acme return-7001, the parked refund is still %s: the command settled no refund", rec.Status)
	}
}
