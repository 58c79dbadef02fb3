package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Resolver finds out what became of the effect of a command whose attempt
// died, under the lease Recover took over from it: the lease carries the
// key, CreatedAt (for references derived from them), the Intent Begin
// stored, the AttemptDeadline and the Attempts so far. Only the resolver
// can tell whether an effect outside the store happened (ask the payment
// provider), so Recover requires one; ReleaseLocalEffect is the one for
// effects that live in the record's own transaction. An error leaves the
// command IN_FLIGHT under the taken-over lease, to be recovered again
// once it runs out.
type Resolver func(ctx context.Context, l *Lease) (Resolution, error)

// Resolution is a Resolver's finding: the Outcome to settle the command
// with, as Settle applies it, and, for an Unknown outcome, when to look
// again.
type Resolution struct {
	Outcome Outcome
	// RetryAt, with an Unknown outcome, postpones the lease to then
	// (Postpone): nobody takes the command over before, and StuckLeases
	// lists it again after. Zero leaves the lease Recover took, which runs
	// out on its own. With any other verdict Recover refuses it.
	RetryAt time.Time
}

// Resolved is the resolution that settles the command as out says: its
// business writes committed with the record (Succeeded), its refusal
// stored (Failed), or its key released for a retry to run it afresh
// (NotApplied); an Unknown outcome leaves it IN_FLIGHT.
func Resolved(out Outcome) Resolution { return Resolution{Outcome: out} }

// Postponed is the resolution of a command whose outcome cannot be known
// yet (the provider is down, or its "not found" cannot be trusted before
// its settle window has passed): it stays IN_FLIGHT, and is looked at again
// after until.
func Postponed(until time.Time) Resolution { return Resolution{RetryAt: until} }

// ReleaseLocalEffect is the Resolver for a command whose only effect is
// the business writes its Succeeded outcome commits in the record's
// transaction: it releases the command, so the next retry runs its
// function again. A record still IN_FLIGHT once its lease is taken over
// proves that no such write happened, since they commit only with the
// record's move out of IN_FLIGHT, and that none will, since the dead
// attempt's token no longer passes the fence. It is not a bare timer: the
// lease's end only allows the take-over, the release rests on the record's
// state, and a slow attempt that wakes up later writes nothing
// (ErrLeaseLost), where a timer that freed the key would let it and the
// retry both write. Any effect outside that transaction (a payment, an
// email, a write of the function's own) needs a Resolver that asks.
func ReleaseLocalEffect(context.Context, *Lease) (Resolution, error) {
	return Resolved(NotApplied(Response{})), nil
}

// Reclaimer is the part of a store Recover needs: it reads the record,
// takes a lease that ran out over, and settles or postpones the command.
// *Store and the in-memory store of package memstore implement it, as
// does any RecoveryBackend.
type Reclaimer interface {
	Backend
	Get(ctx context.Context, key Key) (*Record, error)
	TakeOver(ctx context.Context, key Key) (*Lease, error)
	Postpone(ctx context.Context, l *Lease, until time.Time) error
}

var _ Reclaimer = RecoveryBackend(nil)

// RecoverOptions adjust Recover.
type RecoverOptions struct {
	// Clock returns the current time, to tell a lease that ran out; give
	// it the store's clock. Default time.Now.
	Clock func() time.Time
}

// Recovery is what Recover did with one key.
type Recovery struct {
	// Lease is the lease Recover took over and asked the resolver under;
	// nil when there was nothing to take over. After a settlement error
	// it is still the record's, until it runs out.
	Lease *Lease
	// Status is the record's status as Recover left it: the settlement's,
	// or IN_FLIGHT (postponed, still unknown, or not settled for an
	// error). With no Lease it is IN_FLIGHT for a record whose lease has
	// not run out (its holder, or another reconciler, is on it), and
	// empty for one that needs no recovery: absent, settled or released.
	Status Status
}

// errNoResolver refuses a recovery nothing could decide.
var errNoResolver = errors.New("idem: recover: a Resolver is required (ReleaseLocalEffect for effects only in the record's transaction)")

// Recover resolves the command key names if its attempt died: if the
// record is IN_FLIGHT with a lease that ran out, it takes the lease over,
// asks resolve what became of the effect, and settles (Settle) or
// postpones (Postpone) the command as the Resolution says; anything else
// it leaves alone, without an error. It is Sweep's step for one key, and
// what a reconciler fed by a queue of keys calls for each. An error leaves
// the record IN_FLIGHT, under Recovery.Lease if one was taken (a
// settlement's ErrLeaseLost or *WriteConditionError among them), and its
// text names the key by its hash (Key.LogHash), never the key or its
// client part, as written, quoted or URL-escaped.
func Recover(ctx context.Context, b Reclaimer, key Key, resolve Resolver, optFns ...func(*RecoverOptions)) (Recovery, error) {
	if resolve == nil {
		return Recovery{}, errNoResolver
	}
	o := RecoverOptions{Clock: time.Now}
	for _, fn := range optFns {
		fn(&o)
	}
	rec, err := b.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return Recovery{}, nil
	case err != nil:
		return Recovery{}, &recoverError{key, err}
	case rec.Status != StatusInFlight:
		return Recovery{}, nil
	case rec.LeaseExpiresAt.After(o.Clock()):
		return Recovery{Status: StatusInFlight}, nil
	}
	lease, err := b.TakeOver(ctx, key)
	switch {
	case errors.Is(err, ErrInFlight):
		return Recovery{Status: StatusInFlight}, nil
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrCompleted):
		return Recovery{}, nil
	case err != nil:
		return Recovery{}, &recoverError{key, err}
	}
	r := Recovery{Lease: lease, Status: StatusInFlight}
	res, err := resolve(ctx, lease)
	switch {
	case err != nil:
		return r, &recoverError{key, err}
	case !res.RetryAt.IsZero() && res.Outcome.Verdict != VerdictUnknown:
		return r, &recoverError{key, errors.New("a retry time with a verdict that settles")}
	case !res.RetryAt.IsZero():
		if err := b.Postpone(ctx, lease, res.RetryAt); err != nil {
			return r, &recoverError{key, err}
		}
		return r, nil
	}
	status, err := Settle(ctx, b, lease, res.Outcome)
	if err != nil {
		return r, &recoverError{key, err}
	}
	r.Status = status
	return r, nil
}

