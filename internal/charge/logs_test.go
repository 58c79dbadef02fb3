package charge_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/app"
)

// TestLogsCarryNoSecrets drives every outcome and checks the log lines: one
// JSON object per request with its outcome and key hash, and never the card
// source, the raw body or the raw key.
func TestLogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.InflightWait = 0 })
	key := "secret-key-" + newKey()
	sources := []string{"tok_visa", "tok_decline", "tok_timeout_once", "tok_unavailable_once"}
	var bodies []string
	for i, src := range sources {
		body := strings.Replace(visa, "tok_visa", src, 1)
		bodies = append(bodies, body)
		k := key + "-" + string(rune('a'+i))
		h.do(post("acme", k, body))
		h.do(post("acme", k, body))                                     // replay or conflict
		h.do(post("acme", k, strings.Replace(body, "1500", "1501", 1))) // mismatch
	}
	h.do(post("acme", key+"-bad", `{"amount":0,"currency":"EUR","source":"tok_visa"}`))

	logs := h.logs.String()
	outcomes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if o, ok := rec["outcome"].(string); ok {
			outcomes[o] = true
			if rec["tenant"] != "acme" || rec["key_hash"] == "" {
				t.Errorf("request log without tenant or key hash: %q", line)
			}
		}
	}
	for _, want := range []string{"created", "replayed", "mismatch", "declined", "ambiguous", "unavailable", "conflict", "invalid"} {
		if !outcomes[want] {
			t.Errorf("no log line with outcome %q (got %v)", want, outcomes)
		}
	}
	for _, secret := range append(append(sources, key, "secret-key"), bodies...) {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

// TestInternalErrorsRevealNothing makes the store fail and checks the 500
// body is the generic problem, with no trace of the cause.
func TestInternalErrorsRevealNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *app.ChargeConfig) { c.ChargesTable = "no-such-table-x1" })
	resp := h.do(get("acme", "ch_000000000000000000000000"))
	wantStatus(t, resp, 500)
	if problemType(t, resp) != "internal-error" {
		t.Fatalf("500 body %s", resp.Body)
	}
	for _, leak := range []string{"no-such-table", "ResourceNotFound", "dynamodb", "operation error"} {
		if strings.Contains(strings.ToLower(resp.Body), strings.ToLower(leak)) {
			t.Errorf("500 body reveals %q: %s", leak, resp.Body)
		}
	}
}
