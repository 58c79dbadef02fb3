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
	"github.com/chargeonce/chargeonce/pkg/idem/internal/claims"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// settledUntil is when a record l settles as status stops deduplicating.
// It depends on the lease alone, so a retried completion writes the same.
func (s *Store) settledUntil(l *idem.Lease, status idem.Status) time.Time {
	return s.pol.SettledUntil(status == idem.StatusReleased, l.CreatedAt, l.ExpiresAt)
}

// settlement is the fenced update that moves a record from IN_FLIGHT to
// status. A terminal status stores resp. The record leaves the stuck-lease
// index and starts its retention. It keeps the lease token, by which a
// retried settlement recognises itself. It is a function of its arguments
// alone, its times from the lease. So a retried call sends the same
// request.
type settlement struct {
	op      string
	status  idem.Status
	resp    idem.Response // stored if hasResp (a terminal status)
	hasResp bool
	update  types.Update
}

func (s *Store) settlement(op string, l *idem.Lease, status idem.Status, resp *idem.Response) (settlement, error) {
	expr := "SET #status = :status, #exp = :exp"
	names := map[string]string{"#exp": s.layout.ttl, "#lexp": s.layout.lexp, "#shard": s.layout.shard, "#ad": attrAttemptDeadline}
	values := map[string]types.AttributeValue{":status": statusAttrs[status], ":exp": seconds(s.settledUntil(l, status))}
	st := settlement{op: op, status: status}
	if resp != nil {
		attrs, err := encodeResponse(*resp, s.pol.CompressAbove, len(l.Intent))
		if err != nil {
			return settlement{}, fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), err)
		}
		st.resp, st.hasResp = *resp, true
		expr += ", #rs = :rs, #rh = :rh, #rb = :rb"
		names["#rs"], names["#rh"], names["#rb"] = attrRespStatus, attrRespHeaders, attrRespBody
		values[":rs"], values[":rh"], values[":rb"] = attrs.status, attrs.headers, attrs.body
		if attrs.gzipped {
			expr += ", #rz = :rz"
			names["#rz"], values[":rz"] = attrRespGzip, &types.AttributeValueMemberBOOL{Value: true}
		}
	}
	st.update = s.fenced(l, expr+" REMOVE #lexp, #shard, #ad", names, values)
	return st, nil
}

// settled explains a settlement whose fence failed, from the item that
// stood in its way. The lease's own settlement, applied by an earlier
// attempt whose answer was lost, is success. Anything else is a lost
// lease.
func (s *Store) settled(st *settlement, l *idem.Lease, item map[string]types.AttributeValue) error {
	if len(item) > 0 && ownToken(item, l) {
		rec, err := s.decodeRecord(l.Key, item)
		if err == nil && rec.Status == st.status && (!st.hasResp || rec.Response.Equal(st.resp)) {
			return nil
		}
	}
	return fmt.Errorf("idem: %s %s: %w", st.op, l.Key.LogHash(), idem.ErrLeaseLost)
}

// apply writes the settlement alone, as one fenced UpdateItem.
func (s *Store) apply(ctx context.Context, l *idem.Lease, st *settlement, optFns ...func(*dynamodb.Options)) error {
	_, err := s.db.UpdateItem(ctx, updateItem(st.update), optFns...)
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return s.settled(st, l, ccf.Item)
	}
	return fmt.Errorf("idem: %s %s: %w", st.op, l.Key.LogHash(), AsUnavailable(err))
}

// Commit completes the command as SUCCEEDED with resp. It is one
// TransactWriteItems with the caller's business writes: all apply or none
// does. A lost lease gives ErrLeaseLost. A business write's own failed
// condition gives *WriteConditionError. Without business writes it is one
// UpdateItem.
//
// A lease commits once. A Commit retried with the same arguments after a
// lost answer returns nil. The lease token is the transaction's
// ClientRequestToken, which DynamoDB honours for ten minutes. After that,
// the record shows the lease's own commit. So it does on an emulator that
// ignores the token, or where the token is refused as used with other
// parameters.
//
// A second Commit with other arguments gets ErrLeaseLost. The record tells
// another response. The lease tells other writes: it remembers them once
// they may have been applied. Keep the *Lease Begin gave. A copy made
// before the first Commit does not remember it. Its Commit with other
// writes is refused only while DynamoDB remembers the token.
//
// With a Ledger, a lease that may meet a release's end clears it after
// the write, and marks the claim settled (claims.Settled). If that
// fails, the record is settled all the same: Commit again, or
// SettleClaim, clears it. Fail does likewise.
func (s *Store) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	digest := policy.WritesDigest(writes)
	committed := policy.LeaseCommitted(l)
	if *committed != nil && **committed != digest {
		return fmt.Errorf("idem: commit %s: other writes than its earlier commit: %w", l.Key.LogHash(), idem.ErrLeaseLost)
	}
	var tries Attempts
	err := s.commit(ctx, l, resp, writes, &tries)
	var failed *idem.WriteConditionError
	if err == nil || !errors.As(err, &failed) && !errors.Is(err, idem.ErrTooLarge) && !tries.Refused() {
		*committed = &digest // it may have been applied
	}
	if err := s.done(l, idem.StatusSucceeded, err); err != nil {
		return err
	}
	return claims.Settled(ctx, l, s.settle("commit"))
}

