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

// Begin claims key for a request with fingerprint fp, in one conditional
// PutItem. The first attempt gets a Lease. An attempt after completion
// gets the stored Replay. An attempt while another holds the key gets an
// *InFlightError. An attempt with another fingerprint gets ErrMismatch,
// never another request's response. An attempt on a RELEASED key with its
// fingerprint claims it again, in a second call.
//
// intent is stored on the record for whoever has to finish the command if
// its first attempt dies. That is the reconciler, and intent is what the
// request asked for.
func (s *Store) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	return s.begin(ctx, key, fp, intent, 0)
}

// begin is Begin after reclaims attempts to claim a RELEASED record.
func (s *Store) begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte, reclaims int) (idem.Begun, error) {
	if key == (idem.Key{}) {
		return idem.Begun{}, fmt.Errorf("%w: the zero Key", idem.ErrInvalidKey)
	}
	if len(intent) > policy.MaxIntent {
		return idem.Begun{}, fmt.Errorf("%w: intent of %d bytes", idem.ErrTooLarge, len(intent))
	}
	// Times are kept at the precision they are stored with. So what the
	// caller builds from this lease matches what the reconciler builds
	// from the record.
	now := s.pol.Now()
	token, err := s.pol.Token()
	if err != nil {
		return idem.Begun{}, err
	}
	lease := &idem.Lease{Key: key, Token: token, ExpiresAt: s.pol.LeaseUntil(ctx, now), CreatedAt: now, Intent: intent}
	lease.AttemptDeadline = lease.ExpiresAt
	if s.ledger != nil {
		if done, begun, err := s.ledgerClaim(ctx, lease, fp, reclaims); done {
			return begun, err
		}
	}
	lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
	item := make(map[string]types.AttributeValue, 11) // sized for a sort key, the intent and the Region too: no growing
	s.layout.putKey(item, key)
	item[attrStatus] = inFlight
	item[attrFingerprint] = fpAttr(fp)
	item[attrCreatedAt] = millis(lease.CreatedAt)
	item[attrLeaseToken] = str(token)
	item[s.layout.lexp] = millis(lease.ExpiresAt)
	item[s.layout.shard] = num(int64(s.shard(key)))
	item[attrAttemptDeadline] = item[s.layout.lexp] // the same time: the attempt runs under this lease
	if len(intent) > 0 {
		item[attrIntent] = &types.AttributeValueMemberB{Value: intent}
	}
	if s.region != "" {
		item[attrRegion] = str(s.region)
	}
	var tries Attempts
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           s.tableName,
		Item:                                item,
		ConditionExpression:                 aws.String(beginCondition),
		ExpressionAttributeNames:            s.beginNames,
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(now)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.Option)
	if err == nil && !lease.CreatedAt.Equal(now) {
		// An earlier claim taken up: it may carry a release's end.
		return s.leased(ctx, lease)
	}
	if err == nil {
		return idem.Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt, Status: idem.StatusInFlight}, nil
	}
	return s.claimed(ctx, lease, fp, err, &tries, reclaims)
}

// leased answers Begin's lease whose IN_FLIGHT record is written over an
// earlier lease's. The release's end is cleared now (claims.Leased).
func (s *Store) leased(ctx context.Context, lease *idem.Lease) (idem.Begun, error) {
	return claims.Leased(ctx, lease, claims.ReadOn(s.ledger, s.stored), s.mark("begin"), s.settle("begin"))
}

// claimed answers a claim whose conditional write failed. err holds the
// item that stood in its way. Or tries tells whether the write may have
// been applied.
func (s *Store) claimed(ctx context.Context, lease *idem.Lease, fp idem.Fingerprint, err error, tries *Attempts, reclaims int) (idem.Begun, error) {
	key := lease.Key
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		if tries.Refused() {
			return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), AsUnavailable(err))
		}
		return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), &idem.UnknownClaimError{
			LeaseExpiresAt: lease.ExpiresAt, RecordExpiresAt: lease.RecordExpiresAt, Err: err, // not AsUnavailable: that would say no record was written
		})
	}
	if len(ccf.Item) == 0 {
		return idem.Begun{}, fmt.Errorf("idem: begin %s: condition failed without the old item", key.LogHash())
	}
	return s.existing(ctx, lease, fp, ccf.Item, reclaims)
}

