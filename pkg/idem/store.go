package idem

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// DynamoDBAPI is the part of *dynamodb.Client the store uses.
type DynamoDBAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ DynamoDBAPI = (*dynamodb.Client)(nil)

// Status is a record's place in the lifecycle. ABSENT is the lack of a
// (live) record, so it has no value here.
type Status string

// The stored states.
const (
	StatusInFlight        Status = "IN_FLIGHT"
	StatusSucceeded       Status = "SUCCEEDED"
	StatusFailedPermanent Status = "FAILED_PERMANENT"
	// StatusReleased is ABSENT with a memory: the effect verifiably did not
	// happen, and until retention ends the key may be claimed again by the
	// same request only (with the same CreatedAt, so the same derived
	// references), never by another.
	StatusReleased Status = "RELEASED"
)

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusFailedPermanent }

// Options configure a Store. Zero fields take the defaults.
type Options struct {
	// Retention is how long a key deduplicates once its command is
	// settled (SUCCEEDED or FAILED_PERMANENT), counted from the end of the
	// lease that settled it. An IN_FLIGHT record has no expiry: TTL never
	// deletes it. Expired records read as absent. Default 24h.
	Retention time.Duration
	// ReleaseRetention is how long a RELEASED command's key still names
	// it, counted from its creation: a release does not restart it. A
	// caller that derives a provider's idempotency reference from (Key,
	// CreatedAt) sets it within the provider's deduplication window.
	// Default Retention.
	ReleaseRetention time.Duration
	// LeaseMargin is added to the context's remaining time to make a lease.
	// Default 5s.
	LeaseMargin time.Duration
	// MaxLease caps any lease. Default 15m.
	MaxLease time.Duration
	// DefaultLease is the lease when the context has no deadline. Default 30s.
	DefaultLease time.Duration
	// Shards spreads in-flight records over the stuck-lease index. Every
	// process writing or sweeping one table must agree. Default 16.
	Shards int
	// CompressAbove gzips stored response bodies larger than this. Default 1 KiB.
	CompressAbove int
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// Random is the source of lease tokens. Default crypto/rand.Reader.
	Random io.Reader
	// KeyAttribute names the table's partition key, so records can live
	// in an existing table whose partition key is a string attribute of
	// another name. Default AttrPK.
	KeyAttribute string
	// KeyPrefix is put before every record's key (KeyPrefix +
	// Key.String()), to tell the records apart from the table's other
	// items. Default none.
	KeyPrefix string
}

// policy is the part of o every store applies alike, with its defaults.
func (o Options) policy() policy.Policy {
	return policy.WithDefaults(policy.Policy{
		Retention: o.Retention, ReleaseRetention: o.ReleaseRetention,
		LeaseMargin: o.LeaseMargin, MaxLease: o.MaxLease, DefaultLease: o.DefaultLease, Shards: o.Shards, CompressAbove: o.CompressAbove, Clock: o.Clock, Random: o.Random,
	})
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	p := o.policy()
	o.Retention, o.ReleaseRetention, o.LeaseMargin, o.MaxLease, o.DefaultLease = p.Retention, p.ReleaseRetention, p.LeaseMargin, p.MaxLease, p.DefaultLease
	o.Shards, o.CompressAbove, o.Clock, o.Random = p.Shards, p.CompressAbove, p.Clock, p.Random
	if o.KeyAttribute == "" {
		o.KeyAttribute = AttrPK
	}
	return o
}

// Store is an idempotency store on one DynamoDB table. It is safe for
// concurrent use.
type Store struct {
	db    DynamoDBAPI
	table string
	opt   Options
	pol   policy.Policy
	// The parts of the requests that are the same for every call, built
	// once: the SDK only reads its input.
	tableName  *string
	beginNames map[string]string
}

// New returns a Store on table. optFns adjust the defaults.
func New(db DynamoDBAPI, table string, optFns ...func(*Options)) (*Store, error) {
	if db == nil {
		return nil, errors.New("idem: nil DynamoDB client")
	}
	if table == "" {
		return nil, errors.New("idem: empty table name")
	}
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	o = o.withDefaults()
	return &Store{
		db: db, table: table, opt: o, pol: o.policy(), tableName: aws.String(table),
		beginNames: map[string]string{"#pk": o.KeyAttribute, "#exp": AttrExpiresAt},
	}, nil
}

// Shards is the number of stuck-lease index shards.
func (s *Store) Shards() int { return s.opt.Shards }

// Retention is how long a key deduplicates once settled.
func (s *Store) Retention() time.Duration { return s.opt.Retention }

