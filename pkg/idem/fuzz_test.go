package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// FuzzCanonicalJSON feeds arbitrary bytes to CanonicalJSON. Whatever the
// input, it must not panic and must either fail with ErrInvalidJSON or
// return valid JSON that is its own canonical form; the input re-indented,
// or decoded and re-encoded with Go's encoder, must keep the fingerprint.
// An accepted input is UTF-8, and its canonical form has a U+FFFD only
// where the input wrote one: nothing was replaced.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"amount":1500,"currency":"EUR","source":"tok_visa"}`,
		"{ \"b\" : [1, 2.50, {\"y\":null,\"x\":true}],\n \"a\" : \"\\u0041<>&\" }",
		`{"a":1,"a":2}`, `{} {}`, `{"a":`, `"\ud800"`, `-0`, `1e400`, ``,
		`"\udc00"`, `"\ud800\udc00"`, `"\udc00\ud800"`, `"\ud800\u0041"`, `"\\ud800"`, `{"\ud800":1}`,
		"\"caf\xe9\"", "{\"\xff\":1}", "\"\xed\xa0\x80\"", "\"\\n\xc0\xaf\"", "\"\ufffd\\uFFFD\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := idem.CanonicalJSON(doc)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("error %v does not wrap ErrInvalidJSON", err)
			}
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q is not valid JSON", c)
		}
		if !utf8.Valid(doc) {
			t.Fatalf("CanonicalJSON accepted %q, which is not UTF-8", doc)
		}
		if bytes.ContainsRune(c, utf8.RuneError) && !bytes.Contains(doc, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(doc), []byte(`ufffd`)) {
			t.Fatalf("CanonicalJSON(%q) = %q: a U+FFFD the input did not write", doc, c)
		}
		again, err := idem.CanonicalJSON(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical(canonical(x)) = %q, %v; want %q", again, err, c)
		}
		fp, err := idem.FingerprintJSON(doc)
		if err != nil || fp != idem.FingerprintOf(c) {
			t.Fatalf("FingerprintJSON = %v, %v; want the fingerprint of %q", fp, err, c)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, doc, "\t", "   "); err == nil {
			assertSameFingerprint(t, doc, indented.Bytes())
		}
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("CanonicalJSON accepted %q, encoding/json did not: %v", doc, err)
		}
		reencoded, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		assertSameFingerprint(t, doc, reencoded)
	})
}

// FuzzFingerprintEquivalence builds one charge-shaped document from fuzzed
// values and writes it twice: Go's encoder (sorted keys, compact) and a
// hand-written form with the keys reversed, whitespace everywhere and every
// non-ASCII or HTML character \u-escaped. Both must fingerprint alike; the
// same document with another amount must not.
func FuzzFingerprintEquivalence(f *testing.F) {
	f.Add(int64(1500), "EUR", "tok_visa", "", "metadata", "order 42")
	f.Add(int64(-1), "", "", "<b>\"café\"</b>\n", "", "")
	f.Add(int64(9223372036854775807), "JPY", "tok_decline", "€ 😀 \\", "a\u2028", "\x00")
	// Go's encoder writes a string that is not UTF-8 with U+FFFD in place
	// of each bad byte: what it sends is text, and canonicalises.
	f.Add(int64(1), "EUR", "tok_visa", "caf\xe9 \xed\xa0\x80", "\xff", "\ufffd")
	f.Fuzz(func(t *testing.T, amount int64, currency, source, description, extraKey, extraVal string) {
		doc := map[string]any{"amount": amount, "currency": currency, "source": source, "description": description}
		if _, taken := doc[extraKey]; !taken {
			doc[extraKey] = map[string]any{"v": extraVal, "n": []any{amount, nil, true}}
		}
		compact, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		assertSameFingerprint(t, compact, spacedReversed(doc))

		doc["amount"] = amount ^ 1
		changed, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		a, err1 := idem.FingerprintJSON(compact)
		b, err2 := idem.FingerprintJSON(changed)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Fatalf("amount %d and %d give the same fingerprint", amount, amount^1)
		}
	})
}

// spacedReversed writes v as JSON with object keys in reverse sorted order,
// whitespace around every token and strings fully \u-escaped.
func spacedReversed(v any) []byte {
	var b strings.Builder
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			slices.Reverse(keys)
			b.WriteString("{ \n")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(" ,\r\n\t")
				}
				writeEscaped(&b, k)
				b.WriteString(" :\t")
				write(v[k])
			}
			b.WriteString("\n}")
		case []any:
			b.WriteString("[ ")
			for i, e := range v {
				if i > 0 {
					b.WriteString(" , ")
				}
				write(e)
			}
			b.WriteString(" ]")
		case string:
			writeEscaped(&b, v)
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case nil:
			b.WriteString("null")
		default:
			panic(fmt.Sprintf("spacedReversed: unexpected %T", v))
		}
	}
	write(v)
	return []byte(b.String())
}

// writeEscaped writes s as a JSON string with every rune outside printable
// ASCII, and every ASCII letter 'a', as a \u escape (surrogate pairs above
// the BMP).
func writeEscaped(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s { // an invalid byte is one U+FFFD, as in encoding/json
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f && r != 'a':
			b.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04X`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
}

// FuzzKeyRoundTrip checks that every key NewKey accepts survives
// String and ParseKey, and that every string ParseKey accepts is the
// String of the key it returns.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("acme", "create-charge", "order-42", "acme#create-charge#a#b")
	f.Add("t_1", "op", "a b#c!~", "##")
	f.Add("a#b", "create charge", "clé", "acme#op#")
	f.Add(strings.Repeat("t", 128), "x@y:z", strings.Repeat("k", 255), "#op#key")
	f.Fuzz(func(t *testing.T, tenant, operation, clientKey, raw string) {
		k, err := idem.NewKey(tenant, operation, clientKey)
		if err == nil {
			back, err := idem.ParseKey(k.String())
			if err != nil || back != k {
				t.Fatalf("ParseKey(%q) = %#v, %v; want %#v", k.String(), back, err, k)
			}
			if k.Tenant() != tenant || k.Operation() != operation || k.ClientKey() != clientKey || k == (idem.Key{}) {
				t.Fatalf("NewKey(%q, %q, %q) = %#v", tenant, operation, clientKey, k)
			}
		} else if !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("NewKey error %v does not wrap ErrInvalidKey", err)
		}
		p, err := idem.ParseKey(raw)
		switch {
		case err == nil && p.String() != raw:
			t.Fatalf("ParseKey(%q).String() = %q", raw, p.String())
		case err != nil && !errors.Is(err, idem.ErrInvalidKey):
			t.Fatalf("ParseKey error %v does not wrap ErrInvalidKey", err)
		}
	})
}

func assertSameFingerprint(t *testing.T, a, b []byte) {
	t.Helper()
	fa, err1 := idem.FingerprintJSON(a)
	fb, err2 := idem.FingerprintJSON(b)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("fingerprint %q / %q: %v", a, b, err)
	}
	if fa != fb {
		ca, _ := idem.CanonicalJSON(a)
		cb, _ := idem.CanonicalJSON(b)
		t.Fatalf("equal documents, different fingerprints:\n%q -> %q\n%q -> %q", a, ca, b, cb)
	}
}
