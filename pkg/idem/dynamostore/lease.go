package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/claims"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// Heartbeat extends the lease for long work, and the attempt's deadline
// with it. It extends them to the bound Begin would give from ctx. It is
// fenced like Commit.
//
// It is for a holder that runs its own work, such as a resolver. It does
// not extend the context Do gave its function. That context ends at the
// lease's deadline when the function began. For long work, give Do a
// context whose deadline covers it, up to MaxLease.
func (s *Store) Heartbeat(ctx context.Context, l *idem.Lease) error {
	// A heartbeat never shortens the lease. A call without a deadline
	// would give the default lease, ending before the attempt's context
	// does.
	until := s.pol.LeaseUntil(ctx, s.pol.Clock())
	if until.Before(l.ExpiresAt) {
		until = l.ExpiresAt
	}
	if err := s.extend(ctx, "heartbeat", l, until, true); err != nil {
		return err
	}
	l.ExpiresAt, l.AttemptDeadline = until, until
	l.RecordExpiresAt = s.pol.Earliest(l.CreatedAt, until)
	return nil
}

// Postpone keeps the command IN_FLIGHT but gives up the lease until the
// given time. Nobody takes it over before then, and the stuck-lease index
// lists it again after. A reconciler calls it to say when to try next. It
// does when it cannot settle a command yet: the provider is down, or its
// "not found" is not yet trusted. Postpone is fenced like Commit.
func (s *Store) Postpone(ctx context.Context, l *idem.Lease, until time.Time) error {
	until = time.UnixMilli(until.UnixMilli())
	if err := s.extend(ctx, "postpone", l, until, false); err != nil {
		return err
	}
	l.ExpiresAt = until
	l.RecordExpiresAt = s.pol.Earliest(l.CreatedAt, until)
	return nil
}

// extend moves l's lease to until. If attempt is set, the attempt deadline
// moves with it.
func (s *Store) extend(ctx context.Context, op string, l *idem.Lease, until time.Time, attempt bool) error {
	if err := s.extendClaim(ctx, op, l.Key, l.CreatedAt, until); err != nil {
		return err
	}
	expr := "SET #lexp = :lexp"
	names := map[string]string{"#lexp": s.layout.lexp}
	if attempt {
		expr += ", #ad = :lexp"
		names["#ad"] = attrAttemptDeadline
	}
	_, err := s.db.UpdateItem(ctx, updateItem(s.fenced(l, expr, names, map[string]types.AttributeValue{":lexp": millis(until)})))
	if err == nil {
		return nil
	}
	// Setting the same lease twice changes nothing. So a retried extension
	// whose first answer was lost passes its own fence. A failed fence is
	// always someone else's doing.
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), idem.ErrLeaseLost)
	}
	return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), AsUnavailable(err))
}

// TakeOver gives the caller a new lease on an IN_FLIGHT record whose lease
// has expired, for reconciliation. It counts the attempt. The previous
// holder's token stops working. An IN_FLIGHT record is taken over however
// old it is: it never expires. A record still leased gives *InFlightError.
// A terminal one gives ErrCompleted. A released, absent or expired one
// gives ErrNotFound.
func (s *Store) TakeOver(ctx context.Context, key idem.Key) (*idem.Lease, error) {
	return s.takeOver(ctx, key, "take over", time.Time{})
}

// Preempt takes over an IN_FLIGHT record whatever its lease, and is like
// TakeOver otherwise. The holder's token stops working at once. Its late
// Commit, Fail or Release fails with ErrLeaseLost, and cannot settle the
// command again.
//
// It is for a caller that knows the effect's outcome from the effect's own
// source. A payment provider's signed notification is one. That caller
// need not wait for the holder to give up. A caller that still has to find
// out must use TakeOver.
//
// A RELEASED record within its retention is claimed back to IN_FLIGHT the
// same way. Such a caller has proof that the effect happened after all,
// which the release missed. It must record it. A terminal record gives
// ErrCompleted. An absent or expired one gives ErrNotFound.
//
// created is the CreatedAt of the command the caller checked its proof
// against. The record under key may be another command's: the checked one
// expired, and a new intent claimed the key. That gives ErrNotFound: the
// proof is not this command's.
func (s *Store) Preempt(ctx context.Context, key idem.Key, created time.Time) (*idem.Lease, error) {
	if created.IsZero() {
		return nil, fmt.Errorf("idem: preempt %s: a zero CreatedAt names no command: %w", key.LogHash(), idem.ErrNotFound)
	}
	return s.takeOver(ctx, key, "preempt", created)
}

// takeOver gives the caller a new lease on an IN_FLIGHT record. It does
// only once its lease has run out, unless created is set. Then it is a
// preemption of the command created at created.
func (s *Store) takeOver(ctx context.Context, key idem.Key, op string, created time.Time) (*idem.Lease, error) {
	lease, holder, err := s.takeOverFrom(ctx, key, op, created, s.region)
	if holder != "" && s.mayWrite(key, holder) {
		// Another Region's record, which the Ledger yields. It
		// is taken only from that Region, so a record written
		// meanwhile is not.
		lease, _, err = s.takeOverFrom(ctx, key, op, created, holder)
	}
	if err != nil {
		return nil, err
	}
	// The lease is not handed out until the claim lasts as long: one
	// dropped here settles nothing. Its record is written by then, under
	// a lease nobody holds: never "nothing was written". The write comes
	// first: a take-over learns the command's CreatedAt from it.
	if err := s.extendClaim(ctx, op, key, lease.CreatedAt, lease.ExpiresAt); err != nil {
		return nil, &idem.UnknownClaimError{LeaseExpiresAt: lease.ExpiresAt, RecordExpiresAt: lease.RecordExpiresAt, Err: err}
	}
	if err := claims.TakenOver(ctx, op, lease, claims.ReadOn(s.ledger, s.stored), s.mark(op), s.settle(op)); err != nil {
		return nil, err
	}
	return lease, nil
}