// existing answers a claim that found item, the key's record, in its way.
func (s *Store) existing(ctx context.Context, lease *idem.Lease, fp idem.Fingerprint, item map[string]types.AttributeValue, reclaims int) (idem.Begun, error) {
	key := lease.Key
	if ownToken(item, lease) {
		// Our own write. The SDK retried a call whose first attempt was
		// applied, its answer lost.
		if rec, err := s.decodeRecord(key, item); err == nil {
			lease.CreatedAt = rec.CreatedAt
			lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
			if len(lease.Intent) == 0 {
				lease.Intent = rec.Intent // a re-claim's: the record kept its own
			}
		}
		return s.leased(ctx, lease)
	}
	rec, err := s.decodeRecord(key, item)
	if err != nil {
		return idem.Begun{}, err
	}
	expires := rec.ExpiresAt
	if expires.IsZero() {
		// IN_FLIGHT: it expires once it is released or settled, after this
		// lease at the earliest.
		expires = s.pol.Earliest(rec.CreatedAt, rec.LeaseExpiresAt)
	}
	switch {
	case !sameFingerprint(item, fp):
		return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), &idem.MismatchError{RecordExpiresAt: expires})
	case rec.Status.Terminal():
		return idem.Begun{Replay: rec.Response, RecordExpiresAt: expires, Status: rec.Status}, nil
	case rec.Status == idem.StatusReleased && reclaims < maxReclaims && policy.Expired(rec.ExpiresAt, s.pol.Now()):
		// It expired after the claim's PutItem found it live. The key now
		// names a new intent, claimed with a PutItem of its own.
		return s.begin(ctx, key, fp, lease.Intent, reclaims+1)
	case rec.Status == idem.StatusReleased && !s.mayWrite(key, rec.Region):
		return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), &idem.ClaimedElsewhereError{Region: rec.Region})
	case rec.Status == idem.StatusReleased && !s.replicated(key, rec.CreatedAt):
		return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), &idem.ClaimedElsewhereError{})
	case rec.Status == idem.StatusReleased && reclaims < maxReclaims:
		return s.reclaim(ctx, lease, fp, rec, item[attrLeaseToken], reclaims+1)
	default:
		return idem.Begun{}, &idem.InFlightError{LeaseExpiresAt: rec.LeaseExpiresAt, RecordExpiresAt: expires}
	}
}

// beginCondition claims a key absent or past retention. :now is whole
// seconds, as #exp is: a record is absent from the second its retention
// ends (policy.Expired).
const beginCondition = "attribute_not_exists(#pk) OR #exp <= :now"

// maxReclaims bounds how often one Begin chases a key that others keep
// claiming and releasing.
const maxReclaims = 3

