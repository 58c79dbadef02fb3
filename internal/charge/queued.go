package charge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// AttrQueuedUntil is a charge's mark of the reconcile message in flight
// for its move, in epoch milliseconds; AttrQueuedRenewed is how long its
// deliveries renewed it. The audit trail tells a mark's change apart.
const (
	AttrQueuedUntil   = "queued_until"
	AttrQueuedRenewed = "queued_renewed"
)

// QueuedMoves marks a move's reconcile message in flight on its charge's
// row, as dynamostore.Store.MarkQueued marks a command's on its record.
// Its keys are of TransitionOperation.
type QueuedMoves struct {
	Rows *Rows
	// Clock tells a live mark from one that ended. Default time.Now.
	Clock func() time.Time
	// Unreplicated is since when a Region not yet drained may hold
	// newer writes of a tenant's rows (regions.Fence.Unreplicated). A
	// row created before then is left unmarked. Nil in one Region.
	Unreplicated func(idem.Key) time.Time
}

// MarkQueued marks key's move as carried by a message until until, and
// reports whether it did. It does not while another mark is live, nor
// on a charge with no move in flight.
func (q QueuedMoves) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	var tries dynamostore.Attempts
	names := map[string]string{"#status": "status", "#q": AttrQueuedUntil, "#qr": AttrQueuedRenewed}
	values := map[string]types.AttributeValue{
		":until": number(until.UnixMilli()), ":now": number(q.now().UnixMilli()),
		":capturing": str(StatusCapturing), ":canceling": str(StatusCanceling),
	}
	_, err := q.Rows.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        q.Rows.tableName,
		Key:              rowKey(key.Tenant(), key.ClientKey()),
		UpdateExpression: aws.String("SET #q = :until REMOVE #qr"),
		ConditionExpression: aws.String(q.replicated(key, names, values) + "#status IN (:capturing, :canceling) AND " +
			"(attribute_not_exists(#q) OR #q <= :now) AND (attribute_not_exists(#qr) OR #qr <= :now)"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.Option)
	if ccf, failed := errors.AsType[*types.ConditionalCheckFailedException](err); failed {
		// A live mark, or no move; or this very mark, written by an
		// attempt whose answer was lost.
		old, _ := ccf.Item[AttrQueuedUntil].(*types.AttributeValueMemberN)
		return !tries.Refused() && old != nil && old.Value == strconv.FormatInt(until.UnixMilli(), 10), nil
	}
	if err != nil {
		return false, fmt.Errorf("charge: mark queued: %w", dynamostore.AsUnavailable(err))
	}
	return true, nil
}

// RenewQueued keeps the mark MarkQueued set until until live for hold
// more; another mark, or none, is left as it is.
func (q QueuedMoves) RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error {
	return q.conditional(ctx, key, until, "SET #qr = :renewed", map[string]types.AttributeValue{
		":renewed": number(q.now().Add(hold).UnixMilli()),
	}, "renew")
}

// UnmarkQueued removes the mark MarkQueued set until until, renewed or
// not; a later mark, or none, is left as it is.
func (q QueuedMoves) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	return q.conditional(ctx, key, until, "REMOVE #q, #qr", map[string]types.AttributeValue{}, "unmark")
}

// conditional applies update to key's row if its mark is the one until
// names; values gains :until.
func (q QueuedMoves) conditional(ctx context.Context, key idem.Key, until time.Time, update string, values map[string]types.AttributeValue, verb string) error {
	values[":until"] = number(until.UnixMilli())
	names := map[string]string{"#q": AttrQueuedUntil, "#qr": AttrQueuedRenewed}
	_, err := q.Rows.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 q.Rows.tableName,
		Key:                       rowKey(key.Tenant(), key.ClientKey()),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(q.replicated(key, names, values) + "#q = :until"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if _, other := errors.AsType[*types.ConditionalCheckFailedException](err); other {
		return nil
	}
	if err != nil {
		return fmt.Errorf("charge: %s queued: %w", verb, dynamostore.AsUnavailable(err))
	}
	return nil
}

// replicated is the condition, ending in AND, that key's row was created
// no earlier than Unreplicated. An older row may have changed in a Region
// not drained: a mark here could be lost to last writer wins, or undo it.
// It adds its names and values; empty when no Region is pending.
func (q QueuedMoves) replicated(key idem.Key, names map[string]string, values map[string]types.AttributeValue) string {
	if q.Unreplicated == nil {
		return ""
	}
	u := q.Unreplicated(key)
	if u.IsZero() {
		return ""
	}
	// created_at is UTC in TimeLayout: its strings sort as its times.
	names["#ct"], values[":unrepl"] = "created_at", str(u.UTC().Format(TimeLayout))
	return "#ct >= :unrepl AND "
}

func (q QueuedMoves) now() time.Time {
	if q.Clock != nil {
		return q.Clock()
	}
	return time.Now()
}
