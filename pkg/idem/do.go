package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Outcome is an operation's verdict on its effect. It carries the response
// to answer, and on success the business writes to commit with the record.
// Only a Succeeded or Failed response is stored and replayed. The others
// are answered once.
//
// Status is the status the outcome moves the record to:
//   - StatusSucceeded: Commit, with the business writes in one transaction.
//   - StatusFailedPermanent: Fail, a refusal every retry gets again.
//   - StatusReleased: Release. The effect verifiably did not happen, and a
//     retry runs it afresh.
//   - StatusInFlight: the effect may have happened. The record waits for a
//     reconciler.
//
// The zero Outcome is the last. So a function that only returns an error
// never frees its key by accident.
type Outcome struct {
	Status   Status
	Response Response
	Writes   []types.TransactWriteItem
	// RetryAt, with StatusInFlight, postpones the lease to then
	// (Postponed). Settle refuses it with any other status.
	RetryAt time.Time
}

// Succeeded is the outcome of an effect that happened. resp is stored and
// replayed. writes commit in one transaction with the record.
func Succeeded(resp Response, writes ...types.TransactWriteItem) Outcome {
	return Outcome{Status: StatusSucceeded, Response: resp, Writes: writes}
}

// Failed is the outcome of a permanent refusal, such as a declined card.
// resp is stored and replayed.
func Failed(resp Response) Outcome { return Outcome{Status: StatusFailedPermanent, Response: resp} }

// NotApplied is the outcome of an effect that verifiably did not happen.
// The provider refused before acting, say. The key is released. resp, if
// any, is answered but not stored.
func NotApplied(resp Response) Outcome { return Outcome{Status: StatusReleased, Response: resp} }

// Unknown is the outcome of an effect that may have happened, as after a
// timeout. The record stays IN_FLIGHT for reconciliation. resp, if any, is
// answered but not stored.
func Unknown(resp Response) Outcome { return Outcome{Status: StatusInFlight, Response: resp} }

// DoOptions adjust Do.
type DoOptions struct {
	// Wait is how long Do waits for another attempt that holds the key to
	// finish. It retries with a growing pause. Default 0: an in-flight key
	// is answered with *InFlightError at once.
	Wait time.Duration
	// Reserve is the part of the context's remaining time Do keeps for
	// itself. It stops waiting Reserve before the deadline. fn's context
	// ends Reserve before it, so fn's outcome can still be recorded.
	// Default 1s. It applies only to a context with a deadline.
	Reserve time.Duration
	// OnWait, if set, is called once, as Do starts waiting for another
	// attempt that holds key. It returns whether Do waits. If not, Do
	// makes one more Begin at once and answers by it: the key's
	// *InFlightError, or its replay if it settled meanwhile. A caller may
	// so cap the requests waiting on one key. A caller that counts the
	// request's cost may give it back there: the wait may outlast the
	// count's span. A request may still do new work, waiting or refused.
	// If the holder releases the key, or the key's record expires, Do
	// claims it and runs fn. fn should then take the cost again.
	OnWait func(ctx context.Context, key Key) bool
}

// Result is what Do, or Recover, did.
type Result struct {
	// Response is the answer: the stored one on a replay, fn's otherwise.
	Response Response
	Replayed bool
	// Status is the record's status as this call left or found it. On a
	// settlement error it is IN_FLIGHT, as far as the call knows.
	Status Status
	// Lease is the lease fn, or a resolver, ran under; nil on a replay.
	// After an Unknown outcome or a settlement error, a reconciler would
	// take it over. It ends at Lease.ExpiresAt.
	Lease *Lease
	// RecordExpiresAt is when the key stops deduplicating.
	RecordExpiresAt time.Time
}

// Pauses between claims of an in-flight key.
const (
	firstPause = 50 * time.Millisecond
	maxPause   = 400 * time.Millisecond
)

