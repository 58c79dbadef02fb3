package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Resolver finds out what became of the effect of a command whose attempt
// died. It runs under the lease Recover took over. The lease carries the
// key and CreatedAt, from which references derive. It carries the Intent
// Begin stored, the AttemptDeadline and the Attempts so far. Only a
// resolver can tell whether an effect outside the store happened: it asks
// the payment provider. So Recover requires one. ReleaseLocalEffect is the
// one for effects in the record's own transaction.
//
// The Outcome settles the command as Settle applies it. Postponed(t) keeps
// it IN_FLIGHT and looks again after t. An error leaves it IN_FLIGHT under
// the taken-over lease. It is recovered again once that ends.
type Resolver func(ctx context.Context, l *Lease) (Outcome, error)

// Postponed is the outcome of a command whose fate cannot be known yet.
// The provider may be down, or its "not found" untrustworthy before its
// settle window passed. The command stays IN_FLIGHT, and nobody takes it
// over before until (Postpone). StuckLeases lists it again after.
func Postponed(until time.Time) Outcome { return Outcome{Status: StatusInFlight, RetryAt: until} }

// ReleaseLocalEffect is the Resolver for a command whose only effect is
// its business writes. A Succeeded outcome commits them in the record's
// transaction. ReleaseLocalEffect releases the command, so the next retry
// runs its function again.
//
// This is not a bare timer. A record still IN_FLIGHT once its lease is
// taken over proves no such write happened. They commit only with the
// record's move out of IN_FLIGHT. None will happen later either: the dead
// attempt's token no longer passes the fence (ErrLeaseLost). Any effect
// outside that transaction, a payment or an email, needs a Resolver that
// asks.
func ReleaseLocalEffect(context.Context, *Lease) (Outcome, error) {
	return NotApplied(Response{}), nil
}

// ByOperation is the Resolver for a store whose commands span several
// operations. It hands each lease to the resolver of its key's operation.
// A command of an operation without one is not settled. The resolver's
// error leaves it IN_FLIGHT, and Sweep returns the error, naming the
// operation. So one sweeper serves a table. Stores that share a table with
// another team's each need a KeyPrefix.
func ByOperation(resolvers map[string]Resolver) Resolver {
	resolvers = maps.Clone(resolvers) // the caller's map may change later
	return func(ctx context.Context, l *Lease) (Outcome, error) {
		resolve := resolvers[l.Key.Operation()]
		if resolve == nil {
			return Outcome{}, fmt.Errorf("idem: no resolver for operation %q", l.Key.Operation())
		}
		return resolve(ctx, l)
	}
}

// errNoResolver refuses a recovery nothing could decide.
var errNoResolver = errors.New("idem: recover: a Resolver is required (ReleaseLocalEffect for effects only in the record's transaction)")

// Recover resolves the command key names if its attempt died. If the
// record is IN_FLIGHT with a lease that ran out, it takes the lease over.
// It asks resolve what became of the effect. Then it settles or postpones
// the command as the Outcome says. A settled command's claim, if b keeps
// claims in a Ledger, loses any release's end: its settling lease's
// clear may have failed. Anything else it leaves alone, without an
// error. It is Sweep's step for one key.
//
// The Result's Lease is the lease taken over, nil when there was none to
// take. Its Status is the record's as Recover left it. That is the
// settlement's, or IN_FLIGHT: postponed, unknown, an error, or a lease
// still running. It is empty for a record that needs no recovery. An error
// leaves the record IN_FLIGHT. Its text names the key by its hash, never
// the key or its client part. No form of them appears: as written, quoted
// or URL-escaped.
func Recover(ctx context.Context, b Backend, key Key, resolve Resolver) (Result, error) {
	if resolve == nil {
		return Result{}, errNoResolver
	}
	rec, err := b.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return Result{}, nil
	case err != nil:
		return Result{}, &recoverError{key, err}
	case rec.Status.Terminal():
		// A claim another Region, or another command, holds is not this
		// store's to clear.
		if err := settleClaim(ctx, b, key, rec.CreatedAt); err != nil && !errors.Is(err, ErrClaimedElsewhere) {
			return Result{}, &recoverError{key, err}
		}
		return Result{}, nil
	case rec.Status != StatusInFlight:
		return Result{}, nil
	case rec.LeaseExpiresAt.After(b.Now()):
		return Result{Status: StatusInFlight}, nil
	}
	lease, err := b.TakeOver(ctx, key)
	switch {
	case errors.Is(err, ErrInFlight):
		return Result{Status: StatusInFlight}, nil
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrCompleted):
		return Result{}, nil
	case err != nil:
		return Result{}, &recoverError{key, err}
	}
	r := Result{Lease: lease, Status: StatusInFlight, RecordExpiresAt: lease.RecordExpiresAt}
	out, err := resolve(ctx, lease)
	if err != nil {
		return r, &recoverError{key, err}
	}
	status, err := Settle(ctx, b, lease, out)
	if err != nil {
		return r, &recoverError{key, err}
	}
	r.Status, r.Response, r.RecordExpiresAt = status, out.Response, lease.RecordExpiresAt
	return r, nil
}