// Lease is the right to complete one command, held by one attempt. Its
// token fences every write: once the lease is taken over, the holder's
// Commit, Fail, Release, Heartbeat and Postpone all fail with ErrLeaseLost.
type Lease struct {
	Key       Key
	Token     string
	ExpiresAt time.Time // the lease
	// CreatedAt is the command's first attempt. It names this use of the
	// key: a claim after a release keeps it, a claim after retention gets
	// a new one, so references derived from (Key, CreatedAt) tell two
	// intents under one key apart.
	CreatedAt time.Time
	// RecordExpiresAt is when the key stops deduplicating if this lease
	// settles the command.
	RecordExpiresAt time.Time
	// AttemptDeadline is when the last attempt at the effect had to be
	// sent by: the end of the lease it ran under (Begin, Heartbeat).
	AttemptDeadline time.Time
	// Attempts counts the take-overs: how often the command has been
	// resolved by someone other than its first attempt.
	Attempts int
	Intent   []byte // what Begin stored for reconciliation
}

// Begun is the outcome of Begin that lets the caller go on: either it owns
// a new lease (Lease != nil), or the command already finished and Replay
// is its stored response.
type Begun struct {
	Lease           *Lease
	Replay          *Response
	RecordExpiresAt time.Time
	// Status is IN_FLIGHT with a Lease, the terminal status with a Replay.
	Status Status
}

// Begin claims key for a request with fingerprint fp, in exactly one
// conditional PutItem. The first attempt gets a Lease; an attempt after
// completion gets the stored Replay; an attempt while another holds the key
// gets an *InFlightError; an attempt with another fingerprint gets
// ErrFingerprintMismatch and never another request's response. An attempt
// on a RELEASED key with its fingerprint claims it again (a second call).
//
// intent is stored on the record for whoever has to finish the command if
// its first attempt dies (the reconciler): what the request asked for.
func (s *Store) Begin(ctx context.Context, key Key, fp Fingerprint, intent []byte) (Begun, error) {
	if key.IsZero() {
		return Begun{}, &ValidationError{Field: "key", Reason: "zero Key"}
	}
	if len(intent) > policy.MaxIntent {
		return Begun{}, fmt.Errorf("%w: intent of %d bytes", ErrTooLarge, len(intent))
	}
	// Times are kept at the precision they are stored with, so what the
	// caller builds from this lease matches what a reader of the record
	// (the reconciler) builds from the record.
	now := s.pol.Now()
	token, err := s.pol.Token()
	if err != nil {
		return Begun{}, err
	}
	lease := &Lease{Key: key, Token: token, ExpiresAt: s.pol.LeaseUntil(ctx, now), CreatedAt: now, Intent: intent}
	lease.AttemptDeadline = lease.ExpiresAt
	lease.RecordExpiresAt = s.retainUntil(lease)
	item := make(map[string]types.AttributeValue, 9) // sized for the intent too: no growing
	item[s.opt.KeyAttribute] = str(s.stored(key))
	item[attrStatus] = inFlight
	item[attrFingerprint] = fpAttr(fp)
	item[attrCreatedAt] = millis(lease.CreatedAt)
	item[attrLeaseToken] = str(token)
	item[AttrLeaseExpiresAt] = millis(lease.ExpiresAt)
	item[AttrLeaseShard] = num(int64(s.shard(key)))
	item[attrAttemptDeadline] = item[AttrLeaseExpiresAt] // the same time: the attempt runs under this lease
	if len(intent) > 0 {
		item[attrIntent] = &types.AttributeValueMemberB{Value: intent}
	}
	var tries attempts
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           s.tableName,
		Item:                                item,
		ConditionExpression:                 beginCondition,
		ExpressionAttributeNames:            s.beginNames,
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(now)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.option)
	if err == nil {
		return Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt, Status: StatusInFlight}, nil
	}
	return s.claimed(ctx, lease, fp, err, &tries, 0)
}

