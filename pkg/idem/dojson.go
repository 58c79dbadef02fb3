package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DoJSON is Do for a function whose result is a value, not an HTTP-shaped
// Response. fn runs at most once for the intent named by key and
// fingerprinted by request's canonical JSON. Its result is stored as JSON
// and given back as T to every retry. Every call, the first too, gets the
// stored result decoded, so it sees what a retry will.
//
// A nil error commits the result. An error wrapping ErrNotApplied
// releases the key. Any other error, or a result json.Marshal refuses,
// leaves the record IN_FLIGHT, and fn's error is returned as it is.
//
// The request's canonical JSON is stored as the command's intent: one
// over 190 KiB is refused with ErrTooLarge. The request and the result
// share a record's 380 KiB: a result too large to fit beside its request
// leaves the command IN_FLIGHT, as any Commit refused with ErrTooLarge. A Resolver reads it back from
// Lease.Intent with json.Unmarshal, asks the effect's source what
// happened, and settles the command with SucceededJSON. A retry then gets
// that value as T.
//
// A request whose JSON holds U+FFFD, or its escape \ufffd, is refused
// with ErrInvalidJSON, and nothing is stored. json.Marshal writes one of
// them in place of text that is not UTF-8, wherever it meets it (a
// string, a map key, a ",string" field, a MarshalJSON that marshals in
// turn). Two such requests could then share a fingerprint. A request
// that must carry U+FFFD fingerprints its own bytes and calls Do.
func DoJSON[T any](ctx context.Context, b Backend, key Key, request any,
	fn func(ctx context.Context, l *Lease) (T, error), optFns ...func(*DoOptions)) (T, error) {
	var zero T
	doc, err := json.Marshal(request)
	if err == nil {
		doc, err = CanonicalJSON(doc)
	}
	if err == nil && (bytes.Contains(doc, replacement) || bytes.Contains(bytes.ToLower(doc), []byte(`\ufffd`))) {
		err = fmt.Errorf("%w: U+FFFD, which json.Marshal writes for text that is not UTF-8", ErrInvalidJSON)
	}
	if err != nil {
		return zero, fmt.Errorf("idem: request of %s: %w", key.LogHash(), err)
	}
	// fn's error is kept here rather than given to Do, so that it is
	// returned as it is, not wrapped.
	var fnErr error
	res, err := Do(ctx, b, key, FingerprintOf(doc), doc, func(ctx context.Context, l *Lease) (Outcome, error) {
		v, err := fn(ctx, l)
		if err != nil {
			fnErr = err
			if errors.Is(err, ErrNotApplied) {
				return NotApplied(Response{}), nil
			}
			return Unknown(Response{}), nil
		}
		out, err := SucceededJSON(v)
		if err != nil {
			fnErr = fmt.Errorf("idem: result of %s, left in flight: %w", key.LogHash(), err)
		}
		return out, nil
	}, optFns...)
	switch {
	case fnErr != nil && err != nil:
		return zero, errors.Join(fnErr, err)
	case fnErr != nil:
		return zero, fnErr
	case err != nil:
		return zero, err
	}
	var v T
	if err := json.Unmarshal(res.Response.Body, &v); err != nil {
		return zero, fmt.Errorf("idem: stored result of %s as %T: %w", key.LogHash(), v, err)
	}
	return v, nil
}

// SucceededJSON is the Outcome of a DoJSON command whose effect happened
// with result v: the response DoJSON stores, and writes to commit with
// the record. A Resolver settles a DoJSON command with it, so that every
// retry gets v as DoJSON's T. An error from json.Marshal comes with an
// Unknown outcome.
func SucceededJSON[T any](v T, writes ...types.TransactWriteItem) (Outcome, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Unknown(Response{}), err
	}
	return Succeeded(Response{Status: 200, Body: body}, writes...), nil
}

// replacement is U+FFFD as canonical JSON writes it.
var replacement = []byte("\uFFFD")
