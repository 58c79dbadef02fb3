// Package memstore provides an in-memory idem.Backend for unit tests that
// should not need DynamoDB. It keeps the semantics of package
// dynamostore's store: the same conditional claim, fencing by lease
// token, take-over, RELEASED records that keep their fingerprint,
// retention counted from the settling lease's end (IN_FLIGHT never
// expires), the same size limit (idem.ErrTooLarge) and the same
// stuck-lease listing. Both stores pass the conformance suite of package
// idemtest.
//
//	clock := idemtest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
//	store := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
//
// Options.Clock is the store's clock: every function of package idem
// reads it through Backend.Now, so a test moves time there alone.
//
// memstore answers at once. Each write of a record is made under one
// lock. With a Ledger, a lease written over another's then clears the
// claim's end and reads the record again, outside that lock. Other
// requests may write between, as on DynamoDB. Concurrent duplicates that
// DynamoDB answers with *idem.InFlightError may meet a settled record
// here instead. Test the in-flight answer with a function that waits,
// not with timing.
//
// Commit applies its business writes to in-memory tables in one step with
// the record, and checks their conditions as DynamoDB would for the ones
// idempotent writes use most: attribute_exists(a) and
// attribute_not_exists(a) of key attributes, joined by AND. A condition
// that fails makes Commit return *idem.WriteConditionError naming the
// write, and nothing is written. Any other condition is refused with an
// error wrapping errors.ErrUnsupported, never ignored. Has tells a test
// whether a row is there, and Writes lists what was committed.
//
// An Update, Delete or ConditionCheck finds its item by its Key. A Put
// names no key, and DynamoDB checks its condition on the item with the
// Put's key. So memstore checks a Put's condition only where it knows that
// key: on a table whose key attributes are declared (DeclareKey), or when
// the Put's item has a single attribute, which is then the key. There the
// check is exact, whether the condition names the whole key or part of
// it. A conditioned Put of an item of more attributes on a table without a
// declared key is refused with an error wrapping errors.ErrUnsupported:
// memstore cannot tell a key attribute from another there. Declare the key
// of such a table. An unconditioned Put needs no key.
//
// Not checked: an Update's UpdateExpression (not applied: an Update that
// creates an item leaves its key only, all a condition here looks at), and
// what DynamoDB would refuse as invalid (key schemas of undeclared tables,
// attribute types, reserved words, unused placeholders, two writes on one
// item). pkg/idem's docs/memstore.md has a table of what is checked.
//
// The store is safe for concurrent use.
package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/claims"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/policy"
)

// Store is an in-memory idempotency store.
type Store struct {
	pol    policy.Policy
	region string
	ledger idem.Ledger
	d      *data
}

// data is what a Store keeps, shared by its Replica views.
type data struct {
	mu      sync.Mutex
	records map[idem.Key]*record
	writes  []types.TransactWriteItem
	tables  tables
	keys    map[string][]string // declared, by table
}

var _ idem.Backend = (*Store)(nil)

// record is one key's record, as the DynamoDB store keeps it.
type record struct {
	status      idem.Status
	fingerprint string
	createdAt   time.Time
	token       string
	intent      []byte
	attempts    int
	resp        *idem.Response
	// expiresAt is the end of retention, at a whole second; zero while
	// IN_FLIGHT.
	expiresAt time.Time
	// leaseExpiresAt and attemptDeadline are set only while IN_FLIGHT.
	leaseExpiresAt  time.Time
	attemptDeadline time.Time
	// writes is the digest of the business writes its Commit applied. By
	// it a repeated Commit recognises itself.
	writes string
	region string // the Region of the store that last took a lease
	// queuedUntil is MarkQueued's mark, at a whole millisecond; zero
	// when none. queuedRenewed is how long RenewQueued kept it live.
	queuedUntil, queuedRenewed time.Time
}

// Options configure a Store, as the same fields of dynamostore.Options do
// the DynamoDB store, with the same defaults. CompressAbove counts for the
// size limit only.
type Options struct {
	Retention, ReleaseRetention         time.Duration
	LeaseMargin, MaxLease, DefaultLease time.Duration
	Shards, CompressAbove               int
	// Clock is the store's clock, which every function of package idem
	// reads through Backend.Now. Default time.Now.
	Clock  func() time.Time
	Random io.Reader
	// Region and Ledger are dynamostore.Options': the Region whose
	// leases mark the records, and the Ledger of claims.
	Region string
	Ledger idem.Ledger
}