// claimed answers a claim whose conditional write failed: err holds the
// item that stood in its way, or tries tells whether the write may have
// been applied.
func (s *Store) claimed(ctx context.Context, lease *Lease, fp Fingerprint, err error, tries *attempts, reclaims int) (Begun, error) {
	key := lease.Key
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		if tries.refused() {
			return Begun{}, fmt.Errorf("idem: begin %s: %w", key, err)
		}
		return Begun{}, fmt.Errorf("idem: begin %s: %w", key, &UnknownClaimError{
			LeaseExpiresAt: lease.ExpiresAt, RecordExpiresAt: lease.RecordExpiresAt, Err: err,
		})
	}
	if len(ccf.Item) == 0 {
		return Begun{}, fmt.Errorf("idem: begin %s: condition failed without the old item", key)
	}
	if ownToken(ccf.Item, lease) {
		// Our own write: the SDK retried a call whose first attempt was
		// applied but whose answer was lost.
		if rec, err := decodeRecord(key, ccf.Item); err == nil {
			lease.CreatedAt = rec.CreatedAt
		}
		return Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt, Status: StatusInFlight}, nil
	}
	rec, err := decodeRecord(key, ccf.Item)
	if err != nil {
		return Begun{}, err
	}
	expires := rec.ExpiresAt
	if expires.IsZero() {
		// IN_FLIGHT: retention starts once it settles, after this lease
		// at the earliest.
		expires = s.retainUntil(&Lease{ExpiresAt: rec.LeaseExpiresAt})
	}
	switch {
	case !sameFingerprint(ccf.Item, fp):
		return Begun{}, fmt.Errorf("idem: begin %s: %w", key, &MismatchError{RecordExpiresAt: expires})
	case rec.Status.Terminal():
		return Begun{Replay: rec.Response, RecordExpiresAt: expires, Status: rec.Status}, nil
	case rec.Status == StatusReleased && reclaims < maxReclaims:
		return s.reclaim(ctx, lease, fp, rec, ccf.Item[attrLeaseToken], reclaims+1)
	default:
		return Begun{}, &InFlightError{LeaseExpiresAt: rec.LeaseExpiresAt, RecordExpiresAt: expires}
	}
}

// maxReclaims bounds how often one Begin chases a key that others keep
// claiming and releasing.
const maxReclaims = 3

// reclaim claims a RELEASED record again for the same request, keeping its
// CreatedAt: the effect runs again under the same references, so whatever
// reached the provider before is found, not repeated.
func (s *Store) reclaim(ctx context.Context, lease *Lease, fp Fingerprint, rec *Record, oldToken types.AttributeValue, reclaims int) (Begun, error) {
	lease.CreatedAt = rec.CreatedAt
	names := map[string]string{
		"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": AttrLeaseExpiresAt, "#shard": AttrLeaseShard,
		"#ad": attrAttemptDeadline, "#exp": AttrExpiresAt, "#att": attrAttempts, "#fp": attrFingerprint,
	}
	values := map[string]types.AttributeValue{
		":released": statusAttrs[StatusReleased], ":inflight": inFlight, ":fp": fpAttr(fp),
		":tok": str(lease.Token), ":lexp": millis(lease.ExpiresAt), ":shard": num(int64(s.shard(lease.Key))),
		":ad": millis(lease.AttemptDeadline), ":oldtok": oldToken,
	}
	update := "SET #status = :inflight, #tok = :tok, #lexp = :lexp, #shard = :shard, #ad = :ad"
	if len(lease.Intent) > 0 {
		names["#intent"], values[":intent"] = attrIntent, &types.AttributeValueMemberB{Value: lease.Intent}
		update += ", #intent = :intent"
	}
	var tries attempts
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.tableName,
		Key:                                 s.keyAttr(lease.Key),
		UpdateExpression:                    aws.String(update + " REMOVE #exp, #att"),
		ConditionExpression:                 aws.String("#status = :released AND #fp = :fp AND #tok = :oldtok"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, tries.option)
	if err == nil {
		return Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt, Status: StatusInFlight}, nil
	}
	return s.claimed(ctx, lease, fp, err, &tries, reclaims)
}

// ownToken reports whether item carries l's token: a write of l's that was
// applied, whatever its caller was told.
func ownToken(item map[string]types.AttributeValue, l *Lease) bool {
	tok, ok := item[attrLeaseToken].(*types.AttributeValueMemberS)
	return ok && tok.Value == l.Token
}

// retainUntil is when a record settled under l stops deduplicating:
// Retention after the lease ends, at the whole second TTL stores. It
// depends on the lease alone, so a retried completion writes the same.
func (s *Store) retainUntil(l *Lease) time.Time { return s.pol.RetainUntil(l.ExpiresAt) }

// settledUntil is when a record l settles as status stops deduplicating.
func (s *Store) settledUntil(l *Lease, status Status) time.Time {
	if status == StatusReleased {
		return s.pol.ReleasedUntil(l.CreatedAt)
	}
	return s.retainUntil(l)
}

// shard is key's stuck-lease shard. It hashes Key.String() whatever the
// KeyPrefix, so every store agrees on it.
func (s *Store) shard(key Key) int { return s.pol.Shard(key.String()) }

// stored is key as the table's partition key holds it.
func (s *Store) stored(key Key) string { return s.opt.KeyPrefix + key.String() }

