package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"iter"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDBAPI is the part of *dynamodb.Client the store uses.
type DynamoDBAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
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
)

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusFailedPermanent }

// Options configure a Store. Zero fields take the defaults.
type Options struct {
	// Retention is how long a key deduplicates after its first attempt
	// (DynamoDB TTL; expired records read as absent). Default 24h.
	Retention time.Duration
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
}

// Store is an idempotency store on one DynamoDB table. It is safe for
// concurrent use.
type Store struct {
	db    DynamoDBAPI
	table string
	opt   Options
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
	setDefault(&o.Retention, 24*time.Hour)
	setDefault(&o.LeaseMargin, 5*time.Second)
	setDefault(&o.MaxLease, 15*time.Minute)
	setDefault(&o.DefaultLease, 30*time.Second)
	setDefault(&o.Shards, 16)
	setDefault(&o.CompressAbove, 1024)
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Random == nil {
		o.Random = rand.Reader
	}
	return &Store{db: db, table: table, opt: o}, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Shards is the number of stuck-lease index shards.
func (s *Store) Shards() int { return s.opt.Shards }

// Retention is how long a key deduplicates after its first attempt.
func (s *Store) Retention() time.Duration { return s.opt.Retention }

// Lease is the right to complete one command, held by one attempt. Its
// token fences every write: once the lease is taken over, the holder's
// Commit, Fail, Release and Heartbeat all fail with ErrLeaseLost.
type Lease struct {
	Key             Key
	Token           string
	ExpiresAt       time.Time // the lease
	CreatedAt       time.Time // the command's first attempt
	RecordExpiresAt time.Time // the end of retention
	Intent          []byte    // what Begin stored for reconciliation
}

// Begun is the outcome of Begin that lets the caller go on: either it owns
// a new lease (Lease != nil), or the command already finished and Replay
// is its stored response.
type Begun struct {
	Lease           *Lease
	Replay          *Response
	RecordExpiresAt time.Time
}

// Begin claims key for a request with fingerprint fp, in exactly one
// conditional PutItem. The first attempt gets a Lease; an attempt after
// completion gets the stored Replay; an attempt while another holds the key
// gets an *InFlightError; an attempt with another fingerprint gets
// ErrFingerprintMismatch and never another request's response.
//
// intent is stored on the record for whoever has to finish the command if
// its first attempt dies (the reconciler): what the request asked for.
func (s *Store) Begin(ctx context.Context, key Key, fp Fingerprint, intent []byte) (Begun, error) {
	if key.IsZero() {
		return Begun{}, &ValidationError{Field: "key", Reason: "zero Key"}
	}
	if len(intent) > maxStoredPayload/2 {
		return Begun{}, fmt.Errorf("%w: intent of %d bytes", ErrTooLarge, len(intent))
	}
	// Times are kept at the precision they are stored with, so what the
	// caller builds from this lease matches what a reader of the record
	// (the reconciler) builds from the record.
	now := time.UnixMilli(s.opt.Clock().UnixMilli())
	token, err := s.newToken()
	if err != nil {
		return Begun{}, err
	}
	lease := &Lease{
		Key:             key,
		Token:           token,
		ExpiresAt:       s.leaseUntil(ctx, now),
		CreatedAt:       now,
		RecordExpiresAt: time.Unix(now.Add(s.opt.Retention).Unix(), 0),
		Intent:          intent,
	}
	item := map[string]types.AttributeValue{
		AttrPK:             str(key.String()),
		attrStatus:         str(string(StatusInFlight)),
		attrFingerprint:    str(fp.String()),
		attrCreatedAt:      millis(lease.CreatedAt),
		AttrExpiresAt:      seconds(lease.RecordExpiresAt),
		attrLeaseToken:     str(token),
		AttrLeaseExpiresAt: millis(lease.ExpiresAt),
		AttrLeaseShard:     num(int64(s.shard(key))),
	}
	if len(intent) > 0 {
		item[attrIntent] = &types.AttributeValueMemberB{Value: intent}
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(s.table),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR #exp < :now"),
		ExpressionAttributeNames:            map[string]string{"#pk": AttrPK, "#exp": AttrExpiresAt},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": seconds(now)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt}, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Begun{}, fmt.Errorf("idem: begin %s: %w", key, err)
	}
	if len(ccf.Item) == 0 {
		return Begun{}, fmt.Errorf("idem: begin %s: condition failed without the old item", key)
	}
	if tok, ok := ccf.Item[attrLeaseToken].(*types.AttributeValueMemberS); ok && tok.Value == token {
		// Our own put: the SDK retried a call whose first attempt was
		// applied but whose answer was lost.
		return Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt}, nil
	}
	rec, err := decodeRecord(key, ccf.Item)
	if err != nil {
		return Begun{}, err
	}
	switch {
	case rec.Fingerprint != fp.String():
		return Begun{}, fmt.Errorf("idem: begin %s: %w", key, &MismatchError{RecordExpiresAt: rec.ExpiresAt})
	case rec.Status.Terminal():
		return Begun{Replay: rec.Response, RecordExpiresAt: rec.ExpiresAt}, nil
	default:
		return Begun{}, &InFlightError{LeaseExpiresAt: rec.LeaseExpiresAt, RecordExpiresAt: rec.ExpiresAt}
	}
}