// claimSettler is a Backend with a Ledger (dynamostore.Store.SettleClaim).
type claimSettler interface {
	SettleClaim(ctx context.Context, key Key, created time.Time) error
}

// settleClaim clears any release's end from the claim of key's settled
// command created at created, if b keeps claims. The settling lease's
// own clear may have failed, or never run: its write landed unanswered.
func settleClaim(ctx context.Context, b Backend, key Key, created time.Time) error {
	if cs, ok := b.(claimSettler); ok {
		return cs.SettleClaim(ctx, key, created)
	}
	return nil
}

// recoverError is an error of Recover's. A sweep's errors are bound for a
// log. So its text names the key by its hash wherever the wrapped error
// names the key or its client part. This package's stores never do. A
// caller's Backend or Resolver may, most likely by the client's key, such
// as an order number.
type recoverError struct {
	key Key
	err error
}

func (e *recoverError) Error() string {
	hash := "key:" + e.key.LogHash()
	// One pass, longest form first. A form inside a longer one, or inside
	// a hash already written, is not replaced again.
	forms := append([]string{e.key.String()}, clientKeyForms(e.key.ClientKey())...)
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, hash)
	}
	return "idem: recover " + hash + ": " + strings.NewReplacer(pairs...).Replace(e.err.Error())
}

// clientKeyForms are the ways an error may write a client key. It may be
// as it is, or quoted by Go or JSON (%q, encoding/json). It may be escaped
// in a URL's query, or in its path. A path may hold it as one segment, or
// keep its '/' as url.JoinPath does.
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

// Swept is what one Sweep did.
type Swept struct {
	// Found counts the stuck leases the sweep recovered or tried to.
	Found int
	// Settled counts those it left SUCCEEDED, FAILED_PERMANENT or
	// RELEASED. Failed counts those Recover returned an error for. The
	// rest are IN_FLIGHT still: postponed, unknown, or taken by someone
	// else.
	Settled, Failed int
	// Unreadable counts the stuck-lease index's items of this store that
	// did not decode. Each is passed over. Its error, naming the item by
	// its key's hash, is joined to Sweep's.
	Unreadable int
}

// Sweep recovers every command whose lease has run out. It reads the
// stuck-lease index shard by shard (StuckLeases, no Scan). It calls
// Recover with resolve for each key listed. Its first shard rotates with
// the store's minute, so a sweep cut short starves no shard. A failed
// shard query or key does not stop it. The errors come back joined. It
// stops when ctx ends, with ctx's error. What it did not reach stays in
// the index for the next sweep. A key it was resolving keeps its
// taken-over lease until that runs out.
func Sweep(ctx context.Context, b Backend, resolve Resolver) (Swept, error) {
	if resolve == nil {
		return Swept{}, errNoResolver
	}
	var (
		sum  Swept
		errs []error
	)
	shards, before := b.Shards(), b.Now()
	if shards < 1 {
		return Swept{}, errors.New("idem: sweep: the store has no shards")
	}
	// The first shard rotates with the minute. A sweep cut short by its
	// deadline then starves no shard.
	first := int(before.Unix() / 60 % int64(shards))
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
			r, err := Recover(ctx, b, sl.Key, resolve)
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