// New returns an empty Store.
func New(optFns ...func(*Options)) *Store {
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	return &Store{
		pol: policy.WithDefaults(policy.Policy{
			Retention: o.Retention, ReleaseRetention: o.ReleaseRetention, LeaseMargin: o.LeaseMargin, MaxLease: o.MaxLease, DefaultLease: o.DefaultLease,
			Shards: o.Shards, CompressAbove: o.CompressAbove, Clock: o.Clock, Random: o.Random,
		}),
		region: o.Region, ledger: o.Ledger,
		d: &data{records: map[idem.Key]*record{}, tables: tables{}, keys: map[string][]string{}},
	}
}

// Replica is a view of s's records from region, with s's options. It is
// a replica of a global table, kept in step at once. Records it leases
// are marked with region.
func (s *Store) Replica(region string) *Store {
	return &Store{pol: s.pol, region: region, ledger: s.ledger, d: s.d}
}

// Now is the store's clock, Options.Clock.
func (s *Store) Now() time.Time { return s.pol.Clock() }

// Shards is the number of stuck-lease shards.
func (s *Store) Shards() int { return s.pol.Shards }

// Retention is how long a key deduplicates once settled.
func (s *Store) Retention() time.Duration { return s.pol.Retention }

// Writes returns the business writes committed so far, in commit order.
func (s *Store) Writes() []types.TransactWriteItem {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return slices.Clone(s.d.writes)
}

// DeclareKey gives a business table's key attributes: its partition key,
// and its sort key if it has one. A Put then finds its item by the whole
// key, as DynamoDB does, however little of it its condition names. Declare
// every table that takes conditioned Puts of items with more than one
// attribute. Without it, memstore cannot tell which item DynamoDB would
// check. It refuses such a Put with errors.ErrUnsupported.
func (s *Store) DeclareKey(table string, key ...string) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.keys[table] = slices.Clone(key)
}

// Has reports whether the business table holds an item with key's
// attribute values. It reads the table as the committed writes left it:
// put or updated, and not deleted since. It is what a test asks of
// DynamoDB with GetItem.
func (s *Store) Has(table string, key map[string]types.AttributeValue) bool {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.tables.has(table, key)
}

// Begin claims key for a request with fingerprint fp, as dynamostore.Store.Begin.
func (s *Store) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if err := done(ctx, "begin", key); err != nil {
		return idem.Begun{}, err
	}
	if key == (idem.Key{}) {
		return idem.Begun{}, fmt.Errorf("%w: the zero Key", idem.ErrInvalidKey)
	}
	if len(intent) > policy.MaxIntent {
		return idem.Begun{}, fmt.Errorf("%w: intent of %d bytes", idem.ErrTooLarge, len(intent))
	}
	now := s.pol.Now()
	token, err := s.pol.Token()
	if err != nil {
		return idem.Begun{}, err
	}
	lease := &idem.Lease{Key: key, Token: token, ExpiresAt: s.pol.LeaseUntil(ctx, now), CreatedAt: now, Intent: bytes.Clone(intent)}
	tookUp := false // an earlier claim, its record lost
	if s.ledger != nil && !s.live(key, now) {
		// The Ledger first, as dynamostore's: another Region's record may
		// not have replicated here.
		c, err := s.ledger.Claim(ctx, key, idem.Claim{Region: s.region, CreatedAt: now, Until: s.pol.Latest(now, lease.ExpiresAt), Fingerprint: fp})
		switch {
		case errors.Is(err, idem.ErrClaimedElsewhere):
			return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), err)
		case err != nil:
			return idem.Begun{}, fmt.Errorf("idem: begin %s: ledger: %w: %w", key.LogHash(), idem.ErrUnavailable, err)
		case !s.replicated(key, c.CreatedAt):
			return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), &idem.ClaimedElsewhereError{})
		}
		if !c.CreatedAt.Equal(now) {
			if err := s.takeUp(key, c, fp, now); err != nil {
				return idem.Begun{}, fmt.Errorf("idem: begin %s: %w", key.LogHash(), err)
			}
			if err := s.extendClaim(ctx, "begin", key, c.CreatedAt, lease.ExpiresAt); err != nil {
				return idem.Begun{}, err
			}
			tookUp = true
		}
		lease.CreatedAt, lease.Inherited = time.UnixMilli(c.CreatedAt.UnixMilli()), c.InheritedBy(s.region)
	}
	begun, claimedBack, err := s.begin(ctx, lease, fp, now)
	if err != nil || begun.Lease == nil || !tookUp && !claimedBack {
		return begun, err
	}
	// An earlier lease's command leased again, as dynamostore's leased:
	// its record is IN_FLIGHT now (claims.Leased).
	return claims.Leased(ctx, begun.Lease, claims.ReadOn(s.ledger, s.stored), s.mark("begin"), s.settle("begin"))
}

