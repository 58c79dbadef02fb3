package idem

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"
)

// DoJSON is Do for a function whose result is a value, not an HTTP-shaped
// Response: fn runs at most once for the intent named by key and
// fingerprinted by request's JSON form, and its result is stored as JSON
// and given back as T to every retry. A nil error commits the result; an
// error wrapping ErrNotApplied releases the key; any other error, or a
// result json.Marshal refuses, leaves the record IN_FLIGHT for a
// reconciler, and fn's error is returned as it is. Every call, the first
// too, gets the stored result decoded, so it sees what a retry will. A
// request holding text that is not UTF-8 is refused with ErrInvalidJSON
// before anything is stored: json.Marshal would blur it into U+FFFD.
func DoJSON[T any](ctx context.Context, b Backend, key Key, request any,
	fn func(ctx context.Context, l *Lease) (T, error), optFns ...func(*DoOptions)) (T, error) {
	var zero T
	doc, err := json.Marshal(request)
	if err == nil {
		err = checkText(reflect.ValueOf(request))
	}
	if err != nil {
		return zero, fmt.Errorf("idem: request of %s: %w", key.LogHash(), err)
	}
	fp, err := FingerprintJSON(doc)
	if err != nil {
		return zero, fmt.Errorf("idem: request of %s: %w", key.LogHash(), err)
	}
	// fn's error is kept here rather than given to Do, so that it is
	// returned as it is, not wrapped.
	var fnErr error
	res, err := Do(ctx, b, key, fp, nil, func(ctx context.Context, l *Lease) (Outcome, error) {
		v, err := fn(ctx, l)
		if err != nil {
			fnErr = err
			if errors.Is(err, ErrNotApplied) {
				return NotApplied(Response{}), nil
			}
			return Unknown(Response{}), nil
		}
		body, err := json.Marshal(v)
		if err != nil {
			fnErr = fmt.Errorf("idem: result of %s, left in flight: %w", key.LogHash(), err)
			return Unknown(Response{}), nil
		}
		return Succeeded(Response{Status: 200, Body: body}), nil
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

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// checkText refuses a value that json.Marshal would write with text that
// is not UTF-8. Marshal writes U+FFFD for each such byte, so two requests
// that differ only there would share a fingerprint. It walks what Marshal
// writes through its string encoder: strings, map keys and MarshalText's
// output. MarshalJSON's output is left to CanonicalJSON, which refuses
// such text itself, and []byte is written as base64.
func checkText(v reflect.Value) error {
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	if t.Implements(jsonMarshaler) || (v.CanAddr() && reflect.PointerTo(t).Implements(jsonMarshaler)) {
		return nil
	}
	if m, ok := textOf(v); ok {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return nil
		}
		b, err := m.MarshalText()
		if err != nil || utf8.Valid(b) {
			return nil // json.Marshal has already refused an error
		}
		return notText()
	}
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return notText()
		}
	case reflect.Pointer, reflect.Interface:
		return checkText(v.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if (!f.IsExported() && !f.Anonymous) || f.Tag.Get("json") == "-" {
				continue
			}
			if err := checkText(v.Field(i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			k := it.Key()
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return notText() // Marshal writes a string key as it is, not by MarshalText
			}
			if err := checkText(k); k.Kind() != reflect.String && err != nil {
				return err
			}
			if err := checkText(it.Value()); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(jsonMarshaler) && !reflect.PointerTo(t.Elem()).Implements(textMarshaler) {
			return nil // base64
		}
		for i := range v.Len() {
			if err := checkText(v.Index(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// textOf returns v's MarshalText, as json.Marshal would find it.
func textOf(v reflect.Value) (encoding.TextMarshaler, bool) {
	if v.Type().Implements(textMarshaler) {
		m, ok := v.Interface().(encoding.TextMarshaler)
		return m, ok
	}
	if v.CanAddr() && reflect.PointerTo(v.Type()).Implements(textMarshaler) {
		m, ok := v.Addr().Interface().(encoding.TextMarshaler)
		return m, ok
	}
	return nil, false
}

func notText() error {
	return fmt.Errorf("%w: a string that is not UTF-8 text", ErrInvalidJSON)
}
