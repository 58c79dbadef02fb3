package charge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// attrQueuedUntil is a charge's mark of the reconcile message in flight
// for its move, in epoch milliseconds.
const attrQueuedUntil = "queued_until"

// QueuedMoves marks a move's reconcile message in flight on its charge's
// row, as dynamostore.Store.MarkQueued marks a command's on its record.
// Its keys are of TransitionOperation.
type QueuedMoves struct {
	Rows *Rows
	// Clock tells a live mark from one that ended. Default time.Now.
	Clock func() time.Time
}

// MarkQueued marks key's move as carried by a message until until, and
// reports whether it did. It does not while another mark is live, nor
// on a charge with no move in flight.
func (q QueuedMoves) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	now := time.Now
	if q.Clock != nil {
		now = q.Clock
	}
	_, err := q.Rows.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                q.Rows.tableName,
		Key:                      rowKey(key.Tenant(), key.ClientKey()),
		UpdateExpression:         aws.String("SET #q = :until"),
		ConditionExpression:      aws.String("#status IN (:capturing, :canceling) AND (attribute_not_exists(#q) OR #q <= :now)"),
		ExpressionAttributeNames: map[string]string{"#status": "status", "#q": attrQueuedUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": number(until.UnixMilli()), ":now": number(now().UnixMilli()),
			":capturing": str(StatusCapturing), ":canceling": str(StatusCanceling),
		},
	})
	if _, marked := errors.AsType[*types.ConditionalCheckFailedException](err); marked {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("charge: mark queued: %w", dynamostore.AsUnavailable(err))
	}
	return true, nil
}

// UnmarkQueued removes the mark MarkQueued set until until; a later mark,
// or none, is left as it is.
func (q QueuedMoves) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	_, err := q.Rows.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 q.Rows.tableName,
		Key:                       rowKey(key.Tenant(), key.ClientKey()),
		UpdateExpression:          aws.String("REMOVE #q"),
		ConditionExpression:       aws.String("#q = :until"),
		ExpressionAttributeNames:  map[string]string{"#q": attrQueuedUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": number(until.UnixMilli())},
	})
	if _, other := errors.AsType[*types.ConditionalCheckFailedException](err); other {
		return nil
	}
	if err != nil {
		return fmt.Errorf("charge: unmark queued: %w", dynamostore.AsUnavailable(err))
	}
	return nil
}
