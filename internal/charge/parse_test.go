package charge_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestParseBodyRefusesIllFormedText: a description (or any string of the
// body) that is not Unicode text is refused as a whole body, before the
// fingerprint is taken. Decoded as U+FFFD it would be stored as something
// other than what was sent, and "\ud800" and "\udbff" would be one request.
// POST /charges and the charge-requests queue both read bodies here.
func TestParseBodyRefusesIllFormedText(t *testing.T) {
	t.Parallel()
	const pre = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"`
	for name, body := range map[string]string{
		"lone high surrogate":           pre + `caf\ud800"}`,
		"lone low surrogate":            pre + `\udc00"}`,
		"surrogates in the wrong order": pre + `\ude00\ud83d"}`,
		"high surrogate, then a char":   pre + `\ud83d\u0041"}`,
		"invalid UTF-8":                 pre + "caf\xe9\"}",
		"surrogate encoded in UTF-8":    pre + "\xed\xa0\x80\"}",
		"in a member name":              `{"amount":1500,"currency":"EUR","source":"tok_visa","\ud800":""}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, _, err := charge.ParseBody([]byte(body))
			var be *charge.BodyError
			if !errors.As(err, &be) || !errors.Is(err, charge.ErrInvalidRequest) {
				t.Fatalf("ParseBody(%q) = %+v, %v; want a *BodyError", body, r, err)
			}
		})
	}
	r, _, err := charge.ParseBody([]byte(pre + `\ud83d\ude00 caf\u00e9"}`))
	if err != nil || r.Description != "😀 café" {
		t.Fatalf("a surrogate pair: %+v, %v; want the description 😀 café", r, err)
	}
}

// TestEmptyDescriptionIsNoDescription: an empty description is neither
// stored nor returned, so a body that sends one is the request without it,
// with its fingerprint, however the rest is written.
func TestEmptyDescriptionIsNoDescription(t *testing.T) {
	t.Parallel()
	_, want, err := charge.ParseBody([]byte(`{"amount":1500,"currency":"EUR","source":"tok_visa"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"amount":1500,"currency":"EUR","source":"tok_visa","description":""}`,
		`{ "description" : "", "source":"tok_visa", "currency":"EUR", "amount": 1.5e3 }`,
	} {
		r, fp, err := charge.ParseBody([]byte(body))
		if err != nil || fp != want || r.Description != "" || r.Money.Amount != 1500 {
			t.Errorf("%s: %+v, %s, %v; want the fingerprint %s of the body without a description", body, r, fp, err, want)
		}
	}
	if _, fp, err := charge.ParseBody([]byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":" "}`)); err != nil || fp == want {
		t.Errorf("a description of one space: %s, %v; want a fingerprint of its own", fp, err)
	}
}

// FuzzCommandID checks that ParseCommandID accepts exactly the keys the
// store accepts, and that the ids derived from one client key differ
// between tenants, so one tenant's charge can never be served to another.
func FuzzCommandID(f *testing.F) {
	f.Add("acme", "globex", "order-42")
	f.Add("acme", "acme2", "a b#c!~")
	f.Add("t", "u", "order\n1")
	f.Add("a", "b", strings.Repeat("k", 256))
	f.Fuzz(func(t *testing.T, tenantA, tenantB, s string) {
		id, err := charge.ParseCommandID(s)
		_, keyErr := idem.NewKey("acme", charge.ChargeOperation, s)
		if (err == nil) != (keyErr == nil) {
			t.Fatalf("ParseCommandID(%q) = %v, but NewKey says %v", s, err, keyErr)
		}
		if err != nil {
			return
		}
		a, errA := idem.NewKey(tenantA, charge.ChargeOperation, string(id))
		b, errB := idem.NewKey(tenantB, charge.ChargeOperation, string(id))
		if errA != nil || errB != nil || tenantA == tenantB {
			return
		}
		created := time.UnixMilli(1_700_000_000_000)
		if charge.ChargeID(a, created) == charge.ChargeID(b, created) || charge.ProviderReference(a, created) == charge.ProviderReference(b, created) {
			t.Fatalf("tenants %q and %q share ids for key %q", tenantA, tenantB, s)
		}
	})
}

// badCase is one entry of testdata/bad_requests.json. Absent fields take
// a valid value: a fresh key, tenant "acme", application/json.
type badCase struct {
	Name        string  `json:"name"`
	Body        *string `json:"body"`
	Repeat      int     `json:"repeat"` // body of this many bytes instead
	Key         *string `json:"key"`
	Tenant      *string `json:"tenant"`
	ContentType *string `json:"content_type"`
	Base64      bool    `json:"base64"`
	OmitKey     bool    `json:"omit_key"`
	OmitAuth    bool    `json:"omit_authorizer"`
	Status      int     `json:"status"`
	Type        string  `json:"type"`
}

// TestBadInputIsHarmless sends every case of the bad-input corpus: each
// gets its 4xx problem, and none stores a record or reaches the provider.
func TestBadInputIsHarmless(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/bad_requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus struct{ Cases []badCase }
	if err := json.Unmarshal(raw, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus.Cases) < 50 {
		t.Fatalf("corpus has %d cases, want at least 50", len(corpus.Cases))
	}
	h := newHarness(t)
	for _, tc := range corpus.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			key := newKey()
			if tc.Key != nil {
				key = *tc.Key
			}
			tenant := "acme"
			if tc.Tenant != nil {
				tenant = *tc.Tenant
			}
			body := ""
			if tc.Body != nil {
				body = *tc.Body
			}
			if tc.Repeat > 0 {
				body = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"` + strings.Repeat("x", tc.Repeat) + `"}`
			}
			req := post(tenant, key, body)
			if tc.OmitKey {
				delete(req.Headers, "idempotency-key")
			}
			if tc.OmitAuth {
				req.RequestContext.Authorizer = nil
			}
			if tc.ContentType != nil {
				if *tc.ContentType == "" {
					delete(req.Headers, "content-type")
				} else {
					req.Headers["content-type"] = *tc.ContentType
				}
			}
			req.IsBase64Encoded = tc.Base64
			resp := h.do(req)
			if resp.StatusCode != tc.Status || resp.Headers["Content-Type"] != "application/problem+json" {
				t.Fatalf("got %d %s %s, want %d problem+json", resp.StatusCode, resp.Headers["Content-Type"], resp.Body, tc.Status)
			}
			if got := problemType(t, resp); got != tc.Type {
				t.Fatalf("problem type %q, want %q", got, tc.Type)
			}
			if _, ok := resp.Headers["Idempotency-Expires"]; ok {
				t.Fatal("a refused request must not announce a stored key")
			}
			if k, err := idem.NewKey("acme", "create-charge", key); err == nil {
				if _, err := h.store.Get(t.Context(), k); !errors.Is(err, idem.ErrNotFound) {
					t.Fatalf("a record was stored for a refused request: %v", err)
				}
			}
		})
	}
	t.Cleanup(func() {
		if _, calls := h.ledger(t); calls != 0 {
			t.Errorf("bad input reached the provider %d times", calls)
		}
	})
}
