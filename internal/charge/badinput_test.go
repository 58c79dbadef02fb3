package charge_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

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
				if _, err := h.store.Get(context.Background(), k); !errors.Is(err, idem.ErrNotFound) {
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
