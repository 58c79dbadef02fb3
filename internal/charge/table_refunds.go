package charge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// A refund's row lives in the charges table beside its charge. Its id is
// "<charge id>#<refund id>", so one Query reads a charge with its refunds.
//
// The charge's row holds the constraint. refund_claimed is what settled
// refunds returned, plus what refunds in flight hold. Each of those holds
// its amount in an attribute of its own, hold_<refund id>. A hold is
// placed before the provider is asked. It is placed only if refund_claimed
// stays within the charge's amount. The refund's transaction settles it
// into amount_refunded. A refund proven not made frees it.
//
// refund_count bounds a charge's refunds, so its reads stay bounded. It
// counts refund rows and holds. A hold adds one within the limit, and only
// freeing a hold takes one away.
const (
	attrRefunded = "amount_refunded"
	attrClaimed  = "refund_claimed"
	attrCount    = "refund_count"
	// HoldPrefix and a refund's id name its hold. The audit trail reads
	// which refunds a change of the charge's row holds.
	HoldPrefix = "hold_"
)

// Why a hold was refused.
var (
	// errExceedsFinal: settled refunds leave less than the amount.
	errExceedsFinal = errors.New("charge: refund exceeds what settled refunds leave")
	// errExceedsHeld: refunds in flight hold what the amount needs. If
	// they fail, it may fit.
	errExceedsHeld = errors.New("charge: refund exceeds what refunds in flight leave")
	// errNotRefundable: the charge is in no state to refund.
	errNotRefundable = errors.New("charge: not in a state to refund")
	// errLimitFinal: the charge's refund rows reach the limit.
	errLimitFinal = errors.New("charge: refunds reach the limit")
	// errLimitHeld: refunds in flight fill what the limit leaves. If one
	// fails, a place is free.
	errLimitHeld = errors.New("charge: refunds in flight fill the limit")
)

// refundRowID is the id of refund's row in the charges table.
func refundRowID(chargeID, refundID string) string { return chargeID + "#" + refundID }

// parseRefundRowID is the charge and refund ids of a refund's row id; ok
// is false for any other row id.
func parseRefundRowID(row string) (chargeID, refundID string, ok bool) {
	chargeID, refundID, _ = strings.Cut(row, "#")
	return chargeID, refundID, IsChargeID(chargeID) && IsRefundID(refundID)
}

// hold reserves amount of tenant's charge c for the refund refundID. It
// does if what remains allows, and the charge has fewer than limit
// refunds. It returns nil, or errExceedsFinal, errExceedsHeld,
// errLimitFinal, errLimitHeld or errNotRefundable. A hold already placed
// for refundID is kept.
func (r *Rows) hold(ctx context.Context, c Charge, refundID string, amount int64, limit int) error {
	_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        r.tableName,
		Key:              rowKey(c.Tenant, c.ID),
		UpdateExpression: aws.String("SET #hold = :amount ADD #claimed :amount, #count :one"),
		ConditionExpression: aws.String("attribute_exists(#id) AND #status = :succeeded AND attribute_not_exists(#hold)" +
			" AND #charged >= :amount AND (attribute_not_exists(#claimed) OR #claimed <= :max)" +
			" AND (attribute_not_exists(#count) OR #count < :limit)"),
		ExpressionAttributeNames: map[string]string{
			"#id": AttrID, "#status": "status", "#hold": HoldPrefix + refundID, "#claimed": attrClaimed, "#charged": "amount",
			"#count": attrCount,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":amount":    number(amount),
			":max":       number(c.Money.Amount - amount),
			":one":       number(1),
			":limit":     number(int64(limit)),
			":succeeded": &types.AttributeValueMemberS{Value: StatusSucceeded},
		},
	})
	var failed *types.ConditionalCheckFailedException
	if !errors.As(err, &failed) {
		if err != nil {
			return fmt.Errorf("charge: hold: %w", dynamostore.AsUnavailable(err))
		}
		return nil
	}
	// Why it failed is read after the fact. That is safe: what settled
	// refunds returned only grows, unless one fails later at the provider
	// (rare). So a refusal that rests on it is final. Refund rows are
	// never deleted, so a limit they reach is final too.
	row, found, err := getRow(ctx, r, c.Tenant, c.ID, func(item map[string]types.AttributeValue) (map[string]types.AttributeValue, error) { return item, nil })
	switch {
	case err != nil:
		return err
	case !found:
		return errNotRefundable
	}
	if _, held := row[HoldPrefix+refundID]; held {
		return nil // this refund's own hold, placed by an earlier try
	}
	got, err := rowCharge(row)
	switch {
	case err != nil:
		return fmt.Errorf("charge: stored row: %w", err)
	case got.Status != StatusSucceeded:
		return errNotRefundable
	case got.AmountRefunded+amount > got.Money.Amount:
		return errExceedsFinal
	}
	// The count less the holds in flight is the refund rows.
	var count, holds int64
	if n, ok := row[attrCount].(*types.AttributeValueMemberN); ok {
		count, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	for name := range row {
		if strings.HasPrefix(name, HoldPrefix) {
			holds++
		}
	}
	switch {
	case count-holds >= int64(limit):
		return errLimitFinal
	case count >= int64(limit):
		return errLimitHeld
	}
	return errExceedsHeld
}