// leaseUntil gives the end of a lease starting at now: the context's
// deadline (a Lambda's remaining time) plus a margin, capped by MaxLease.
func (s *Store) leaseUntil(ctx context.Context, now time.Time) time.Time {
	d := s.opt.DefaultLease
	if deadline, ok := ctx.Deadline(); ok {
		d = deadline.Sub(now) + s.opt.LeaseMargin
	}
	return now.Add(min(max(d, s.opt.LeaseMargin), s.opt.MaxLease))
}

func (s *Store) newToken() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(s.opt.Random, b[:]); err != nil {
		return "", fmt.Errorf("idem: lease token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (s *Store) shard(key Key) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key.String()))
	return int(h.Sum32() % uint32(s.opt.Shards))
}

// fence is the condition every write by a lease holder carries.
const fence = "#status = :inflight AND #tok = :tok"

func fenceValues(l *Lease) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":inflight": str(string(StatusInFlight)), ":tok": str(l.Token)}
}

// completion builds the update that moves a record from IN_FLIGHT to a
// terminal status with its response, dropping the lease attributes (and so
// leaving the stuck-lease index).
func (s *Store) completion(l *Lease, status Status, resp Response) (update string, names map[string]string, values map[string]types.AttributeValue, err error) {
	attrs, err := encodeResponse(resp, s.opt.CompressAbove, len(l.Intent))
	if err != nil {
		return "", nil, nil, err
	}
	values = fenceValues(l)
	values[":status"] = str(string(status))
	values[":done"] = millis(s.opt.Clock())
	names = map[string]string{
		"#status": attrStatus, "#tok": attrLeaseToken, "#done": attrCompletedAt,
		"#lexp": AttrLeaseExpiresAt, "#shard": AttrLeaseShard,
	}
	update = "SET #status = :status, #done = :done"
	i := 0
	for name, v := range attrs {
		i++
		n, p := "#r"+strconv.Itoa(i), ":r"+strconv.Itoa(i)
		names[n], values[p] = name, v
		update += ", " + n + " = " + p
	}
	update += " REMOVE #tok, #lexp, #shard"
	return update, names, values, nil
}

// Commit completes the command as SUCCEEDED with resp, in one
// TransactWriteItems together with the caller's business writes: all of
// them apply or none does. If the lease was lost it returns ErrLeaseLost;
// if a business write's own condition failed, a *WriteConditionError.
// A lease commits once: the lease token is the transaction's
// ClientRequestToken, so DynamoDB applies an SDK retry of it only once.
func (s *Store) Commit(ctx context.Context, l *Lease, resp Response, writes ...types.TransactWriteItem) error {
	update, names, values, err := s.completion(l, StatusSucceeded, resp)
	if err != nil {
		return fmt.Errorf("idem: commit %s: %w", l.Key, err)
	}
	items := append(writes[:len(writes):len(writes)], types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(s.table),
		Key:                       s.keyAttr(l.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(fence),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}})
	// The lease token names this commit: DynamoDB applies a retried
	// transaction with the same token once (for ten minutes).
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(l.Token)})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		failed := func(i int) bool {
			return i < len(tce.CancellationReasons) && aws.ToString(tce.CancellationReasons[i].Code) == "ConditionalCheckFailed"
		}
		// The fence first: a lost lease explains any business write that
		// failed with it (the new owner wrote those rows).
		if failed(len(writes)) {
			return fmt.Errorf("idem: commit %s: %w", l.Key, ErrLeaseLost)
		}
		for i := range writes {
			if failed(i) {
				return fmt.Errorf("idem: commit %s: %w", l.Key, &WriteConditionError{Index: i})
			}
		}
	}
	return fmt.Errorf("idem: commit %s: %w", l.Key, err)
}

