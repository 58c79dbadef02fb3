package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MarkQueued marks key's IN_FLIGHT record as carried by a queued
// recovery message until until, and reports whether it did. It does
// not while another mark is live at the store's clock. Nor does it on a
// record that is settled, released or absent: it needs no message. A
// sweeper that marks a stuck key before queuing it sends one message a
// key while one is in flight. The mark ends at until, when a lost
// message's key is queued again, or at UnmarkQueued. It is one
// conditional UpdateItem; a new attempt (a reclaimed RELEASED key)
// starts unmarked.
func (s *Store) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.tableName,
		Key:                       s.itemKey(key),
		UpdateExpression:          aws.String("SET #q = :until"),
		ConditionExpression:       aws.String("#status = :inflight AND (attribute_not_exists(#q) OR #q <= :now)"),
		ExpressionAttributeNames:  map[string]string{"#status": attrStatus, "#q": attrQueuedUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": millis(until), ":inflight": inFlight, ":now": millis(s.pol.Now())},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil // a live mark, or no record IN_FLIGHT
	}
	if err != nil {
		return false, fmt.Errorf("idem: mark queued %s: %w", key.LogHash(), AsUnavailable(err))
	}
	return true, nil
}

// UnmarkQueued removes the mark MarkQueued set until until, once its
// message was handled. The key may then be queued again when it is
// stuck. A later mark, or none, is left as it is.
func (s *Store) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.tableName,
		Key:                       s.itemKey(key),
		UpdateExpression:          aws.String("REMOVE #q"),
		ConditionExpression:       aws.String("#q = :until"),
		ExpressionAttributeNames:  map[string]string{"#q": attrQueuedUntil},
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": millis(until)},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // another mark, or none
	}
	if err != nil {
		return fmt.Errorf("idem: unmark queued %s: %w", key.LogHash(), AsUnavailable(err))
	}
	return nil
}