// fence is the condition every write by a lease holder carries.
const fence = "#status = :inflight AND #tok = :tok"

// The conditions and update expressions every request shares.
var (
	// :now is whole seconds, as #exp is: a record is absent from the
	// second its retention ends (policy.Expired).
	beginCondition = aws.String("attribute_not_exists(#pk) OR #exp <= :now")
	fenceCondition = aws.String(fence)
)

func fenceValues(l *Lease) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":inflight": inFlight, ":tok": str(l.Token)}
}

// statusAttrs are the statuses as attribute values, shared by every
// request (the SDK only reads its input).
var statusAttrs = map[Status]types.AttributeValue{
	StatusInFlight: str(string(StatusInFlight)), StatusSucceeded: str(string(StatusSucceeded)),
	StatusFailedPermanent: str(string(StatusFailedPermanent)), StatusReleased: str(string(StatusReleased)),
}

// inFlight is the status IN_FLIGHT as an attribute value.
var inFlight = statusAttrs[StatusInFlight]

// settlement is the fenced update that moves a record from IN_FLIGHT to
// status, with resp when the status is terminal. The record leaves the
// stuck-lease index, starts its retention and keeps the lease token, by
// which a retried settlement recognises itself. It is a function of its
// arguments alone (attributes in a fixed order, times from the lease), so
// a retried call sends the same request.
type settlement struct {
	op     string
	status Status
	// resp is stored if hasResp (a terminal status): a copy, not a
	// pointer, which would move the caller's Response to the heap.
	resp    Response
	hasResp bool
	update  *string
	names   map[string]string
	values  map[string]types.AttributeValue
}

// The settlements' update expressions and attribute names: the response's
// attributes are set only by a terminal status, the gzip mark only on a
// gzipped body.
const (
	settleSet      = "SET #status = :status, #exp = :exp"
	settleResponse = ", #rs = :rs, #rh = :rh, #rb = :rb"
	settleGzip     = ", #rz = :rz"
	settleRemove   = " REMOVE #lexp, #shard, #ad"
)

var (
	settleUpdate        = aws.String(settleSet + settleRemove)
	settleUpdateResp    = aws.String(settleSet + settleResponse + settleRemove)
	settleUpdateRespGz  = aws.String(settleSet + settleResponse + settleGzip + settleRemove)
	settleNames         = settlementNames()
	settleNamesResp     = settlementNames("#rs", attrRespStatus, "#rh", attrRespHeaders, "#rb", attrRespBody)
	settleNamesRespGzip = settlementNames("#rs", attrRespStatus, "#rh", attrRespHeaders, "#rb", attrRespBody, "#rz", attrRespGzip)
	gzipMark            = &types.AttributeValueMemberBOOL{Value: true}
)

// settlementNames are the names every settlement uses, and the pairs given.
func settlementNames(pairs ...string) map[string]string {
	names := map[string]string{
		"#status": attrStatus, "#tok": attrLeaseToken, "#exp": AttrExpiresAt,
		"#lexp": AttrLeaseExpiresAt, "#shard": AttrLeaseShard, "#ad": attrAttemptDeadline,
	}
	for i := 0; i < len(pairs); i += 2 {
		names[pairs[i]] = pairs[i+1]
	}
	return names
}

func (s *Store) settlement(op string, l *Lease, status Status, resp *Response) (settlement, error) {
	st := settlement{op: op, status: status, update: settleUpdate, names: settleNames}
	st.values = make(map[string]types.AttributeValue, 8)
	st.values[":inflight"], st.values[":tok"] = inFlight, str(l.Token)
	st.values[":status"], st.values[":exp"] = statusAttrs[status], seconds(s.settledUntil(l, status))
	if resp == nil {
		return st, nil
	}
	st.resp, st.hasResp = *resp, true
	attrs, err := encodeResponse(*resp, s.opt.CompressAbove, len(l.Intent))
	if err != nil {
		return settlement{}, fmt.Errorf("idem: %s %s: %w", op, l.Key, err)
	}
	st.values[":rs"], st.values[":rh"], st.values[":rb"] = attrs.status, attrs.headers, attrs.body
	st.update, st.names = settleUpdateResp, settleNamesResp
	if attrs.gzipped {
		st.values[":rz"] = gzipMark
		st.update, st.names = settleUpdateRespGz, settleNamesRespGzip
	}
	return st, nil
}