// live reports whether key has a record within its retention at now.
func (s *Store) live(key idem.Key, now time.Time) bool {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	rec, ok := s.d.records[key]
	return ok && !rec.expired(now)
}

// takeUp refuses to take up c, an earlier claim, for a request with
// fingerprint fp, by claims.TakeUp.
func (s *Store) takeUp(key idem.Key, c idem.Claim, fp idem.Fingerprint, now time.Time) error {
	s.d.mu.Lock()
	rec, ok := s.d.records[key]
	held := ok && rec.createdAt.Equal(c.CreatedAt)
	var status idem.Status
	if held {
		status = rec.status
	}
	s.d.mu.Unlock()
	return claims.TakeUp(c, held, status, fp, s.region, s.pol.Earliest(c.CreatedAt, c.CreatedAt), now)
}

// mayWrite reports whether s may lease a record region's store marked.
// It is dynamostore's rule: always, without a Ledger.
func (s *Store) mayWrite(key idem.Key, region string) bool {
	return s.ledger == nil || region == "" || region == s.region || s.ledger.Yields(key, region)
}

// replicated reports whether the command created at created can have
// changed in no Region pending a drain, as dynamostore's rule. Its record
// here may be an older copy.
func (s *Store) replicated(key idem.Key, created time.Time) bool {
	return s.ledger == nil || !created.Before(s.ledger.Unreplicated(key))
}

// extendClaim makes the Ledger's claim of the command created at created
// last as long as a record settled under a lease until leaseEnd may, as
// dynamostore's.
func (s *Store) extendClaim(ctx context.Context, op string, key idem.Key, created, leaseEnd time.Time) error {
	if s.ledger == nil {
		return nil
	}
	return ledgerError(op, key, s.ledger.Extend(ctx, key, s.region, created, s.pol.Latest(created, leaseEnd)))
}

// ledgerError wraps a Ledger's err for op on key, as dynamostore does.
func ledgerError(op string, key idem.Key, err error) error {
	switch {
	case errors.Is(err, idem.ErrClaimedElsewhere), errors.Is(err, idem.ErrLeaseLost):
		return fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), err)
	case err != nil:
		return fmt.Errorf("idem: %s %s: ledger: %w: %w", op, key.LogHash(), idem.ErrUnavailable, err)
	}
	return nil
}

