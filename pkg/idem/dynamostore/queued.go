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
// key while one is in flight. The mark ends at until, or later if its
// message renews it (RenewQueued), or at UnmarkQueued. It is one
// conditional UpdateItem; a new attempt (a reclaimed RELEASED key)
// starts unmarked.
func (s *Store) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	marked, holder, err := s.markQueued(ctx, key, until, s.region)
	if holder != "" && s.mayWrite(key, holder) {
		// Another Region's record, which the Ledger yields.
		marked, _, err = s.markQueued(ctx, key, until, holder)
	}
	return marked, err
}

// markQueued is MarkQueued of a record holder marked, or left unmarked.
// A record refused for another Region's mark gives that Region.
func (s *Store) markQueued(ctx context.Context, key idem.Key, until time.Time, holder string) (_ bool, elsewhere string, _ error) {
	names := map[string]string{"#status": attrStatus, "#q": attrQueuedUntil, "#qr": attrQueuedRenewed}
	values := map[string]types.AttributeValue{":until": millis(until), ":inflight": inFlight, ":now": millis(s.pol.Now())}
	var tries Attempts
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        s.tableName,
		Key:              s.itemKey(key),
		UpdateExpression: aws.String("SET #q = :until REMOVE #qr"),
		ConditionExpression: aws.String(s.ours(key, holder, names, values) + "#status = :inflight AND " +
			"(attribute_not_exists(#q) OR #q <= :now) AND (attribute_not_exists(#qr) OR #qr <= :now)"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.Option)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		// A live mark, or no record IN_FLIGHT, or not this Region's to
		// write; or this very mark, written by an attempt whose answer
		// was lost.
		if rg, ok := ccf.Item[attrRegion].(*types.AttributeValueMemberS); ok && s.ledger != nil && rg.Value != holder {
			return false, rg.Value, nil
		}
		return !tries.Refused() && sameMillis(ccf.Item[attrQueuedUntil], until), "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("idem: mark queued %s: %w", key.LogHash(), AsUnavailable(err))
	}
	return true, "", nil
}

// RenewQueued keeps the mark MarkQueued set until until live for hold
// more, from the store's clock. A message's handler renews its mark on
// each delivery: a message that fails keeps its key marked through its
// redeliveries. A mark that ended and was replaced, or none, is left as
// it is.
func (s *Store) RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error {
	return s.ofMark(ctx, key, until, "SET #qr = :renewed", map[string]types.AttributeValue{":renewed": millis(s.pol.Now().Add(hold))}, "renew")
}

// UnmarkQueued removes the mark MarkQueued set until until, renewed or
// not, once its message was handled. The key may then be queued again
// when it is stuck. A later mark, or none, is left as it is.
func (s *Store) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	return s.ofMark(ctx, key, until, "REMOVE #q, #qr", map[string]types.AttributeValue{}, "unmark")
}

// ofMark applies update to key's record if it holds the mark until names,
// and this Region may write it; values gains :until. Another mark, or
// none, is left as it is.
func (s *Store) ofMark(ctx context.Context, key idem.Key, until time.Time, update string, values map[string]types.AttributeValue, verb string) error {
	names := map[string]string{"#q": attrQueuedUntil, "#qr": attrQueuedRenewed}
	values[":until"] = millis(until)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.tableName,
		Key:                       s.itemKey(key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(s.ours(key, s.region, names, values) + "#q = :until"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // another mark, or none
	}
	if err != nil {
		return fmt.Errorf("idem: %s queued %s: %w", verb, key.LogHash(), AsUnavailable(err))
	}
	return nil
}