// free gives back refundID's hold on tenant's charge, if it still holds
// one. Freeing twice frees once.
func (r *Rows) free(ctx context.Context, tenant, chargeID, refundID string, amount int64) error {
	_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                r.tableName,
		Key:                      rowKey(tenant, chargeID),
		UpdateExpression:         aws.String("REMOVE #hold ADD #claimed :less, #count :minus"),
		ConditionExpression:      aws.String("attribute_exists(#hold)"),
		ExpressionAttributeNames: map[string]string{"#hold": HoldPrefix + refundID, "#claimed": attrClaimed, "#count": attrCount},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":less": number(-amount), ":minus": number(-1),
		},
	})
	if _, gone := errors.AsType[*types.ConditionalCheckFailedException](err); gone {
		return nil
	}
	if err != nil {
		return fmt.Errorf("charge: free a hold: %w", dynamostore.AsUnavailable(err))
	}
	return nil
}

// settleHold is the write that turns the refund's hold into a settled
// refund, if the hold is there. It is part of the refund's transaction.
// Without held, it records a refund whose hold was freed on evidence the
// provider then contradicted. The money moved, so the books count it,
// whatever the constraint and the limit say.
func (r *Rows) settleHold(rf Refund, held bool) types.TransactWriteItem {
	update, cond := "REMOVE #hold ADD #refunded :amount", "attribute_exists(#hold)"
	names := map[string]string{"#hold": HoldPrefix + rf.ID, "#refunded": attrRefunded}
	values := map[string]types.AttributeValue{":amount": number(rf.Money.Amount)}
	if !held {
		update, cond = "ADD #refunded :amount, #claimed :amount, #count :one", "attribute_not_exists(#hold)"
		names["#claimed"], names["#count"], values[":one"] = attrClaimed, attrCount, number(1)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 r.tableName,
		Key:                       rowKey(rf.Tenant, rf.ChargeID),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}}
}

// InsertRefund is the write of rf's row, only if no row has its id.
func (r *Rows) InsertRefund(rf Refund) types.TransactWriteItem {
	// A struct of strings and integers always marshals.
	item, _ := attributevalue.MarshalMap(refundRow{
		Tenant: rf.Tenant, ID: refundRowID(rf.ChargeID, rf.ID), RefundID: rf.ID, ChargeID: rf.ChargeID,
		Amount: rf.Money.Amount, Currency: rf.Money.Currency, Reason: rf.Reason, Status: StatusSucceeded,
		ProviderReference: rf.ProviderReference, ProviderRefundID: rf.ProviderRefundID,
		IdempotencyKey: string(rf.IdempotencyKey), CreatedAt: rf.CreatedAt.UTC().Format(TimeLayout),
	})
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                r.tableName,
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": AttrID},
	}}
}

// GetRefund reads tenant's refund refundID of the charge chargeID.
func (r *Rows) GetRefund(ctx context.Context, tenant, chargeID, refundID string) (Refund, bool, error) {
	return getRow(ctx, r, tenant, refundRowID(chargeID, refundID), rowRefund)
}