// begin writes lease's record, unless another stands. claimedBack says
// it wrote over a RELEASED record: an earlier lease's, whatever the
// clock says.
func (s *Store) begin(ctx context.Context, lease *idem.Lease, fp idem.Fingerprint, now time.Time) (_ idem.Begun, claimedBack bool, _ error) {
	lease.AttemptDeadline = lease.ExpiresAt
	lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	rec, ok := s.d.records[lease.Key]
	if !ok || policy.Expired(rec.expiresAt, now) {
		s.d.records[lease.Key] = &record{
			status: idem.StatusInFlight, fingerprint: fp.String(), createdAt: lease.CreatedAt, token: lease.Token,
			intent: lease.Intent, leaseExpiresAt: lease.ExpiresAt, attemptDeadline: lease.AttemptDeadline, region: s.region,
		}
		return idem.Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt, Status: idem.StatusInFlight}, false, nil
	}
	expires := rec.expiresAt
	if expires.IsZero() {
		expires = s.pol.Earliest(rec.createdAt, rec.leaseExpiresAt)
	}
	switch {
	case rec.fingerprint != fp.String():
		return idem.Begun{}, false, fmt.Errorf("idem: begin %s: %w", lease.Key.LogHash(), &idem.MismatchError{RecordExpiresAt: expires})
	case rec.status.Terminal():
		return idem.Begun{Replay: cloned(rec.resp), RecordExpiresAt: expires, Status: rec.status}, false, nil
	case rec.status == idem.StatusReleased && !s.mayWrite(lease.Key, rec.region):
		return idem.Begun{}, false, fmt.Errorf("idem: begin %s: %w", lease.Key.LogHash(), &idem.ClaimedElsewhereError{Region: rec.region})
	case rec.status == idem.StatusReleased && !s.replicated(lease.Key, rec.createdAt):
		return idem.Begun{}, false, fmt.Errorf("idem: begin %s: %w", lease.Key.LogHash(), &idem.ClaimedElsewhereError{})
	case rec.status == idem.StatusReleased:
		if err := s.extendClaim(ctx, "begin", lease.Key, rec.createdAt, lease.ExpiresAt); err != nil {
			return idem.Begun{}, false, err
		}
		// Claimed again by the same request, under the same CreatedAt.
		lease.CreatedAt, lease.Inherited = rec.createdAt, false
		lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
		rec.status, rec.token, rec.leaseExpiresAt, rec.attemptDeadline = idem.StatusInFlight, lease.Token, lease.ExpiresAt, lease.AttemptDeadline
		rec.region = s.region
		rec.expiresAt, rec.attempts, rec.queuedUntil, rec.queuedRenewed = time.Time{}, 0, time.Time{}, time.Time{}
		if len(lease.Intent) > 0 {
			rec.intent = lease.Intent
		} else {
			lease.Intent = bytes.Clone(rec.intent) // kept: sized with the response
		}
		return idem.Begun{Lease: lease, RecordExpiresAt: lease.RecordExpiresAt, Status: idem.StatusInFlight}, true, nil
	default:
		return idem.Begun{}, false, &idem.InFlightError{LeaseExpiresAt: rec.leaseExpiresAt, RecordExpiresAt: expires}
	}
}

// Commit completes the command as SUCCEEDED with resp, as
// dynamostore.Store.Commit does. It applies writes with the record in one
// step. A write whose condition fails gives *idem.WriteConditionError, and
// neither the writes nor the record change. A Commit repeated with the
// same response, by the lease that made it, returns nil again.
func (s *Store) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	if err := done(ctx, "commit", l.Key); err != nil {
		return err
	}
	if err := s.write("commit", l, idem.StatusSucceeded, &resp, writes); err != nil {
		return err
	}
	return claims.Settled(ctx, l, s.settle("commit"))
}

// Fail completes the command as FAILED_PERMANENT with resp, as
// dynamostore.Store.Fail.
func (s *Store) Fail(ctx context.Context, l *idem.Lease, resp idem.Response) error {
	if err := done(ctx, "fail", l.Key); err != nil {
		return err
	}
	if err := s.write("fail", l, idem.StatusFailedPermanent, &resp, nil); err != nil {
		return err
	}
	return claims.Settled(ctx, l, s.settle("fail"))
}