// takeOverFrom is takeOver of a record region marked, or left unmarked.
// holder names the Region that marked a record refused for its mark.
func (s *Store) takeOverFrom(ctx context.Context, key idem.Key, op string, created time.Time, region string) (_ *idem.Lease, holder string, _ error) {
	live := !created.IsZero()
	now := s.pol.Now()
	token, err := s.pol.Token()
	if err != nil {
		return nil, "", err
	}
	lease := &idem.Lease{Key: key, Token: token, ExpiresAt: s.pol.LeaseUntil(ctx, now)}
	cond, update := "#status = :inflight", "SET #tok = :tok, #lexp = :lexp"
	names := map[string]string{
		"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": s.layout.lexp, "#att": attrAttempts,
	}
	values := map[string]types.AttributeValue{
		":inflight": inFlight, ":tok": str(token), ":lexp": millis(lease.ExpiresAt), ":one": num(1),
	}
	if live {
		// A live RELEASED record goes back to IN_FLIGHT, into the
		// stuck-lease index, with no expiry. A re-claim does the same.
		cond = "#ct = :ct AND (#status = :inflight OR (#status = :released AND #exp > :nows))"
		names["#ct"], values[":ct"] = attrCreatedAt, millis(created)
		update = "SET #status = :inflight, #tok = :tok, #lexp = :lexp, #shard = :shard, #ad = if_not_exists(#ad, :lexp) REMOVE #exp"
		names["#exp"], names["#shard"], names["#ad"] = s.layout.ttl, s.layout.shard, attrAttemptDeadline
		values[":released"], values[":nows"], values[":shard"] = statusAttrs[idem.StatusReleased], seconds(now), num(int64(s.shard(key)))
	} else {
		cond += " AND #lexp < :now"
		values[":now"] = millis(now)
	}
	if s.ledger != nil {
		update = strings.Replace(update, "SET ", "SET #region = :region, ", 1)
		values[":region"] = str(s.region)
	}
	cond = s.ours(key, region, names, values) + cond
	var tries Attempts
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.tableName,
		Key:                                 s.itemKey(key),
		UpdateExpression:                    aws.String(update + " ADD #att :one"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.Option)
	var item map[string]types.AttributeValue
	if err == nil {
		item = out.Attributes
	} else {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			if !tries.Refused() {
				// It may have landed: the lease is then ours, its answer
				// lost. Not AsUnavailable: that would say nothing was written.
				return nil, "", fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), &idem.UnknownClaimError{
					LeaseExpiresAt: lease.ExpiresAt, RecordExpiresAt: lease.ExpiresAt, Err: err,
				})
			}
			return nil, "", fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), AsUnavailable(err))
		}
		if len(ccf.Item) == 0 {
			return nil, "", fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), idem.ErrNotFound)
		}
		if marked, ok := ccf.Item[attrRegion].(*types.AttributeValueMemberS); ok && s.ledger != nil && marked.Value != region && !ownToken(ccf.Item, lease) {
			return nil, marked.Value, fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), &idem.ClaimedElsewhereError{Region: marked.Value})
		}
		if ct, err := numberAttr(ccf.Item, attrCreatedAt); err == nil && !s.replicated(key, time.UnixMilli(ct)) && !ownToken(ccf.Item, lease) {
			return nil, "", fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), &idem.ClaimedElsewhereError{})
		}
		if !ownToken(ccf.Item, lease) {
			return nil, "", s.notTaken(key, ccf.Item, now, created)
		}
		// Our own take-over, retried by the SDK after its answer was lost.
		item = ccf.Item
	}
	rec, err := s.decodeRecord(key, item)
	if err != nil {
		return nil, "", err
	}
	lease.CreatedAt, lease.AttemptDeadline, lease.Attempts, lease.Intent = rec.CreatedAt, rec.AttemptDeadline, rec.Attempts, rec.Intent
	lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
	return lease, "", nil
}

// notTaken explains a take-over refused by the record item.
func (s *Store) notTaken(key idem.Key, item map[string]types.AttributeValue, now, created time.Time) error {
	rec, err := s.decodeRecord(key, item)
	switch {
	case err != nil:
		return err
	case rec.Status == idem.StatusReleased || policy.Expired(rec.ExpiresAt, now) || !created.IsZero() && rec.CreatedAt.UnixMilli() != created.UnixMilli():
		return fmt.Errorf("idem: take over %s: %w", key.LogHash(), idem.ErrNotFound)
	case rec.Status.Terminal():
		return fmt.Errorf("idem: take over %s: %w", key.LogHash(), idem.ErrCompleted)
	default:
		return &idem.InFlightError{LeaseExpiresAt: rec.LeaseExpiresAt, RecordExpiresAt: s.pol.Earliest(rec.CreatedAt, rec.LeaseExpiresAt)}
	}
}