// settled explains a settlement whose fence failed, from the item that
// stood in its way: the lease's own settlement, applied by an earlier
// attempt whose answer was lost, is success; anything else is a lost lease.
func (st *settlement) settled(l *Lease, item map[string]types.AttributeValue) error {
	if len(item) > 0 && ownToken(item, l) {
		rec, err := decodeRecord(l.Key, item)
		if err == nil && rec.Status == st.status && (!st.hasResp || rec.Response.Equal(st.resp)) {
			return nil
		}
	}
	return fmt.Errorf("idem: %s %s: %w", st.op, l.Key, ErrLeaseLost)
}

// apply writes the settlement alone, as one fenced UpdateItem.
func (s *Store) apply(ctx context.Context, l *Lease, st *settlement) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.tableName,
		Key:                                 s.keyAttr(l.Key),
		UpdateExpression:                    st.update,
		ConditionExpression:                 fenceCondition,
		ExpressionAttributeNames:            st.names,
		ExpressionAttributeValues:           st.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return st.settled(l, ccf.Item)
	}
	return fmt.Errorf("idem: %s %s: %w", st.op, l.Key, err)
}

// Commit completes the command as SUCCEEDED with resp, in one
// TransactWriteItems together with the caller's business writes: all of
// them apply or none does. If the lease was lost it returns ErrLeaseLost;
// if a business write's own condition failed, a *WriteConditionError.
// Without business writes it is one UpdateItem.
//
// A lease commits once. A Commit retried with the same arguments after an
// answer was lost returns nil: the lease token is the transaction's
// ClientRequestToken, which DynamoDB honours for ten minutes, and after
// that (or on an emulator that ignores it, or where the token is
// refused as used with other parameters) the record shows the lease's own
// commit. A second Commit with other arguments gets ErrLeaseLost.
func (s *Store) Commit(ctx context.Context, l *Lease, resp Response, writes ...types.TransactWriteItem) error {
	st, err := s.settlement("commit", l, StatusSucceeded, &resp)
	if err != nil {
		return err
	}
	if len(writes) == 0 {
		return s.apply(ctx, l, &st)
	}
	items := append(writes[:len(writes):len(writes)], types.TransactWriteItem{Update: &types.Update{
		TableName:                           s.tableName,
		Key:                                 s.keyAttr(l.Key),
		UpdateExpression:                    st.update,
		ConditionExpression:                 fenceCondition,
		ExpressionAttributeNames:            st.names,
		ExpressionAttributeValues:           st.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(l.Token)})
	if err == nil {
		return nil
	}
	var (
		tce      *types.TransactionCanceledException
		mismatch *types.IdempotentParameterMismatchException
	)
	switch {
	case errors.As(err, &mismatch):
		// The lease's token is remembered for a transaction with other
		// parameters. That may be this same commit sent again with its
		// maps' members in another order (the SDK writes a Go map in its
		// iteration order, and fakecloud compares requests as written), so
		// the record decides: it shows this lease's own commit, or another.
		out, gerr := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: s.tableName, Key: s.keyAttr(l.Key), ConsistentRead: aws.Bool(true),
		})
		if gerr != nil {
			return fmt.Errorf("idem: commit %s: read the record after a token mismatch: %w", l.Key, gerr)
		}
		return st.settled(l, out.Item)
	case errors.As(err, &tce):
		reason := func(i int) (types.CancellationReason, bool) {
			if i < len(tce.CancellationReasons) && aws.ToString(tce.CancellationReasons[i].Code) == "ConditionalCheckFailed" {
				return tce.CancellationReasons[i], true
			}
			return types.CancellationReason{}, false
		}
		// The fence first: a lost lease explains any business write that
		// failed with it (the new owner wrote those rows).
		if r, failed := reason(len(writes)); failed {
			return st.settled(l, r.Item)
		}
		for i := range writes {
			if _, failed := reason(i); failed {
				return fmt.Errorf("idem: commit %s: %w", l.Key, &WriteConditionError{Index: i})
			}
		}
	}
	return fmt.Errorf("idem: commit %s: %w", l.Key, err)
}

// Fail completes the command as FAILED_PERMANENT with resp (a refusal every
// retry must get again, such as a declined card). Fenced like Commit, and
// like it recognises its own earlier write.
func (s *Store) Fail(ctx context.Context, l *Lease, resp Response) error {
	st, err := s.settlement("fail", l, StatusFailedPermanent, &resp)
	if err != nil {
		return err
	}
	return s.apply(ctx, l, &st)
}