// Release marks the record RELEASED, keeping its fingerprint until
// retention ends, as dynamostore.Store.Release. The Ledger's claim
// records the release's end first (claims.Release).
func (s *Store) Release(ctx context.Context, l *idem.Lease) error {
	if err := done(ctx, "release", l.Key); err != nil {
		return err
	}
	return claims.Release(ctx, l, s.mark("release"), s.stored, s.pol.ReleasedUntil(l.CreatedAt), func() error {
		return s.write("release", l, idem.StatusReleased, nil, nil)
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

// SettleClaim clears any release's end from the Ledger's claim of a
// settled command, as dynamostore.Store.SettleClaim.
func (s *Store) SettleClaim(ctx context.Context, key idem.Key, created time.Time) error {
	if err := done(ctx, "settle claim", key); err != nil {
		return err
	}
	return s.settle("settle claim")(ctx, key, created)
}

func (s *Store) write(op string, l *idem.Lease, status idem.Status, resp *idem.Response, writes []types.TransactWriteItem) error {
	if resp != nil {
		body, _ := policy.StoredBody(resp.Body, s.pol.CompressAbove)
		if why := policy.TooLarge(resp.Headers, body, len(l.Intent)); why != "" {
			return fmt.Errorf("idem: %s %s: %w: %s", op, l.Key.LogHash(), idem.ErrTooLarge, why)
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	ws, err := parseWrites(writes, s.d.keys)
	if err != nil {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), err)
	}
	rec, ok := s.d.records[l.Key]
	if !ok || !s.fenced(rec, l) {
		// The lease's own settlement, repeated, succeeds again.
		if ok && rec.token == l.Token && rec.status == status && (resp == nil || rec.resp.Equal(*resp)) && rec.writes == policy.WritesDigest(writes) {
			l.RecordExpiresAt = rec.expiresAt
			return nil
		}
		return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), idem.ErrLeaseLost)
	}
	if i := s.d.tables.failed(ws); i >= 0 {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), &idem.WriteConditionError{Index: i})
	}
	rec.status, rec.expiresAt = status, s.pol.SettledUntil(status == idem.StatusReleased, l.CreatedAt, l.ExpiresAt)
	l.RecordExpiresAt = rec.expiresAt
	rec.leaseExpiresAt, rec.attemptDeadline = time.Time{}, time.Time{}
	if resp != nil {
		rec.resp = normalized(*resp)
	}
	s.d.tables.apply(ws)
	rec.writes = policy.WritesDigest(writes)
	s.d.writes = append(s.d.writes, writes...)
	return nil
}

// fenced reports whether l holds rec: the guard of every write by a lease
// holder.
func (s *Store) fenced(rec *record, l *idem.Lease) bool {
	return rec.status == idem.StatusInFlight && rec.token == l.Token
}