// reclaim claims a RELEASED record again for the same request, keeping its
// CreatedAt. The effect runs again under the same references. So whatever
// reached the provider before is found, not repeated. It claims only while
// the release is live. One that expires between the claim's PutItem and
// this UpdateItem is absent. Back under its old CreatedAt, it would
// outlive the retention that bounds how long those references are sent.
func (s *Store) reclaim(ctx context.Context, lease *idem.Lease, fp idem.Fingerprint, rec *idem.Record, oldToken types.AttributeValue, reclaims int) (idem.Begun, error) {
	if err := s.extendClaim(ctx, "begin", lease.Key, rec.CreatedAt, lease.ExpiresAt); err != nil {
		return idem.Begun{}, err
	}
	lease.CreatedAt = rec.CreatedAt
	lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
	names := map[string]string{
		"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": s.layout.lexp, "#shard": s.layout.shard,
		"#ad": attrAttemptDeadline, "#exp": s.layout.ttl, "#att": attrAttempts, "#fp": attrFingerprint, "#q": attrQueuedUntil, "#qr": attrQueuedRenewed,
	}
	values := map[string]types.AttributeValue{
		":released": statusAttrs[idem.StatusReleased], ":inflight": inFlight, ":fp": fpAttr(fp),
		":tok": str(lease.Token), ":lexp": millis(lease.ExpiresAt), ":shard": num(int64(s.shard(lease.Key))),
		":ad": millis(lease.AttemptDeadline), ":oldtok": oldToken, ":now": seconds(s.pol.Now()),
	}
	update := "SET #status = :inflight, #tok = :tok, #lexp = :lexp, #shard = :shard, #ad = :ad"
	if s.region != "" {
		names["#region"], values[":region"] = attrRegion, str(s.region)
		update += ", #region = :region"
	}
	if len(lease.Intent) > 0 {
		names["#intent"], values[":intent"] = attrIntent, &types.AttributeValueMemberB{Value: lease.Intent}
		update += ", #intent = :intent"
	}
	var tries Attempts
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.tableName,
		Key:                                 s.itemKey(lease.Key),
		UpdateExpression:                    aws.String(update + " REMOVE #exp, #att, #q, #qr"),
		ConditionExpression:                 aws.String("#status = :released AND #fp = :fp AND #tok = :oldtok AND #exp > :now"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.Option)
	if err == nil {
		if len(lease.Intent) == 0 {
			// The record keeps the intent it has. The lease carries it, so
			// a settlement sizes its response beside it, as DynamoDB will.
			lease.Intent = rec.Intent
		}
		return s.leased(ctx, lease)
	}
	return s.claimed(ctx, lease, fp, err, &tries, reclaims)
}

// ownToken reports whether item carries l's token. Then it is a write of
// l's that was applied, whatever its caller was told.
func ownToken(item map[string]types.AttributeValue, l *idem.Lease) bool {
	tok, ok := item[attrLeaseToken].(*types.AttributeValueMemberS)
	return ok && tok.Value == l.Token
}

// ledgerClaim reads the key's record before a claim, for a store with a
// Ledger. Another Region's record may not have replicated here: writing
// over it would erase it everywhere. A live record is answered as the
// claim's PutItem would find it (done). Otherwise the claim goes to the
// Ledger, and lease takes the CreatedAt the Ledger holds.
func (s *Store) ledgerClaim(ctx context.Context, lease *idem.Lease, fp idem.Fingerprint, reclaims int) (done bool, _ idem.Begun, _ error) {
	key := lease.Key
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.tableName, Key: s.itemKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		// Nothing was written: the claim has not been tried.
		return true, idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), AsUnavailable(err))
	}
	if len(out.Item) > 0 && !expiredItem(out.Item, s.layout.ttl, lease.CreatedAt) {
		begun, err := s.existing(ctx, lease, fp, out.Item, reclaims)
		return true, begun, err
	}
	c, err := s.ledger.Claim(ctx, key, idem.Claim{Region: s.region, CreatedAt: lease.CreatedAt, Until: s.pol.Latest(lease.CreatedAt, lease.ExpiresAt), Fingerprint: fp})
	switch {
	case errors.Is(err, idem.ErrClaimedElsewhere):
		return true, idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), err)
	case err != nil:
		// The Ledger may hold the claim, but nothing was written
		// or done. A retry finds the claim and takes it.
		return true, idem.Begun{}, fmt.Errorf("idem: begin %s: ledger: %w", key.LogHash(), AsUnavailable(err))
	}
	if !s.replicated(key, c.CreatedAt) {
		// The claim is older than the failover: a pending Region
		// may hold its record.
		return true, idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), &idem.ClaimedElsewhereError{})
	}
	if !c.CreatedAt.Equal(lease.CreatedAt) {
		if err := s.takeUp(key, out.Item, c, fp, lease.CreatedAt); err != nil {
			return true, idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), err)
		}
		// An earlier claim, taken up under this lease: it must last as
		// long as the record may now.
		if err := s.extendClaim(ctx, "begin", key, c.CreatedAt, lease.ExpiresAt); err != nil {
			return true, idem.Begun{}, err
		}
	}
	lease.CreatedAt, lease.Inherited = time.UnixMilli(c.CreatedAt.UnixMilli()), c.InheritedBy(s.region)
	return false, idem.Begun{}, nil
}

