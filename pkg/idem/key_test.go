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
			var ve *idem.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.wantField || !errors.Is(err, idem.ErrInvalidKey) {
				t.Fatalf("want a ValidationError on %s, got %v", tc.wantField, err)
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
		{"one escaping", `{"s":"\u0041\/<>"}`, `{"s":"A/<>"}`, false},
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