// GetWithRefunds reads tenant's charge id and all its refunds, oldest
// first. One strongly consistent Query reads them, paged if they outgrow a
// page. The limit on a charge's refunds bounds what it reads. It keeps the
// row id and the rows "id#…" alone: a row whose id merely begins with id
// is another's.
func (r *Rows) GetWithRefunds(ctx context.Context, tenant, id string) (Charge, bool, error) {
	in := &dynamodb.QueryInput{
		TableName:                r.tableName,
		KeyConditionExpression:   aws.String("#tenant = :tenant AND begins_with(#id, :id)"),
		FilterExpression:         aws.String("#id = :id OR begins_with(#id, :refunds)"),
		ExpressionAttributeNames: map[string]string{"#tenant": AttrTenant, "#id": AttrID},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tenant": &types.AttributeValueMemberS{Value: tenant}, ":id": &types.AttributeValueMemberS{Value: id},
			":refunds": &types.AttributeValueMemberS{Value: refundRowID(id, "")},
		},
		ConsistentRead: aws.Bool(true),
	}
	var (
		c     Charge
		found bool
	)
	for {
		out, err := r.db.Query(ctx, in)
		if err != nil {
			return Charge{}, false, fmt.Errorf("charge: get: %w", dynamostore.AsUnavailable(err))
		}
		for _, item := range out.Items {
			if _, refund := item["charge_id"]; refund {
				rf, err := rowRefund(item)
				if err != nil {
					return Charge{}, false, fmt.Errorf("charge: stored refund row: %w", err)
				}
				c.Refunds = append(c.Refunds, rf)
				continue
			}
			refunds := c.Refunds
			if c, err = rowCharge(item); err != nil {
				return Charge{}, false, fmt.Errorf("charge: stored row: %w", err)
			}
			c.Refunds, found = refunds, true
		}
		if len(out.LastEvaluatedKey) == 0 {
			// Oldest first; ids, random, break ties.
			slices.SortStableFunc(c.Refunds, func(a, b Refund) int {
				return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
			})
			return c, found, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// refundRow is a refund as its item holds it.
type refundRow struct {
	Tenant            string `dynamodbav:"tenant"`
	ID                string `dynamodbav:"id"`
	RefundID          string `dynamodbav:"refund_id"`
	ChargeID          string `dynamodbav:"charge_id"`
	Amount            int64  `dynamodbav:"amount"`
	Currency          string `dynamodbav:"currency"`
	Reason            string `dynamodbav:"reason,omitempty"`
	Status            string `dynamodbav:"status"`
	ProviderReference string `dynamodbav:"provider_reference"`
	ProviderRefundID  string `dynamodbav:"provider_refund_id"`
	IdempotencyKey    string `dynamodbav:"idempotency_key"`
	CreatedAt         string `dynamodbav:"created_at"`
}

func rowRefund(item map[string]types.AttributeValue) (Refund, error) {
	var w refundRow
	if err := attributevalue.UnmarshalMap(item, &w); err != nil {
		return Refund{}, err
	}
	created, err := time.Parse(TimeLayout, w.CreatedAt)
	if err != nil {
		return Refund{}, err
	}
	return Refund{
		ID: w.RefundID, ChargeID: w.ChargeID, Tenant: w.Tenant, Money: Money{Amount: w.Amount, Currency: w.Currency}, Status: w.Status,
		Reason: w.Reason, ProviderReference: w.ProviderReference, ProviderRefundID: w.ProviderRefundID,
		IdempotencyKey: CommandID(w.IdempotencyKey), CreatedAt: created,
	}, nil
}

// failRefund records that rf, refunded, failed later at the provider. Its
// row reads failed, and its charge gets the amount back. Both happen in
// one transaction, once.
func (r *Rows) failRefund(ctx context.Context, rf Refund) error {
	_, err := r.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                 r.tableName,
			Key:                       rowKey(rf.Tenant, refundRowID(rf.ChargeID, rf.ID)),
			UpdateExpression:          aws.String("SET #status = :failed"),
			ConditionExpression:       aws.String("#status = :succeeded"),
			ExpressionAttributeNames:  map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":failed": str(RefundFailed), ":succeeded": str(StatusSucceeded)},
		}},
		{Update: &types.Update{
			TableName:                 r.tableName,
			Key:                       rowKey(rf.Tenant, rf.ChargeID),
			UpdateExpression:          aws.String("ADD #refunded :less, #claimed :less"),
			ExpressionAttributeNames:  map[string]string{"#refunded": attrRefunded, "#claimed": attrClaimed},
			ExpressionAttributeValues: map[string]types.AttributeValue{":less": number(-rf.Money.Amount)},
		}},
	}})
	if tce, ok := errors.AsType[*types.TransactionCanceledException](err); ok {
		if len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
			return nil // failed already: its row no longer reads succeeded
		}
		// Cancelled for another reason, such as a write on the charge's
		// row at once. Nothing was written, and a redelivery tries again.
		return fmt.Errorf("charge: fail a refund: %w: %w", idem.ErrUnavailable, err)
	}
	if err != nil {
		return fmt.Errorf("charge: fail a refund: %w", dynamostore.AsUnavailable(err))
	}
	return nil
}
