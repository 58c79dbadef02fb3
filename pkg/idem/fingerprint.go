package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// Fingerprint identifies the content of a request, so that a key reused
// with a different request is recognised and refused.
type Fingerprint [sha256.Size]byte

// FingerprintOf hashes already-canonical bytes.
func FingerprintOf(canonical []byte) Fingerprint { return sha256.Sum256(canonical) }

// FingerprintJSON canonicalises a JSON document and hashes the result, so
// documents that differ only in key order or insignificant whitespace get
// the same fingerprint.
func FingerprintJSON(doc []byte) (Fingerprint, error) {
	c, err := CanonicalJSON(doc)
	if err != nil {
		return Fingerprint{}, err
	}
	return FingerprintOf(c), nil
}

// String is the lower-case hex form (Record.Fingerprint).
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// ErrInvalidJSON is returned by CanonicalJSON for input it refuses.
var ErrInvalidJSON = errors.New("idem: invalid JSON")

// CanonicalJSON rewrites one JSON value in a canonical form: object keys
// sorted by their UTF-8 bytes, no insignificant whitespace, strings
// re-escaped one way, numbers kept exactly as written. Duplicate object
// keys and trailing data are refused with an error wrapping ErrInvalidJSON.
func CanonicalJSON(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonValue(dec, &out); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrInvalidJSON)
	}
	return out.Bytes(), nil
}

func canonValue(dec *json.Decoder, out *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonObject(dec, out)
		case '[':
			return canonArray(dec, out)
		}
		return fmt.Errorf("%w: unexpected %q", ErrInvalidJSON, t)
	case json.Number:
		out.WriteString(t.String())
	case string:
		writeString(out, t)
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	}
	return nil
}

func canonObject(dec *json.Decoder, out *bytes.Buffer) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%w: object key is not a string", ErrInvalidJSON)
		}
		if seen[key] {
			return fmt.Errorf("%w: duplicate object key %q", ErrInvalidJSON, key)
		}
		seen[key] = true
		var val bytes.Buffer
		if err := canonValue(dec, &val); err != nil {
			return err
		}
		members = append(members, member{key, val.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeString(out, m.key)
		out.WriteByte(':')
		out.Write(m.val)
	}
	out.WriteByte('}')
	return nil
}

func canonArray(dec *json.Decoder, out *bytes.Buffer) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonValue(dec, out); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	out.WriteByte(']')
	return nil
}

func writeString(out *bytes.Buffer, s string) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a Go string always encodes
	out.Truncate(out.Len() - 1) // Encode appends a newline
}