// Fail completes the command as FAILED_PERMANENT with resp (a refusal every
// retry must get again, such as a declined card). Fenced like Commit.
func (s *Store) Fail(ctx context.Context, l *Lease, resp Response) error {
	update, names, values, err := s.completion(l, StatusFailedPermanent, resp)
	if err != nil {
		return fmt.Errorf("idem: fail %s: %w", l.Key, err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       s.keyAttr(l.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(fence),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	return fenced("fail", l, err)
}

// Release deletes the record, returning the key to ABSENT so a retry runs
// the command afresh. Call it only when the effect verifiably did not
// happen (the provider refused before acting, or a look-up found nothing);
// a lease that merely ran out is no such proof. Fenced like Commit.
func (s *Store) Release(ctx context.Context, l *Lease) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.table),
		Key:                       s.keyAttr(l.Key),
		ConditionExpression:       aws.String(fence),
		ExpressionAttributeNames:  map[string]string{"#status": attrStatus, "#tok": attrLeaseToken},
		ExpressionAttributeValues: fenceValues(l),
	})
	return fenced("release", l, err)
}

// Heartbeat extends the lease for long work, to the same bound Begin would
// give from ctx. Fenced like Commit.
func (s *Store) Heartbeat(ctx context.Context, l *Lease) error {
	until := s.leaseUntil(ctx, s.opt.Clock())
	values := fenceValues(l)
	values[":lexp"] = millis(until)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       s.keyAttr(l.Key),
		UpdateExpression:          aws.String("SET #lexp = :lexp"),
		ConditionExpression:       aws.String(fence),
		ExpressionAttributeNames:  map[string]string{"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": AttrLeaseExpiresAt},
		ExpressionAttributeValues: values,
	})
	if err := fenced("heartbeat", l, err); err != nil {
		return err
	}
	l.ExpiresAt = until
	return nil
}

func fenced(op string, l *Lease, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key, ErrLeaseLost)
	}
	return fmt.Errorf("idem: %s %s: %w", op, l.Key, err)
}

// TakeOver gives the caller a new lease on an IN_FLIGHT record whose lease
// has expired, for reconciliation. The previous holder's token stops
// working. A record still leased gives *InFlightError; a terminal one
// ErrCompleted; none (or one past retention) ErrNotFound.
func (s *Store) TakeOver(ctx context.Context, key Key) (*Lease, error) {
	now := s.opt.Clock()
	token, err := s.newToken()
	if err != nil {
		return nil, err
	}
	until := s.leaseUntil(ctx, now)
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.table),
		Key:                 s.keyAttr(key),
		UpdateExpression:    aws.String("SET #tok = :tok, #lexp = :lexp"),
		ConditionExpression: aws.String("#status = :inflight AND #lexp < :now AND #exp >= :nowsec"),
		ExpressionAttributeNames: map[string]string{
			"#status": attrStatus, "#tok": attrLeaseToken, "#lexp": AttrLeaseExpiresAt, "#exp": AttrExpiresAt,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":inflight": str(string(StatusInFlight)), ":tok": str(token),
			":lexp": millis(until), ":now": millis(now), ":nowsec": seconds(now),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return nil, fmt.Errorf("idem: take over %s: %w", key, err)
		}
		if len(ccf.Item) == 0 {
			return nil, fmt.Errorf("idem: take over %s: %w", key, ErrNotFound)
		}
		rec, err := decodeRecord(key, ccf.Item)
		if err != nil {
			return nil, err
		}
		switch {
		case rec.ExpiresAt.Before(now):
			return nil, fmt.Errorf("idem: take over %s: %w", key, ErrNotFound)
		case rec.Status.Terminal():
			return nil, fmt.Errorf("idem: take over %s: %w", key, ErrCompleted)
		default:
			return nil, &InFlightError{LeaseExpiresAt: rec.LeaseExpiresAt, RecordExpiresAt: rec.ExpiresAt}
		}
	}
	rec, err := decodeRecord(key, out.Attributes)
	if err != nil {
		return nil, err
	}
	return &Lease{
		Key: key, Token: token, ExpiresAt: until,
		CreatedAt: rec.CreatedAt, RecordExpiresAt: rec.ExpiresAt, Intent: rec.Intent,
	}, nil
}