// Heartbeat extends the lease, as dynamostore.Store.Heartbeat.
func (s *Store) Heartbeat(ctx context.Context, l *idem.Lease) error {
	if err := done(ctx, "heartbeat", l.Key); err != nil {
		return err
	}
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

// Postpone gives up the lease until the given time, keeping the command
// IN_FLIGHT, as dynamostore.Store.Postpone.
func (s *Store) Postpone(ctx context.Context, l *idem.Lease, until time.Time) error {
	if err := done(ctx, "postpone", l.Key); err != nil {
		return err
	}
	until = time.UnixMilli(until.UnixMilli())
	if err := s.extend(ctx, "postpone", l, until, false); err != nil {
		return err
	}
	l.ExpiresAt = until
	l.RecordExpiresAt = s.pol.Earliest(l.CreatedAt, until)
	return nil
}

func (s *Store) extend(ctx context.Context, op string, l *idem.Lease, until time.Time, attempt bool) error {
	if err := s.extendClaim(ctx, op, l.Key, l.CreatedAt, until); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	rec, ok := s.d.records[l.Key]
	if !ok || !s.fenced(rec, l) {
		return fmt.Errorf("idem: %s %s: %w", op, l.Key.LogHash(), idem.ErrLeaseLost)
	}
	rec.leaseExpiresAt = until
	if attempt {
		rec.attemptDeadline = until
	}
	return nil
}

// TakeOver gives the caller a new lease on an IN_FLIGHT record whose lease
// has expired, as dynamostore.Store.TakeOver.
func (s *Store) TakeOver(ctx context.Context, key idem.Key) (*idem.Lease, error) {
	return s.takeOver(ctx, key, "take over", time.Time{})
}

// Preempt takes over an IN_FLIGHT record whatever its lease, as
// dynamostore.Store.Preempt. It also claims a live RELEASED one back. It
// takes only the command created at created.
func (s *Store) Preempt(ctx context.Context, key idem.Key, created time.Time) (*idem.Lease, error) {
	if created.IsZero() {
		return nil, fmt.Errorf("idem: preempt %s: a zero CreatedAt names no command: %w", key.LogHash(), idem.ErrNotFound)
	}
	return s.takeOver(ctx, key, "preempt", created)
}

func (s *Store) takeOver(ctx context.Context, key idem.Key, op string, created time.Time) (*idem.Lease, error) {
	if err := done(ctx, op, key); err != nil {
		return nil, err
	}
	lease, err := s.leaseOver(ctx, key, op, created)
	if err != nil {
		return nil, err
	}
	// Outside the records' lock: Leased reads the record after its clear.
	if err := claims.TakenOver(ctx, op, lease, claims.ReadOn(s.ledger, s.stored), s.mark(op), s.settle(op)); err != nil {
		return nil, err
	}
	return lease, nil
}

// leaseOver writes takeOver's lease on key's record, under the records'
// lock.
func (s *Store) leaseOver(ctx context.Context, key idem.Key, op string, created time.Time) (*idem.Lease, error) {
	live := !created.IsZero()
	now := s.pol.Now()
	token, err := s.pol.Token()
	if err != nil {
		return nil, err
	}
	lease := &idem.Lease{Key: key, Token: token, ExpiresAt: s.pol.LeaseUntil(ctx, now)}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	rec, ok := s.d.records[key]
	switch {
	case !ok || rec.expired(now) || rec.status == idem.StatusReleased && !live || live && rec.createdAt.UnixMilli() != created.UnixMilli():
		return nil, fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), idem.ErrNotFound)
	case !s.mayWrite(key, rec.region):
		return nil, fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), &idem.ClaimedElsewhereError{Region: rec.region})
	case !s.replicated(key, rec.createdAt):
		return nil, fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), &idem.ClaimedElsewhereError{})
	case rec.status.Terminal():
		return nil, fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), idem.ErrCompleted)
	case !live && !rec.leaseExpiresAt.Before(now):
		return nil, &idem.InFlightError{LeaseExpiresAt: rec.leaseExpiresAt, RecordExpiresAt: s.pol.Earliest(rec.createdAt, rec.leaseExpiresAt)}
	}
	if err := s.extendClaim(ctx, op, key, rec.createdAt, lease.ExpiresAt); err != nil {
		return nil, err
	}
	if rec.status == idem.StatusReleased {
		// Back to IN_FLIGHT, with no expiry, as a re-claim.
		rec.status, rec.expiresAt, rec.attemptDeadline = idem.StatusInFlight, time.Time{}, lease.ExpiresAt
	}
	rec.token, rec.leaseExpiresAt, rec.region = token, lease.ExpiresAt, s.region
	rec.attempts++
	lease.CreatedAt, lease.AttemptDeadline, lease.Attempts, lease.Intent = rec.createdAt, rec.attemptDeadline, rec.attempts, bytes.Clone(rec.intent)
	lease.RecordExpiresAt = s.pol.Earliest(lease.CreatedAt, lease.ExpiresAt)
	return lease, nil
}

// Get returns the record for key, as dynamostore.Store.Get: ErrNotFound when it
// is absent or past retention.
func (s *Store) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	rec, err := s.stored(ctx, key)
	switch {
	case err != nil:
		return nil, err
	case policy.Expired(rec.ExpiresAt, s.pol.Clock()):
		return nil, fmt.Errorf("idem: get %s: %w", key.LogHash(), idem.ErrNotFound)
	}
	return rec, nil
}

// stored reads key's record, even one past its retention, as
// dynamostore's. ErrNotFound says none is stored.
func (s *Store) stored(ctx context.Context, key idem.Key) (*idem.Record, error) {
	if err := done(ctx, "get", key); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	rec, ok := s.d.records[key]
	if !ok {
		return nil, fmt.Errorf("idem: get %s: %w", key.LogHash(), idem.ErrNotFound)
	}
	return &idem.Record{
		Key: key, Status: rec.status, Fingerprint: rec.fingerprint, CreatedAt: rec.createdAt, ExpiresAt: rec.expiresAt,
		LeaseExpiresAt: rec.leaseExpiresAt, AttemptDeadline: rec.attemptDeadline, Attempts: rec.attempts,
		LeaseToken: rec.token, Intent: bytes.Clone(rec.intent), Response: cloned(rec.resp), Region: rec.region,
	}, nil
}