// Release marks the record RELEASED: the command did not happen, and a
// retry of the same request runs it afresh, under the same CreatedAt. The
// fingerprint is kept until ReleaseRetention after the command's creation,
// so another request under the key is still refused. Call it only when the effect verifiably did not
// happen (the provider refused before acting, or a look-up found nothing
// once the provider's settle window had passed); a lease that merely ran
// out is no such proof. Fenced like Commit.
func (s *Store) Release(ctx context.Context, l *Lease) error {
	st, err := s.settlement("release", l, StatusReleased, nil)
	if err != nil {
		return err
	}
	if err := s.apply(ctx, l, &st); err != nil {
		return err
	}
	l.RecordExpiresAt = s.settledUntil(l, StatusReleased)
	return nil
}

// Heartbeat extends the lease for long work, to the same bound Begin would
// give from ctx, and with it the attempt's deadline. Fenced like Commit.
func (s *Store) Heartbeat(ctx context.Context, l *Lease) error {
	until := s.pol.LeaseUntil(ctx, s.opt.Clock())
	if err := s.extend(ctx, "heartbeat", l, until, true); err != nil {
		return err
	}
	l.ExpiresAt, l.AttemptDeadline = until, until
	l.RecordExpiresAt = s.retainUntil(l)
	return nil
}

// Postpone keeps the command IN_FLIGHT but gives up the lease until the
// given time: nobody takes it over before then, and the stuck-lease index
// lists it again after. A reconciler that cannot settle a command yet
// (the provider is down, or its "not found" cannot be trusted yet) calls
// it to say when to try next. Fenced like Commit.
func (s *Store) Postpone(ctx context.Context, l *Lease, until time.Time) error {
	until = time.UnixMilli(until.UnixMilli())
	if err := s.extend(ctx, "postpone", l, until, false); err != nil {
		return err
	}
	l.ExpiresAt = until
	l.RecordExpiresAt = s.retainUntil(l)
	return nil
}

// extend moves l's lease to until, and the attempt deadline with it if
// attempt is set.
func (s *Store) extend(ctx context.Context, op string, l *Lease, until time.Time, attempt bool) error {
	values := fenceValues(l)
	values[":lexp"] = millis(until)
	names := map[string]string{"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": AttrLeaseExpiresAt}
	update := "SET #lexp = :lexp"
	if attempt {
		names["#ad"] = attrAttemptDeadline
		update += ", #ad = :lexp"
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.tableName,
		Key:                       s.keyAttr(l.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       fenceCondition,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if err == nil {
		return nil
	}
	// Setting the same lease twice changes nothing, so a retried extension
	// whose first answer was lost passes its own fence: a failed fence is
	// always someone else's doing.
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key, ErrLeaseLost)
	}
	return fmt.Errorf("idem: %s %s: %w", op, l.Key, err)
}

// TakeOver gives the caller a new lease on an IN_FLIGHT record whose lease
// has expired, for reconciliation, and counts the attempt. The previous
// holder's token stops working. An IN_FLIGHT record is taken over however
// old it is (it never expires). A record still leased gives
// *InFlightError; a terminal one ErrCompleted; a released, absent or
// expired one ErrNotFound.
func (s *Store) TakeOver(ctx context.Context, key Key) (*Lease, error) {
	return s.takeOver(ctx, key, "take over", false)
}

// Preempt takes over an IN_FLIGHT record whatever its lease, like
// TakeOver otherwise: the holder's token stops working at once, so its
// late Commit, Fail or Release fails with ErrLeaseLost and cannot
// settle the command a second time. It is only for a caller that already
// knows the effect's outcome from the effect's own source (a payment
// provider's signed notification), and so need not wait for the holder to
// give up; a caller that still has to find out must use TakeOver.
//
// A RELEASED record within its retention is claimed back to IN_FLIGHT the
// same way: such a caller has proof that the effect happened after all,
// which the release missed, and must record it. A terminal record gives
// ErrCompleted; an absent or expired one ErrNotFound.
func (s *Store) Preempt(ctx context.Context, key Key) (*Lease, error) {
	return s.takeOver(ctx, key, "preempt", true)
}

