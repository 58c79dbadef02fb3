package idem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, tenant, op, client string
		wantField                string // "" = valid
	}{
		{"valid", "acme", "create-charge", "order-42", ""},
		{"printable ascii with spaces and symbols", "t_1", "op", "a b#c!~", ""},
		{"255 characters", "acme", "op", strings.Repeat("k", 255), ""},
		{"256 characters", "acme", "op", strings.Repeat("k", 256), "client key"},
		{"empty key", "acme", "op", "", "client key"},
		{"control character", "acme", "op", "a\nb", "client key"},
		{"non-ascii", "acme", "op", "clé", "client key"},
		{"DEL", "acme", "op", "a\x7f", "client key"},
		{"empty tenant", "", "op", "k", "tenant"},
		{"tenant with separator", "a#b", "op", "k", "tenant"},
		{"operation with space", "acme", "create charge", "k", "operation"},
		{"long tenant", strings.Repeat("t", 129), "op", "k", "tenant"},
		{"an identity provider's subject", "auth0|5f7c8ec7c33c6c004bbafe82", "op", "k", ""},
		{"a printable tenant", "ünïcode tenant (x)", "op", "k", ""},
		{"tenant with a control character", "a\tb", "op", "k", "tenant"},
		{"tenant not UTF-8", "a\xffb", "op", "k", "tenant"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := idem.NewKey(tc.tenant, tc.op, tc.client)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("NewKey: %v", err)
				}
				back, err := idem.ParseKey(k.String())
				if err != nil || back != k {
					t.Fatalf("ParseKey(%q) = %v, %v", k.String(), back, err)
				}
				return
			}
			if !errors.Is(err, idem.ErrInvalidKey) || !strings.Contains(err.Error(), ": "+tc.wantField+": ") {
				t.Fatalf("want ErrInvalidKey naming the %s, got %v", tc.wantField, err)
			}
		})
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string
		wantErr        bool
	}{
		{"sorted keys, no whitespace", "{ \"b\" : 1,\n \"a\" : 2 }", `{"a":2,"b":1}`, false},
		{"nested", `{"z":{"y":[3,{"b":true,"a":null}]},"a":"x"}`, `{"a":"x","z":{"y":[3,{"a":null,"b":true}]}}`, false},
		{"numbers exactly as written", `{"a":1.50,"b":1e3,"c":-0}`, `{"a":1.50,"b":1e3,"c":-0}`, false},
		// RFC 8785 (jsontext's Canonicalize) writes numbers as float64s:
		// 2^53+1 would become 2^53, and 1e400 the largest float64, so two
		// different requests would share a fingerprint.
		{"integer past float64's precision", `{"id":9007199254740993}`, `{"id":9007199254740993}`, false},
		{"number past float64's range", `{"n":1e400}`, `{"n":1e400}`, false},
		{"one escaping", `{"s":"\u0041\/<>"}`, `{"s":"A/<>"}`, false},
		{"surrogate pair", `{"s":"\ud83d\uDE00"}`, `{"s":"😀"}`, false},
		{"U+FFFD as sent", "{\"s\":\"\\ufffd\uFFFD\"}", "{\"s\":\"\uFFFD\uFFFD\"}", false},
		{"escaped backslash before u", `{"s":"\\ud800"}`, `{"s":"\\ud800"}`, false},
		{"scalar", ` 42 `, `42`, false},
		{"duplicate keys", `{"a":1,"a":1}`, "", true},
		{"nested duplicate keys", `{"x":{"a":1,"a":2}}`, "", true},
		{"trailing data", `{} {}`, "", true},
		{"truncated", `{"a":`, "", true},
		{"not json", `amount=1`, "", true},
		{"empty", ``, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := idem.CanonicalJSON([]byte(tc.in))
			if tc.wantErr {
				if !errors.Is(err, idem.ErrInvalidJSON) {
					t.Fatalf("want ErrInvalidJSON, got %q, %v", got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("CanonicalJSON = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestCanonicalJSONRefusesIllFormedText: encoding/json decodes a byte
// that is not UTF-8, and a \u escape of a surrogate that is not half of a
// pair, as U+FFFD. Canonicalised that way, documents that differ would
// share one canonical form (and one fingerprint), and what a caller stores
// would not be what was sent; CanonicalJSON refuses them instead.
func TestCanonicalJSONRefusesIllFormedText(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"lone high surrogate":         `"\ud800"`,
		"lone low surrogate":          `"a\uDC00b"`,
		"high surrogate at the end":   `"x\udbff"`,
		"high surrogate, then a char": `"\ud800\u0041"`,
		"two high surrogates":         `"\ud800\ud800\udc00"`,
		"pair reversed":               `"\udc00\ud800"`,
		"high surrogate, then escape": `"\ud800\n"`,
		"in a key":                    `{"\ud800":1}`,
		"in a nested value":           `{"a":[{"b":"\udfff"}]}`,
		"invalid byte":                "\"caf\xe9\"",
		"invalid byte among escapes":  "\"\\n\xff\"",
		"truncated sequence":          "\"\xe2\x82\"",
		"overlong encoding":           "\"\xc0\xaf\"",
		"surrogate encoded in UTF-8":  "\"\xed\xa0\x80\"",
		"invalid byte in a key":       "{\"\xff\":1}",
		"invalid byte in a plain key": "{\"a\xfe\":1,\"b\":2}",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got, err := idem.CanonicalJSON([]byte(doc)); !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("CanonicalJSON(%q) = %q, %v; want ErrInvalidJSON", doc, got, err)
			}
			if _, err := idem.FingerprintJSON([]byte(doc)); !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("FingerprintJSON(%q): %v; want ErrInvalidJSON", doc, err)
			}
		})
	}
}

func TestFingerprintJSON(t *testing.T) {
	t.Parallel()
	a, err1 := idem.FingerprintJSON([]byte(`{"amount":100,"currency":"EUR"}`))
	b, err2 := idem.FingerprintJSON([]byte("{\n  \"currency\": \"EUR\",\n  \"amount\": 100\n}"))
	c, err3 := idem.FingerprintJSON([]byte(`{"amount":101,"currency":"EUR"}`))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("equal documents, different fingerprints")
	}
	if a == c {
		t.Error("a changed amount kept the fingerprint")
	}
	if len(a.String()) != 64 {
		t.Errorf("fingerprint string %q", a.String())
	}
}