// StuckLeases yields one shard's IN_FLIGHT records whose lease expired
// before the given time, oldest first. It does as
// dynamostore.Store.StuckLeases does. The lease's end and before are
// compared in whole epoch milliseconds, as the DynamoDB store keeps them.
// before is cut to its millisecond. So a lease that ended at 12:00:00.001
// is not listed before 12:00:00.0015.
func (s *Store) StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[idem.Record, error] {
	if err := ctx.Err(); err != nil {
		return func(yield func(idem.Record, error) bool) {
			yield(idem.Record{}, fmt.Errorf("idem: stuck leases shard %d: %w", shard, err))
		}
	}
	beforeMs := before.UnixMilli()
	s.d.mu.Lock()
	var stuck []idem.Record
	for key, rec := range s.d.records {
		if rec.status == idem.StatusInFlight && rec.leaseExpiresAt.UnixMilli() < beforeMs && s.pol.Shard(key.String()) == shard {
			stuck = append(stuck, idem.Record{Key: key, LeaseExpiresAt: rec.leaseExpiresAt, Attempts: rec.attempts})
		}
	}
	s.d.mu.Unlock()
	slices.SortFunc(stuck, func(a, b idem.Record) int { return a.LeaseExpiresAt.Compare(b.LeaseExpiresAt) })
	return func(yield func(idem.Record, error) bool) {
		for _, sl := range stuck {
			if !yield(sl, nil) {
				return
			}
		}
	}
}

// MarkQueued marks key's IN_FLIGHT record as carried by a queued recovery
// message until until, as dynamostore.Store.MarkQueued does. It reports
// false while another mark is live, or for a record not IN_FLIGHT.
func (s *Store) MarkQueued(ctx context.Context, key idem.Key, until time.Time) (bool, error) {
	if err := done(ctx, "mark queued", key); err != nil {
		return false, err
	}
	now := s.pol.Clock().UnixMilli()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	rec, ok := s.d.records[key]
	if !ok || rec.status != idem.StatusInFlight || !s.mayWrite(key, rec.region) || !s.replicated(key, rec.createdAt) {
		// Absent, settled, or not this Region's to write, as dynamostore's.
		return false, nil
	}
	if rec.queuedUntil.UnixMilli() > now || rec.queuedRenewed.UnixMilli() > now {
		return false, nil
	}
	rec.queuedUntil, rec.queuedRenewed = time.UnixMilli(until.UnixMilli()), time.Time{}
	return true, nil
}

// RenewQueued keeps the mark MarkQueued set until until live for hold
// more, as dynamostore.Store.RenewQueued.
func (s *Store) RenewQueued(ctx context.Context, key idem.Key, until time.Time, hold time.Duration) error {
	if err := done(ctx, "renew queued", key); err != nil {
		return err
	}
	renewed := time.UnixMilli(s.pol.Clock().Add(hold).UnixMilli())
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if rec, ok := s.d.records[key]; ok && rec.marked(until) {
		rec.queuedRenewed = renewed
	}
	return nil
}

// UnmarkQueued removes the mark MarkQueued set until until, as
// dynamostore.Store.UnmarkQueued.
func (s *Store) UnmarkQueued(ctx context.Context, key idem.Key, until time.Time) error {
	if err := done(ctx, "unmark queued", key); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if rec, ok := s.d.records[key]; ok && rec.marked(until) {
		rec.queuedUntil, rec.queuedRenewed = time.Time{}, time.Time{}
	}
	return nil
}

// marked reports whether the record holds the mark named until.
func (r *record) marked(until time.Time) bool {
	return !r.queuedUntil.IsZero() && r.queuedUntil.UnixMilli() == until.UnixMilli()
}

// expired reports whether the record's retention has ended at now.
func (r *record) expired(now time.Time) bool { return policy.Expired(r.expiresAt, now) }

// normalized copies resp as a stored response reads back: a headers map
// and a body, both non-nil.
func normalized(resp idem.Response) *idem.Response {
	out := &idem.Response{Status: resp.Status, Headers: maps.Clone(resp.Headers), Body: bytes.Clone(resp.Body)}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if out.Body == nil {
		out.Body = []byte{}
	}
	return out
}

// cloned is a copy of a stored response, nil for none.
func cloned(r *idem.Response) *idem.Response {
	if r == nil {
		return nil
	}
	return normalized(*r)
}

// done refuses a call whose context has ended, as the DynamoDB store's SDK
// does. Nothing is read or changed.
func done(ctx context.Context, op string, key idem.Key) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("idem: %s %s: %w", op, key.LogHash(), err)
	}
	return nil
}