// takeOver gives the caller a new lease on an IN_FLIGHT record: only
// once its lease has run out unless live is set.
func (s *Store) takeOver(ctx context.Context, key Key, op string, live bool) (*Lease, error) {
	now := s.pol.Now()
	token, err := s.pol.Token()
	if err != nil {
		return nil, err
	}
	lease := &Lease{Key: key, Token: token, ExpiresAt: s.pol.LeaseUntil(ctx, now)}
	cond, update := "#status = :inflight", "SET #tok = :tok, #lexp = :lexp"
	names := map[string]string{
		"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": AttrLeaseExpiresAt, "#att": attrAttempts,
	}
	values := map[string]types.AttributeValue{
		":inflight": inFlight, ":tok": str(token), ":lexp": millis(lease.ExpiresAt), ":one": num(1),
	}
	if live {
		// A live RELEASED record goes back to IN_FLIGHT, into the
		// stuck-lease index, with no expiry, as a re-claim does.
		cond = "#status = :inflight OR (#status = :released AND #exp > :nows)"
		update = "SET #status = :inflight, #tok = :tok, #lexp = :lexp, #shard = :shard, #ad = if_not_exists(#ad, :lexp) REMOVE #exp"
		names["#exp"], names["#shard"], names["#ad"] = AttrExpiresAt, AttrLeaseShard, attrAttemptDeadline
		values[":released"], values[":nows"], values[":shard"] = statusAttrs[StatusReleased], seconds(now), num(int64(s.shard(key)))
	} else {
		cond += " AND #lexp < :now"
		values[":now"] = millis(now)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.tableName,
		Key:                                 s.keyAttr(key),
		UpdateExpression:                    aws.String(update + " ADD #att :one"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var item map[string]types.AttributeValue
	if err == nil {
		item = out.Attributes
	} else {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return nil, fmt.Errorf("idem: %s %s: %w", op, key, err)
		}
		if len(ccf.Item) == 0 {
			return nil, fmt.Errorf("idem: %s %s: %w", op, key, ErrNotFound)
		}
		if !ownToken(ccf.Item, lease) {
			return nil, s.notTaken(key, ccf.Item, now)
		}
		// Our own take-over, retried by the SDK after its answer was lost.
		item = ccf.Item
	}
	rec, err := decodeRecord(key, item)
	if err != nil {
		return nil, err
	}
	lease.CreatedAt, lease.AttemptDeadline, lease.Attempts, lease.Intent = rec.CreatedAt, rec.AttemptDeadline, rec.Attempts, rec.Intent
	lease.RecordExpiresAt = s.retainUntil(lease)
	return lease, nil
}

// notTaken explains a take-over refused by the record item.
func (s *Store) notTaken(key Key, item map[string]types.AttributeValue, now time.Time) error {
	rec, err := decodeRecord(key, item)
	switch {
	case err != nil:
		return err
	case rec.Status == StatusReleased || rec.expired(now):
		return fmt.Errorf("idem: take over %s: %w", key, ErrNotFound)
	case rec.Status.Terminal():
		return fmt.Errorf("idem: take over %s: %w", key, ErrCompleted)
	default:
		return &InFlightError{LeaseExpiresAt: rec.LeaseExpiresAt, RecordExpiresAt: s.retainUntil(&Lease{ExpiresAt: rec.LeaseExpiresAt})}
	}
}

// Record is a stored command as Get reads it.
type Record struct {
	Key            Key
	Status         Status
	Fingerprint    string // the lower-case hex form, Fingerprint.String
	CreatedAt      time.Time
	ExpiresAt      time.Time // end of retention; zero while IN_FLIGHT
	LeaseExpiresAt time.Time // zero unless IN_FLIGHT
	// AttemptDeadline is when the last attempt at the effect had to be
	// sent by; zero unless IN_FLIGHT.
	AttemptDeadline time.Time
	Attempts        int // take-overs so far
	// LeaseToken is the token of the lease that holds the record (while
	// IN_FLIGHT) or last held it: whoever settled it.
	LeaseToken string
	Intent     []byte
	Response   *Response // nil unless terminal
}

// expired reports whether the record's retention has ended at now.
func (r *Record) expired(now time.Time) bool { return policy.Expired(r.ExpiresAt, now) }

// Get reads the record for key with a strongly consistent read. A missing
// record, or one past its retention that DynamoDB has not deleted yet,
// gives ErrNotFound. A RELEASED record is returned as it is.
func (s *Store) Get(ctx context.Context, key Key) (*Record, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.tableName,
		Key:            s.keyAttr(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("idem: get %s: %w", key, err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("idem: get %s: %w", key, ErrNotFound)
	}
	rec, err := decodeRecord(key, out.Item)
	if err != nil {
		return nil, err
	}
	if rec.expired(s.opt.Clock()) {
		return nil, fmt.Errorf("idem: get %s: %w", key, ErrNotFound)
	}
	return rec, nil
}

// StuckLease is an in-flight record whose lease ran out.
type StuckLease struct {
	Key            Key
	LeaseExpiresAt time.Time
	Attempts       int // take-overs so far
}

// StuckLeases yields, from one shard of the stuck-lease index, the records
// whose lease expired before the given time, oldest first, a page at a time
// (no Scan). Terminal and released records are not in the index. Stop early
// by breaking out of the loop.
func (s *Store) StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[StuckLease, error] {
	return func(yield func(StuckLease, error) bool) {
		p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
			TableName:                 s.tableName,
			IndexName:                 aws.String(IndexStuckLeases),
			KeyConditionExpression:    aws.String("#shard = :shard AND #lexp < :before"),
			ExpressionAttributeNames:  map[string]string{"#shard": AttrLeaseShard, "#lexp": AttrLeaseExpiresAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":shard": num(int64(shard)), ":before": millis(before)},
			Limit:                     aws.Int32(100),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(StuckLease{}, fmt.Errorf("idem: stuck leases shard %d: %w", shard, err))
				return
			}
			for _, item := range page.Items {
				sl, err := s.decodeStuck(item)
				if !yield(sl, err) {
					return
				}
			}
		}
	}
}

