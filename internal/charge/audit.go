package charge

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/actor"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Who asked for a command, and from where, is kept with it for the audit
// trail (package audit). The record's intent keeps it when the key is
// claimed. The charge's row keeps it when a capture or cancel moves it.
// The entry point puts it in the context (package actor).

// Attributes of the charges table's rows the trail reads apart.
// AttrIdempotencyKey is a row's client key, which the trail never keeps.
// AttrMovedBy names who began a charge's last capture or cancel, as
// actor.Actor's JSON.
const (
	AttrIdempotencyKey = "idempotency_key"
	AttrMovedBy        = "moved_by"
)

// claimant is the actor ctx carries, for an intent: nil if none.
func claimant(ctx context.Context) *actor.Actor {
	a, ok := actor.FromContext(ctx)
	if !ok || a.IsZero() {
		return nil
	}
	return &a
}

// eventIntent is what a provider event's record keeps. It names the
// command and row the event settles, so the audit trail files the event
// with them. Command is the command key's LogHash, never the key.
type eventIntent struct {
	Tenant  string       `json:"tenant"`
	Command string       `json:"command"`
	Row     string       `json:"row,omitempty"`
	By      *actor.Actor `json:"by,omitempty"`
}

// notified is the intent of n's event record: the provider and its event
// id, with the delivery's origin if ctx carries it.
func notified(ctx context.Context, n Notification) []byte {
	by, _ := actor.FromContext(ctx)
	by.Provider, by.Event = n.Provider, n.EventID
	in, _ := json.Marshal(eventIntent{Tenant: n.Command.Tenant(), Command: n.Command.LogHash(), Row: n.Row, By: &by})
	return in
}

// RowKey is the key of the command that wrote item, a row of the charges
// table: a charge's (ChargeOperation) or a refund's (RefundOperation). ok is
// false for an item that is neither.
func RowKey(item map[string]types.AttributeValue) (key idem.Key, ok bool) {
	var r struct {
		Tenant string `dynamodbav:"tenant"`
		ID     string `dynamodbav:"id"`
		Key    string `dynamodbav:"idempotency_key"`
	}
	if attributevalue.UnmarshalMap(item, &r) != nil {
		return idem.Key{}, false
	}
	op := ChargeOperation
	if !IsChargeID(r.ID) {
		op = RefundOperation
	}
	key, err := idem.NewKey(r.Tenant, op, r.Key)
	return key, err == nil
}
