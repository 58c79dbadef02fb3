package charge

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// The charges table's sparse index of moves in flight.
const (
	IndexTransitions      = "transitions"
	AttrTransitionShard   = "transition_shard"
	AttrAttemptDeadline   = "attempt_deadline"
	attrTransitionAmount  = "transition_amount"
	attrTransitionWaited  = "transition_waited"
	attrTransitionAttempt = "transition_attempt"
	transitionShard       = "0" // one shard: moves in flight are few
)

// errMoved: the row was not in the state a conditional move expected.
// errMoveUnknown: the write of a move failed, and may have landed. A
// retry's failed condition, after an attempt whose answer was lost, is both.
var (
	errMoved       = errors.New("charge: the charge moved meanwhile")
	errMoveUnknown = errors.New("charge: a move's write failed, and may have landed")
)

// beginMove moves c from StatusRequiresCapture into m's transitional state,
// as attempt p, only if it is still there.
func (r *Rows) beginMove(ctx context.Context, c Charge, m move, p pending) error {
	var tries dynamostore.Attempts
	set := "SET #status = :via, #amount = :amount, #deadline = :deadline, #shard = :shard, #attempt = :attempt"
	values := map[string]types.AttributeValue{
		":via": str(m.via), ":from": str(StatusRequiresCapture), ":amount": number(p.amount),
		":deadline": number(p.deadline.UnixMilli()), ":shard": str(transitionShard), ":attempt": str(p.attempt),
	}
	if by := claimant(ctx); by != nil {
		// Who moved it, for the audit trail (actor.go).
		set += ", #by = :by"
		values[":by"] = str(string(by.JSON()))
	}
	err := r.update(ctx, c, set, "#status = :from", values, tries.Option)
	if err != nil && !tries.Refused() {
		// A retry's condition may fail on this very move, landed unanswered.
		return fmt.Errorf("%w: %w", errMoveUnknown, err)
	}
	return err
}

// endMove ends c's move in status to, if the row is still in that move;
// captured, if not zero, is the amount the provider captured.
func (r *Rows) endMove(ctx context.Context, c Charge, to string, captured int64) (Charge, error) {
	set, cond := "SET #status = :to", "#status = :via"
	values := map[string]types.AttributeValue{":to": str(to), ":via": str(c.Status)}
	if to == StatusSucceeded && captured > 0 {
		set += ", #money = :captured"
		values[":captured"] = number(captured)
	}
	switch {
	case to != StatusRequiresCapture:
	case c.transition.attempt != "":
		// "Not made" is proven of one attempt only: a late revert leaves
		// a newer move alone.
		cond += " AND #attempt = :attempt"
		values[":attempt"] = str(c.transition.attempt)
	default:
		// A move begun before attempts were named: its deadline stands in.
		cond += " AND #deadline = :deadline"
		values[":deadline"] = number(c.transition.deadline.UnixMilli())
	}
	// The move's queue mark goes with it: a newer move is queued at once.
	if err := r.update(ctx, c, set+" REMOVE #amount, #deadline, #shard, #waited, #attempt, #queued, #renewed", cond, values); err != nil {
		return Charge{}, err
	}
	c.Status, c.transition = to, pending{}
	if to == StatusSucceeded && captured > 0 {
		c.Money.Amount = captured
	}
	return c, nil
}

// postponeMove moves c's attempt deadline to until, the end of the provider's
// settle window, so the sweeper finds it again then.
func (r *Rows) postponeMove(ctx context.Context, c Charge, until time.Time) error {
	err := r.update(ctx, c, "SET #deadline = :until, #waited = :waited", "#status = :via AND #deadline = :deadline", map[string]types.AttributeValue{
		":until": number(until.UnixMilli()), ":via": str(c.Status), ":deadline": number(c.transition.deadline.UnixMilli()),
		":waited": &types.AttributeValueMemberBOOL{Value: true},
	})
	if errors.Is(err, errMoved) {
		return nil
	}
	return err
}

// moveNames are the attribute names a move's expressions use.
var moveNames = map[string]string{
	"#id": AttrID, "#status": "status", "#amount": attrTransitionAmount, "#deadline": AttrAttemptDeadline,
	"#shard": AttrTransitionShard, "#money": "amount", "#waited": attrTransitionWaited, "#attempt": attrTransitionAttempt,
	"#by": AttrMovedBy, "#queued": AttrQueuedUntil, "#renewed": AttrQueuedRenewed,
}

// update applies expr to c's row if cond holds, else errMoved.
func (r *Rows) update(ctx context.Context, c Charge, expr, cond string, values map[string]types.AttributeValue, optFns ...func(*dynamodb.Options)) error {
	cond = "attribute_exists(#id) AND " + cond
	names := map[string]string{}
	for name, attr := range moveNames {
		// DynamoDB refuses a name the expressions do not use.
		if strings.Contains(expr+cond, name) {
			names[name] = attr
		}
	}
	_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 r.tableName,
		Key:                       rowKey(c.Tenant, c.ID),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, optFns...)
	if _, moved := errors.AsType[*types.ConditionalCheckFailedException](err); moved {
		return errMoved
	}
	if err != nil {
		return fmt.Errorf("charge: move: %w", dynamostore.AsUnavailable(err))
	}
	return nil
}

// Shards is the number of shards of the index of moves in flight.
func (r *Rows) Shards() int { return 1 }

// StuckLeases yields the moves whose attempt deadline passed before
// before, as records of TransitionOperation for the sweeper.
func (r *Rows) StuckLeases(ctx context.Context, _ int, before time.Time) iter.Seq2[idem.Record, error] {
	return func(yield func(idem.Record, error) bool) {
		in := &dynamodb.QueryInput{
			TableName:                r.tableName,
			IndexName:                aws.String(IndexTransitions),
			KeyConditionExpression:   aws.String("#shard = :shard AND #deadline < :before"),
			ExpressionAttributeNames: map[string]string{"#shard": AttrTransitionShard, "#deadline": AttrAttemptDeadline},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":shard": str(transitionShard), ":before": number(before.UnixMilli()),
			},
		}
		for {
			out, err := r.db.Query(ctx, in)
			if err != nil {
				yield(idem.Record{}, fmt.Errorf("charge: moves in flight: %w", dynamostore.AsUnavailable(err)))
				return
			}
			for _, item := range out.Items {
				if !yield(movedRecord(item)) {
					return
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				return
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
}

// movedRecord is an index item as the sweeper reads a stuck lease.
func movedRecord(item map[string]types.AttributeValue) (idem.Record, error) {
	tenant, _ := item[AttrTenant].(*types.AttributeValueMemberS)
	id, _ := item[AttrID].(*types.AttributeValueMemberS)
	deadline, _ := item[AttrAttemptDeadline].(*types.AttributeValueMemberN)
	if tenant == nil || id == nil || deadline == nil {
		return idem.Record{}, fmt.Errorf("%w: a move in flight without its keys", idem.ErrUnreadableRecord)
	}
	ms, err := strconv.ParseInt(deadline.Value, 10, 64)
	k, kerr := idem.NewKey(tenant.Value, TransitionOperation, id.Value)
	if err != nil || kerr != nil {
		return idem.Record{}, fmt.Errorf("%w: a move in flight", idem.ErrUnreadableRecord)
	}
	return idem.Record{Key: k, Status: idem.StatusInFlight, LeaseExpiresAt: time.UnixMilli(ms)}, nil
}