// recoverError is an error of Recover's. Its text names the key by its
// hash wherever the error it wraps names the key itself or its client part
// (this package's stores never do, but a caller's Reclaimer or Resolver
// may, a resolver most likely by the client's key, such as an order
// number), since a sweep's errors are bound for a log.
type recoverError struct {
	key Key
	err error
}

func (e *recoverError) Error() string {
	hash := "key:" + e.key.LogHash()
	// One pass, longest form first: a form inside a longer one, or inside
	// a hash already written, is not replaced again.
	forms := append([]string{e.key.String()}, clientKeyForms(e.key.ClientKey())...)
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, hash)
	}
	return "idem: recover " + hash + ": " + strings.NewReplacer(pairs...).Replace(e.err.Error())
}

// clientKeyForms are the ways an error may write a client key: as it is,
// quoted by Go or JSON (%q, encoding/json), or escaped in a URL's path (as
// one segment, or keeping its '/' as url.JoinPath does) or query.
func clientKeyForms(ck string) []string {
	if ck == "" {
		return nil
	}
	quoted := strconv.Quote(ck)
	js, _ := json.Marshal(ck)
	path := (&url.URL{Path: ck}).EscapedPath()
	return []string{ck, quoted[1 : len(quoted)-1], string(js[1 : len(js)-1]), url.PathEscape(ck), path, url.QueryEscape(ck)}
}

func (e *recoverError) Unwrap() error { return e.err }

// SweepOptions adjust Sweep.
type SweepOptions struct {
	// Clock returns the current time: a lease that ran out before it is
	// stuck. Give it the store's clock. Default time.Now.
	Clock func() time.Time
	// FirstShard is the shard read first (modulo the store's Shards); the
	// others follow in turn. A sweep cut short by its context leaves the
	// last shards unread, so rotate it between runs (by the minute of a
	// scheduled sweep, say). Default 0.
	FirstShard int
}

// Swept is what one Sweep did.
type Swept struct {
	// Found counts the stuck leases the sweep recovered or tried to.
	Found int
	// Settled counts those it left SUCCEEDED, FAILED_PERMANENT or
	// RELEASED, and Failed those Recover returned an error for. The rest
	// are IN_FLIGHT still: postponed, unknown, or taken by someone else.
	Settled, Failed int
	// Unreadable counts the stuck-lease index's items of this store that
	// did not decode: each is passed over, its error (naming the item by
	// its key's hash) joined to Sweep's.
	Unreadable int
}

// Sweep recovers every command whose lease has run out: it reads the
// stuck-lease index shard by shard (StuckLeases, no Scan) and calls Recover
// with resolve for each key listed. A failed shard query or key does not
// stop it; the errors come back joined. It stops when ctx ends, with ctx's
// error: what it did not reach stays in the index for the next sweep, and
// a key it was resolving keeps its taken-over lease until that runs out.
func Sweep(ctx context.Context, b RecoveryBackend, resolve Resolver, optFns ...func(*SweepOptions)) (Swept, error) {
	if resolve == nil {
		return Swept{}, errNoResolver
	}
	o := SweepOptions{Clock: time.Now}
	for _, fn := range optFns {
		fn(&o)
	}
	var (
		sum  Swept
		errs []error
	)
	shards, before := b.Shards(), o.Clock()
	if shards < 1 {
		return Swept{}, errors.New("idem: sweep: the store has no shards")
	}
	first := (o.FirstShard%shards + shards) % shards
	for i := range shards {
		for sl, err := range b.StuckLeases(ctx, (first+i)%shards, before) {
			if ctx.Err() != nil {
				return sum, errors.Join(append(errs, ctx.Err())...)
			}
			if errors.Is(err, ErrUnreadableRecord) {
				sum.Unreadable++
				errs = append(errs, err)
				continue
			}
			if err != nil {
				errs = append(errs, err)
				break
			}
			sum.Found++
			r, err := Recover(ctx, b, sl.Key, resolve, func(ro *RecoverOptions) { ro.Clock = o.Clock })
			switch {
			case err != nil:
				sum.Failed++
				errs = append(errs, err)
			case r.Lease != nil && r.Status != StatusInFlight:
				sum.Settled++
			}
		}
	}
	return sum, errors.Join(errs...)
}
