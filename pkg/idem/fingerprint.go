package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// Fingerprint identifies the content of a request. A key reused with a
// different request is then recognised and refused.
type Fingerprint [sha256.Size]byte

// FingerprintOf hashes already-canonical bytes.
func FingerprintOf(canonical []byte) Fingerprint { return sha256.Sum256(canonical) }

// FingerprintJSON canonicalises a JSON document and hashes the result.
// Documents that differ only in key order or insignificant whitespace get
// one fingerprint.
func FingerprintJSON(doc []byte) (Fingerprint, error) {
	c, err := CanonicalJSON(doc)
	if err != nil {
		return Fingerprint{}, err
	}
	return FingerprintOf(c), nil
}

// String is the lower-case hex form (Record.Fingerprint).
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// CanonicalJSON rewrites one JSON value in a canonical form. Object keys
// are sorted by their UTF-8 bytes. There is no insignificant whitespace.
// Strings are re-escaped one way. Numbers are kept exactly as written.
//
// Some values are refused with an error wrapping ErrInvalidJSON. They are
// duplicate object keys, trailing data, and strings that are not Unicode
// text. Bytes that are not UTF-8 are such a string. So is a \u escape of a
// surrogate that is not half of a pair.
//
// The canonical form is what encoding/json writes for the value decoded
// with UseNumber, HTML characters unescaped. A string that needs no
// re-escaping, the common case, is copied as it is. A request of a few
// members costs a handful of allocations, not one per token.
func CanonicalJSON(doc []byte) ([]byte, error) {
	if !json.Valid(doc) {
		var v any
		return nil, fmt.Errorf("%w: %w", ErrInvalidJSON, json.Unmarshal(doc, &v))
	}
	c := canonicalizer{src: doc}
	return c.value(make([]byte, 0, len(doc)))
}

// canonicalizer walks a document json.Valid accepted, so it meets no
// syntax errors. Only duplicate keys and ill-formed strings are refused
// here.
type canonicalizer struct {
	src []byte
	pos int
	// sorting holds an object's members while they are put in order. It
	// serves one object after the other: an inner one is done before its
	// outer.
	sorting []byte
}

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value appends the canonical form of the value at c.pos to out.
func (c *canonicalizer) value(out []byte) ([]byte, error) {
	c.skipSpace()
	switch c.src[c.pos] {
	case '{':
		return c.object(out)
	case '[':
		return c.array(out)
	case '"':
		raw := c.rawString()
		if plain(raw) {
			return append(out, raw...), nil
		}
		s, err := unquote(raw)
		return appendString(out, s), err
	}
	// A number or a literal, kept as written: it ends at a delimiter.
	start := c.pos
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return append(out, c.src[start:c.pos]...), nil
		}
		c.pos++
	}
	return append(out, c.src[start:]...), nil
}

// rawString returns the string at c.pos with its quotes, as written.
func (c *canonicalizer) rawString() []byte {
	start := c.pos
	for c.pos++; c.src[c.pos] != '"'; c.pos++ {
		if c.src[c.pos] == '\\' {
			c.pos++ // the escaped character; \uXXXX's digits need no care
		}
	}
	c.pos++
	return c.src[start:c.pos]
}

// member is an object member: its key decoded, and where its canonical
// "key":value sits in the output.
type member struct {
	key        []byte
	start, end int
}

// object appends the members in the order they come, then moves them into
// key order.
func (c *canonicalizer) object(out []byte) ([]byte, error) {
	c.pos++ // '{'
	// Most objects have at most 8 members: then members needs no allocation.
	var few [8]member
	members := few[:0]
	base := len(out)
	for {
		c.skipSpace()
		if c.src[c.pos] == '}' {
			c.pos++
			break
		}
		if c.src[c.pos] == ',' {
			c.pos++
			c.skipSpace()
		}
		start := len(out)
		raw := c.rawString()
		key := raw[1 : len(raw)-1]
		if plain(raw) {
			out = append(out, raw...)
		} else {
			s, err := unquote(raw)
			if err != nil {
				return nil, err
			}
			key = []byte(s)
			out = appendString(out, s)
		}
		c.skipSpace()
		c.pos++ // ':'
		out = append(out, ':')
		var err error
		if out, err = c.value(out); err != nil {
			return nil, err
		}
		members = append(members, member{key: key, start: start, end: len(out)})
	}
	slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	c.sorting = append(c.sorting[:0], out[base:]...)
	out = append(out[:base], '{')
	for i, m := range members {
		if i > 0 {
			if bytes.Equal(m.key, members[i-1].key) {
				return nil, fmt.Errorf("%w: duplicate object key %q", ErrInvalidJSON, m.key)
			}
			out = append(out, ',')
		}
		out = append(out, c.sorting[m.start-base:m.end-base]...)
	}
	return append(out, '}'), nil
}

func (c *canonicalizer) array(out []byte) ([]byte, error) {
	c.pos++ // '['
	out = append(out, '[')
	for first := true; ; first = false {
		c.skipSpace()
		switch c.src[c.pos] {
		case ']':
			c.pos++
			return append(out, ']'), nil
		case ',':
			c.pos++
		}
		if !first {
			out = append(out, ',')
		}
		var err error
		if out, err = c.value(out); err != nil {
			return nil, err
		}
	}
}

// plain reports whether a string as written is already in canonical form.
// It has no escapes, valid UTF-8, and neither U+2028 nor U+2029, which
// encoding/json escapes.
func plain(raw []byte) bool {
	return bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) &&
		!bytes.Contains(raw, []byte("\u2028")) && !bytes.Contains(raw, []byte("\u2029"))
}

// unquote decodes a string as written that is not plain. A key is compared
// decoded, so "\u0061" and "a" are one key.
func unquote(raw []byte) (string, error) {
	if !wellFormed(raw) {
		return "", fmt.Errorf("%w: a string that is not UTF-8 text", ErrInvalidJSON)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	return s, nil
}

// wellFormed reports whether a string as written stands for Unicode text.
// json.Valid has accepted it. Its bytes must be UTF-8, and each \u escape
// of a surrogate half of a pair. encoding/json decodes anything else as
// U+FFFD. That would give different documents one canonical form.
func wellFormed(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		if i++; raw[i] != 'u' {
			continue // a one-character escape
		}
		r := hex4(raw[i+1:])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		// A pair is a high surrogate's escape followed directly by a low
		// one's. Valid JSON has four hex digits after any \u.
		if raw[i+1] != '\\' || raw[i+2] != 'u' || utf16.DecodeRune(r, hex4(raw[i+3:])) == utf8.RuneError {
			return false
		}
		i += 6
	}
	return true
}

// hex4 is the value of the four hex digits that start b.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= 'a':
			c -= 'a' - 10
		case c >= 'A':
			c -= 'A' - 10
		default:
			c -= '0'
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendString appends s as encoding/json writes it, HTML characters
// unescaped.
func appendString(out []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a Go string always encodes
	return append(out, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}