// done notes on l, once its settlement as status succeeded, when the
// record stops deduplicating.
func (s *Store) done(l *idem.Lease, status idem.Status, err error) error {
	if err == nil {
		l.RecordExpiresAt = s.settledUntil(l, status)
	}
	return err
}

func (s *Store) commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes []types.TransactWriteItem, tries *Attempts) error {
	st, err := s.settlement("commit", l, idem.StatusSucceeded, &resp)
	if err != nil {
		return err
	}
	if len(writes) == 0 {
		return s.apply(ctx, l, &st, tries.Option)
	}
	items := append(writes[:len(writes):len(writes)], types.TransactWriteItem{Update: &st.update})
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(l.Token)}, tries.Option)
	if err == nil {
		return nil
	}
	var (
		tce      *types.TransactionCanceledException
		mismatch *types.IdempotentParameterMismatchException
	)
	switch {
	case errors.As(err, &mismatch) && *policy.LeaseCommitted(l) == nil:
		// The token was used for a transaction with other parameters, and
		// this lease value sent none. It is a copy of the lease committing
		// other writes. The record would show its own commit, but not
		// these writes.
		return fmt.Errorf("idem: commit %s: the lease's token was used with other writes: %w", l.Key.LogHash(), idem.ErrLeaseLost)
	case errors.As(err, &mismatch):
		// The lease's token is remembered for a transaction with other
		// parameters. This lease sent these very writes before. It may be
		// the same commit sent again, its maps' members in another order.
		// The SDK writes a Go map in iteration order, and fakecloud
		// compares requests as written. So the record decides: it shows
		// this lease's own commit, or another.
		out, gerr := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: s.tableName, Key: s.itemKey(l.Key), ConsistentRead: aws.Bool(true),
		})
		if gerr != nil {
			return fmt.Errorf("idem: commit %s: read the record after a token mismatch: %w", l.Key.LogHash(), AsUnavailable(gerr))
		}
		return s.settled(&st, l, out.Item)
	case errors.As(err, &tce):
		reason := func(i int) (types.CancellationReason, bool) {
			if i < len(tce.CancellationReasons) && aws.ToString(tce.CancellationReasons[i].Code) == "ConditionalCheckFailed" {
				return tce.CancellationReasons[i], true
			}
			return types.CancellationReason{}, false
		}
		// The fence first. A lost lease explains any business write that
		// failed with it: the new owner wrote those rows.
		if r, failed := reason(len(writes)); failed {
			return s.settled(&st, l, r.Item)
		}
		for i := range writes {
			if _, failed := reason(i); failed {
				return fmt.Errorf("idem: commit %s: %w", l.Key.LogHash(), &idem.WriteConditionError{Index: i})
			}
		}
	}
	return fmt.Errorf("idem: commit %s: %w", l.Key.LogHash(), AsUnavailable(err))
}

// Fail completes the command as FAILED_PERMANENT with resp. That is a
// refusal every retry must get again, such as a declined card. It is
// fenced like Commit, and like it recognises its own earlier write.
func (s *Store) Fail(ctx context.Context, l *idem.Lease, resp idem.Response) error {
	st, err := s.settlement("fail", l, idem.StatusFailedPermanent, &resp)
	if err != nil {
		return err
	}
	if err := s.done(l, idem.StatusFailedPermanent, s.apply(ctx, l, &st)); err != nil {
		return err
	}
	return claims.Settled(ctx, l, s.settle("fail"))
}

// Release marks the record RELEASED: the command did not happen. A retry
// of the same request runs it afresh, under the same CreatedAt. The
// fingerprint is kept until ReleaseRetention after the command's creation.
// So another request under the key is still refused.
//
// Call it only when the effect verifiably did not happen. The provider
// refused before acting, or a look-up found nothing after its settle
// window. A lease that merely ran out is no such proof. Release is fenced
// like Commit.
//
// With a Ledger, the claim records the release's end first
// (claims.Release). If that fails, the record stays IN_FLIGHT, and the
// claim holds the key. After a failed record write, the end is cleared
// only as claims.Unreleased says.
func (s *Store) Release(ctx context.Context, l *idem.Lease) error {
	st, err := s.settlement("release", l, idem.StatusReleased, nil)
	if err != nil {
		return err
	}
	return claims.Release(ctx, l, s.mark("release"), s.stored, s.pol.ReleasedUntil(l.CreatedAt), func() error {
		return s.done(l, idem.StatusReleased, s.apply(ctx, l, &st))
	})
}

// mark writes a release's end on the Ledger's claim of a lease's
// command, for op (claims.Mark). Without a Ledger there is no claim.
func (s *Store) mark(op string) claims.Mark {
	return claims.MarkOn(s.ledger, s.region, op, ledgerError)
}

// settle records on the Ledger that a command settled, for op
// (claims.Settle). Without a Ledger there is no claim.
func (s *Store) settle(op string) claims.Settle {
	return claims.SettleOn(s.ledger, s.region, op, ledgerError)
}

// SettleClaim clears any release's end from the Ledger's claim of key's
// command created at created, and marks it settled. Call it only for a
// command whose record is SUCCEEDED or FAILED_PERMANENT. idem.Recover
// does: the settling lease's own clear may have failed, or never run.
// Without a Ledger it does nothing.
func (s *Store) SettleClaim(ctx context.Context, key idem.Key, created time.Time) error {
	return s.settle("settle claim")(ctx, key, created)
}