// Record is a stored command as Get reads it.
type Record struct {
	Key            Key
	Status         Status
	Fingerprint    string
	CreatedAt      time.Time
	ExpiresAt      time.Time // end of retention
	LeaseExpiresAt time.Time // zero unless IN_FLIGHT
	Intent         []byte
	Response       *Response // nil while IN_FLIGHT
}

// Get reads the record for key with a strongly consistent read. A missing
// record, or one past its retention that DynamoDB has not deleted yet,
// gives ErrNotFound.
func (s *Store) Get(ctx context.Context, key Key) (*Record, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
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
	if rec.ExpiresAt.Before(s.opt.Clock()) {
		return nil, fmt.Errorf("idem: get %s: %w", key, ErrNotFound)
	}
	return rec, nil
}

// StuckLease is an in-flight record whose lease ran out.
type StuckLease struct {
	Key            Key
	LeaseExpiresAt time.Time
}

// StuckLeases yields, from one shard of the stuck-lease index, the records
// whose lease expired before the given time, oldest first, a page at a time
// (no Scan). Terminal and released records are not in the index. Stop early
// by breaking out of the loop.
func (s *Store) StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[StuckLease, error] {
	return func(yield func(StuckLease, error) bool) {
		p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
			TableName:                 aws.String(s.table),
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
				sl, err := decodeStuck(item)
				if !yield(sl, err) {
					return
				}
			}
		}
	}
}

func decodeStuck(item map[string]types.AttributeValue) (StuckLease, error) {
	pk, ok := item[AttrPK].(*types.AttributeValueMemberS)
	if !ok {
		return StuckLease{}, fmt.Errorf("idem: stuck lease without %s", AttrPK)
	}
	key, err := ParseKey(pk.Value)
	if err != nil {
		return StuckLease{}, err
	}
	ms, err := numberAttr(item, AttrLeaseExpiresAt)
	if err != nil {
		return StuckLease{}, err
	}
	return StuckLease{Key: key, LeaseExpiresAt: time.UnixMilli(ms)}, nil
}

func (s *Store) keyAttr(k Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: str(k.String())}
}

func decodeRecord(key Key, item map[string]types.AttributeValue) (*Record, error) {
	rec := &Record{Key: key}
	if v, ok := item[attrStatus].(*types.AttributeValueMemberS); ok {
		rec.Status = Status(v.Value)
	}
	if v, ok := item[attrFingerprint].(*types.AttributeValueMemberS); ok {
		rec.Fingerprint = v.Value
	}
	if v, ok := item[attrIntent].(*types.AttributeValueMemberB); ok {
		rec.Intent = v.Value
	}
	created, err := numberAttr(item, attrCreatedAt)
	if err != nil {
		return nil, err
	}
	exp, err := numberAttr(item, AttrExpiresAt)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt, rec.ExpiresAt = time.UnixMilli(created), time.Unix(exp, 0)
	switch {
	case rec.Status == StatusInFlight:
		lexp, err := numberAttr(item, AttrLeaseExpiresAt)
		if err != nil {
			return nil, err
		}
		rec.LeaseExpiresAt = time.UnixMilli(lexp)
	case rec.Status.Terminal():
		if rec.Response, err = decodeResponse(item); err != nil {
			return nil, err
		}
	default:
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

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func millis(t time.Time) types.AttributeValue {
	return num(t.UnixMilli())
}
func seconds(t time.Time) types.AttributeValue { return num(t.Unix()) }