func (s *Store) decodeStuck(item map[string]types.AttributeValue) (StuckLease, error) {
	pk, ok := item[s.opt.KeyAttribute].(*types.AttributeValueMemberS)
	if !ok {
		return StuckLease{}, fmt.Errorf("idem: stuck lease without %s", s.opt.KeyAttribute)
	}
	stored, ok := strings.CutPrefix(pk.Value, s.opt.KeyPrefix)
	if !ok {
		return StuckLease{}, fmt.Errorf("idem: stuck lease %q without the key prefix %q", pk.Value, s.opt.KeyPrefix)
	}
	key, err := ParseKey(stored)
	if err != nil {
		return StuckLease{}, err
	}
	ms, err := numberAttr(item, AttrLeaseExpiresAt)
	if err != nil {
		return StuckLease{}, err
	}
	attempts, _ := numberAttr(item, attrAttempts) // absent until the first take-over
	return StuckLease{Key: key, LeaseExpiresAt: time.UnixMilli(ms), Attempts: int(attempts)}, nil
}

func (s *Store) keyAttr(k Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.opt.KeyAttribute: str(s.stored(k))}
}

func decodeRecord(key Key, item map[string]types.AttributeValue) (*Record, error) {
	rec := &Record{Key: key}
	if v, ok := item[attrStatus].(*types.AttributeValueMemberS); ok {
		rec.Status = Status(v.Value)
	}
	if v, ok := item[attrFingerprint].(*types.AttributeValueMemberB); ok {
		rec.Fingerprint = hex.EncodeToString(v.Value)
	}
	if v, ok := item[attrIntent].(*types.AttributeValueMemberB); ok {
		rec.Intent = v.Value
	}
	if v, ok := item[attrLeaseToken].(*types.AttributeValueMemberS); ok {
		rec.LeaseToken = v.Value
	}
	created, err := numberAttr(item, attrCreatedAt)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt = time.UnixMilli(created)
	if attempts, err := numberAttr(item, attrAttempts); err == nil {
		rec.Attempts = int(attempts)
	}
	if rec.Status == StatusInFlight {
		lexp, err := numberAttr(item, AttrLeaseExpiresAt)
		if err != nil {
			return nil, err
		}
		deadline, err := numberAttr(item, attrAttemptDeadline)
		if err != nil {
			return nil, err
		}
		rec.LeaseExpiresAt, rec.AttemptDeadline = time.UnixMilli(lexp), time.UnixMilli(deadline)
		return rec, nil
	}
	exp, err := numberAttr(item, AttrExpiresAt)
	if err != nil {
		return nil, err
	}
	rec.ExpiresAt = time.Unix(exp, 0)
	switch {
	case rec.Status.Terminal():
		if rec.Response, err = decodeResponse(item); err != nil {
			return nil, err
		}
	case rec.Status != StatusReleased:
		return nil, fmt.Errorf("idem: record %s has unknown status %q", key, rec.Status)
	}
	return rec, nil
}

func numberAttr(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("idem: record has no number %s", name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("idem: record attribute %s: %w", name, err)
	}
	return n, nil
}

// fpAttr is fp as a record stores it: its 32 bytes, half the size of the
// hex form.
func fpAttr(fp Fingerprint) types.AttributeValue {
	return &types.AttributeValueMemberB{Value: fp[:]}
}

// sameFingerprint reports whether item was stored for fp.
func sameFingerprint(item map[string]types.AttributeValue, fp Fingerprint) bool {
	v, ok := item[attrFingerprint].(*types.AttributeValueMemberB)
	return ok && bytes.Equal(v.Value, fp[:])
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func millis(t time.Time) types.AttributeValue {
	return num(t.UnixMilli())
}
func seconds(t time.Time) types.AttributeValue { return num(t.Unix()) }