// takeUp refuses to take up c, an earlier claim, for a request with
// fingerprint fp, by claims.TakeUp. item is the key's record, expired or
// absent.
func (s *Store) takeUp(key idem.Key, item map[string]types.AttributeValue, c idem.Claim, fp idem.Fingerprint, now time.Time) error {
	rec, err := s.decodeRecord(key, item)
	held := len(item) > 0 && err == nil && rec.CreatedAt.Equal(c.CreatedAt)
	var status idem.Status
	if held {
		status = rec.Status
	}
	return claims.TakeUp(c, held, status, fp, s.region, s.pol.Earliest(c.CreatedAt, c.CreatedAt), now)
}

// extendClaim makes the Ledger's claim of the command created at created
// last as long as a record settled under a lease until leaseEnd may.
// Without a Ledger there is no claim.
func (s *Store) extendClaim(ctx context.Context, op string, key idem.Key, created, leaseEnd time.Time) error {
	if s.ledger == nil {
		return nil
	}
	return ledgerError(op, key, s.ledger.Extend(ctx, key, s.region, created, s.pol.Latest(created, leaseEnd)))
}

// ledgerError wraps a Ledger's err for op on key. Any error but another
// Region's claim, or a settled command's, leaves the Ledger's state
// unknown: unavailable.
func ledgerError(op string, key idem.Key, err error) error {
	switch {
	case errors.Is(err, idem.ErrClaimedElsewhere), errors.Is(err, idem.ErrLeaseLost):
		return fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), err)
	case err != nil:
		return fmt.Errorf("idem: %s %s: ledger: %w", op, key.LogHash(), AsUnavailable(err))
	}
	return nil
}

// expiredItem reports whether item's retention (its ttl attribute) ended
// at now. An IN_FLIGHT record has none.
func expiredItem(item map[string]types.AttributeValue, ttl string, now time.Time) bool {
	exp, err := numberAttr(item, ttl)
	return err == nil && policy.Expired(time.Unix(exp, 0), now)
}

// mayWrite reports whether this store may lease a record region's store
// marked. It may lease its own, an unmarked one, or one of a Region the
// Ledger yields. Without a Ledger every record is the store's.
func (s *Store) mayWrite(key idem.Key, region string) bool {
	return s.ledger == nil || region == "" || region == s.region || s.ledger.Yields(key, region)
}

// replicated reports whether the command created at created can have
// changed in no Region pending a drain. Its record here, even one naming
// this Region, may be an older copy.
func (s *Store) replicated(key idem.Key, created time.Time) bool {
	return !created.Before(s.unreplicated(key))
}

// ours is the condition, ending in AND, that a record is this store's
// to write: holder's or unmarked, and no older than the Ledger's
// Unreplicated. It adds its names and values. Without a Ledger it is
// empty: every record is the store's.
func (s *Store) ours(key idem.Key, holder string, names map[string]string, values map[string]types.AttributeValue) string {
	if s.ledger == nil {
		return ""
	}
	cond := "(attribute_not_exists(#region) OR #region = :holder) AND "
	names["#region"], values[":holder"] = attrRegion, str(holder)
	if u := s.unreplicated(key); !u.IsZero() {
		// A record older than the failover may be a stale copy.
		cond += "#ct >= :unrepl AND "
		names["#ct"], values[":unrepl"] = attrCreatedAt, millis(u)
	}
	return cond
}

// unreplicated is the Ledger's Unreplicated, zero without a Ledger.
func (s *Store) unreplicated(key idem.Key) time.Time {
	if s.ledger == nil {
		return time.Time{}
	}
	return s.ledger.Unreplicated(key)
}
