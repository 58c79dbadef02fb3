package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

// TestAttackTagsEveryResultWithItsKey: each of vegeta's requests is a new
// charge of the tenant under a fresh key, and its result says which.
func TestAttackTagsEveryResultWithItsKey(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen = map[string]string{} // key -> tenant token
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")] = r.Header.Get("Authorization")
		mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/charges" || r.URL.Fragment != "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	shots := attack(t.Context(), srv.Client(), srv.URL, "acme", "p", 50, 200*time.Millisecond)
	if len(shots) < 5 {
		t.Fatalf("%d requests in 200 ms at 50/s, want about 10", len(shots))
	}
	for _, s := range shots {
		if s.status != http.StatusTooManyRequests || !strings.HasPrefix(s.key, "p-") || seen[s.key] != "Bearer dev:acme" {
			t.Errorf("shot %+v: want 429 under a key the server saw from acme", s)
		}
	}
	if len(seen) != len(shots) {
		t.Errorf("%d keys for %d requests, want one each", len(seen), len(shots))
	}
}

func TestIsolatedHoldsEveryCheck(t *testing.T) {
	t.Parallel()
	b := benchout.TenantRun{Requests: 300, Answers: map[string]int{"201": 300}}
	good := benchout.Isolation{
		Rounds: 2, ALimit: 10, MaxRatio: 1.5, P50Ratio: 1.1, P99Ratio: 1.4,
		BAlone: b, BBesideLimit: b, BBesideFlood: b,
		AAtLimit: benchout.TenantRun{Requests: 300, Answers: map[string]int{"201": 300}},
		AFlood:   benchout.TenantRun{Requests: 3000, Answers: map[string]int{"201": 300, "429": 2700}},
		ACheck:   benchout.Check{Logical: 3300, Created: 600, LedgerCharges: 600, ProviderCalls: 600, Rows: 600},
		BCheck:   benchout.Check{Logical: 900, Created: 900, LedgerCharges: 900, ProviderCalls: 900, Rows: 900},
	}
	if !isolated(good, 15*time.Second) {
		t.Fatal("a run where every check held is not isolated")
	}
	for name, spoil := range map[string]func(*benchout.Isolation){
		"B lost a charge":        func(s *benchout.Isolation) { s.BBesideFlood.Answers = map[string]int{"201": 299, "429": 1} },
		"B's p99 rose":           func(s *benchout.Isolation) { s.P99Ratio = 1.6 },
		"B's p50 rose":           func(s *benchout.Isolation) { s.P50Ratio = 1.51 },
		"A got a 5xx":            func(s *benchout.Isolation) { s.AFlood.Answers = map[string]int{"201": 300, "429": 2699, "503": 1} },
		"A was never limited":    func(s *benchout.Isolation) { s.AFlood.Answers = map[string]int{"201": 3000} },
		"A got past its limit":   func(s *benchout.Isolation) { s.AFlood.Answers = map[string]int{"201": 400, "429": 2600} },
		"A's ledger off":         func(s *benchout.Isolation) { s.ACheck.LedgerCharges = 301 },
		"B's row missing":        func(s *benchout.Isolation) { s.BCheck.Rows, s.BCheck.Missing = 599, 1 },
		"a refusal stored a key": func(s *benchout.Isolation) { s.ARefusedStored = 1 },
	} {
		s := good
		spoil(&s)
		if isolated(s, 15*time.Second) {
			t.Errorf("%s: still isolated", name)
		}
	}
}

func TestIsolationFlags(t *testing.T) {
	t.Parallel()
	env := func(string) string { return "" }
	c, err := parseIsolationFlags(nil, env)
	if err != nil || c.limit != 10 || c.times != 10 || c.maxRatio != 1.5 || c.dynamoDB != "http://127.0.0.1:4566" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, bad := range [][]string{{"-times", "1"}, {"-max-ratio", "1"}, {"-target", "http://example.com"}, {"extra"}} {
		if _, err := parseIsolationFlags(bad, env); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