// Do runs fn at most once for the intent key names and fp fingerprints. It
// settles the record as fn's Outcome says. intent is stored for a
// reconciler (see Begin).
//
// A key already settled gives its stored response (Result.Replayed). A key
// held by another attempt gives *InFlightError once DoOptions.Wait has run
// out. A key used for another request gives *MismatchError. Neither runs
// fn.
//
// When fn ran, the Result carries its lease and response, even if Do also
// returns an error. The error is fn's own, wrapped, and its Outcome is
// still applied. Or it is the settlement's, and the record stays IN_FLIGHT:
//   - ErrLeaseLost: the lease was taken over meanwhile.
//   - *WriteConditionError: a business write's condition failed.
//   - ErrTooLarge: the response does not fit.
//
// If fn panics, the record stays IN_FLIGHT. An Inherited lease does not
// run fn: the command stays IN_FLIGHT for Recover.
func Do(ctx context.Context, b Backend, key Key, fp Fingerprint, intent []byte,
	fn func(ctx context.Context, l *Lease) (Outcome, error), optFns ...func(*DoOptions)) (Result, error) {
	o := DoOptions{Reserve: time.Second}
	for _, f := range optFns {
		f(&o)
	}
	begun, err := claim(ctx, b, key, fp, intent, o)
	if err != nil {
		return Result{}, err
	}
	if begun.Replay != nil {
		return Result{Response: *begun.Replay, Replayed: true, Status: begun.Status, RecordExpiresAt: begun.RecordExpiresAt}, nil
	}
	l := begun.Lease
	if l.Inherited {
		// Another Region's attempts may have acted: only a Resolver,
		// which asks, may settle the command.
		return Result{Status: StatusInFlight, Lease: l, RecordExpiresAt: l.RecordExpiresAt}, nil
	}
	out, fnErr := run(ctx, b, l, fn, o)
	if fnErr != nil {
		fnErr = fmt.Errorf("idem: do %s: %w", key.LogHash(), fnErr)
	}
	res := Result{Response: out.Response, Status: StatusInFlight, Lease: l, RecordExpiresAt: l.RecordExpiresAt}
	settled, setErr := Settle(ctx, b, l, out)
	if setErr != nil {
		return res, errors.Join(fnErr, setErr)
	}
	res.Status, res.RecordExpiresAt = settled, l.RecordExpiresAt
	return res, fnErr
}

// Settle applies out to the command l holds, as Do does with its
// function's outcome. It calls Commit, Fail or Release. For StatusInFlight
// it calls Postpone to RetryAt if set, or nothing. With a nil error it
// returns the status the record is left in. A reconciler that took a lease
// over settles it here, once it knows what happened.
func Settle(ctx context.Context, b Backend, l *Lease, out Outcome) (Status, error) {
	switch {
	case !out.RetryAt.IsZero() && out.Status != "" && out.Status != StatusInFlight:
		return StatusInFlight, fmt.Errorf("idem: settle %s: a retry time with a verdict that settles", l.Key.LogHash())
	case !out.RetryAt.IsZero():
		return StatusInFlight, b.Postpone(ctx, l, out.RetryAt)
	}
	switch out.Status {
	case "", StatusInFlight:
		return StatusInFlight, nil
	case StatusSucceeded:
		return StatusSucceeded, b.Commit(ctx, l, out.Response, out.Writes...)
	case StatusFailedPermanent:
		return StatusFailedPermanent, b.Fail(ctx, l, out.Response)
	case StatusReleased:
		return StatusReleased, b.Release(ctx, l)
	default:
		return StatusInFlight, fmt.Errorf("idem: settle %s: an outcome of status %q", l.Key.LogHash(), out.Status)
	}
}

// run calls fn with a context that ends at the lease's AttemptDeadline. It
// ends o.Reserve before ctx does, if that is sooner. A resolver may
// release a command once the effect's settle window has passed since
// AttemptDeadline. So fn must not send after it. A context without a
// deadline, or one past the lease's cap, would let a slow attempt charge a
// released command. Heartbeat does not move this end: a context cannot be
// given more time. A function that needs more asks for it with ctx's
// deadline.
func run(ctx context.Context, b Backend, l *Lease, fn func(context.Context, *Lease) (Outcome, error), o DoOptions) (Outcome, error) {
	// The deadline is on the real clock, the lease on the store's.
	end := time.Now().Add(l.AttemptDeadline.Sub(b.Now()))
	if deadline, ok := ctx.Deadline(); ok && o.Reserve > 0 && deadline.Add(-o.Reserve).Before(end) {
		end = deadline.Add(-o.Reserve)
	}
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	return fn(ctx, l)
}

// claim begins key. It waits up to o.Wait for an attempt that holds the
// key to finish. It never waits past the context's deadline less
// o.Reserve.
func claim(ctx context.Context, b Backend, key Key, fp Fingerprint, intent []byte, o DoOptions) (Begun, error) {
	waitUntil := time.Now().Add(o.Wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-o.Reserve).Before(waitUntil) {
		waitUntil = d.Add(-o.Reserve)
	}
	pause := firstPause
	var held error // the last ErrInFlight: the key's holder may have acted
	refused := false
	for {
		begun, err := b.Begin(ctx, key, fp, intent)
		if held != nil && errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrUnknownClaim) {
			// This claim wrote nothing, but an attempt whose outcome is
			// unknown held the key. "Nothing was done" would be false. An
			// unknown claim may have written: its caller must queue the key.
			return begun, held
		}
		if refused || !errors.Is(err, ErrInFlight) || time.Now().Add(pause).After(waitUntil) {
			return begun, err
		}
		if held == nil && o.OnWait != nil && !o.OnWait(ctx, key) {
			// The holder may have settled while OnWait ran. One more claim
			// answers by the key as it is now, as a wait's last one does.
			refused, held = true, err
			continue
		}
		held = err
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return begun, err
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}
