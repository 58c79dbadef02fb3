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
	// A loaded machine may send fewer than 10 in 200 ms; only none fails.
	shots := attack(t.Context(), srv.Client(), srv.URL, "acme", "p", 50, 200*time.Millisecond)
	if len(shots) == 0 {
		t.Fatal("no request sent in 200 ms at 50/s")
	}
	for _, s := range shots {
		if s.status != http.StatusTooManyRequests || !strings.HasPrefix(s.key, "p-") || seen[s.key] != "Bearer dev:acme" || s.sent.IsZero() {
			t.Errorf("shot %+v: want 429 under a key the server saw from acme, and when it was sent", s)
		}
	}
	if len(seen) != len(shots) {
		t.Errorf("%d keys for %d requests, want one each", len(seen), len(shots))
	}
}

// TestOnlyBehavioursFailARun: a run fails on what the service did, never
// on how fast the machine was.
func TestOnlyBehavioursFailARun(t *testing.T) {
	t.Parallel()
	b := benchout.TenantRun{Requests: 300, Answers: map[string]int{"201": 300}}
	good := benchout.Isolation{
		Rounds: 2, ALimit: 10, P50Ratio: 1.1, P99Ratio: 1.4,
		BAlone: b, BBesideLimit: b, BBesideFlood: b,
		AAtLimit: benchout.TenantRun{Requests: 300, Answers: map[string]int{"201": 300}, SpanSeconds: 30},
		AFlood:   benchout.TenantRun{Requests: 3000, Answers: map[string]int{"201": 300, "429": 2700}, SpanSeconds: 30},
		ACheck:   benchout.Check{Logical: 3300, Created: 600, LedgerCharges: 600, ProviderCalls: 600, Rows: 600},
		BCheck:   benchout.Check{Logical: 900, Created: 900, LedgerCharges: 900, ProviderCalls: 900, Rows: 900},
	}
	if failed := failures(good); len(failed) > 0 {
		t.Fatalf("a run where every check held failed: %q", failed)
	}
	for name, slow := range map[string]func(*benchout.Isolation){
		// B's tail beside the flood is a figure: a loaded machine moved it
		// to 2.66× once, on 2 shared cores.
		"B's p99 rose": func(s *benchout.Isolation) { s.P50Ratio, s.P99Ratio = 1.2, 2.66 },
		// A slow server answers A's flood over a longer span, and its
		// bucket lets more through in it.
		"A's flood took longer": func(s *benchout.Isolation) {
			s.AFlood.SpanSeconds, s.AFlood.Answers = 45, map[string]int{"201": 400, "429": 2600}
		},
	} {
		s := good
		slow(&s)
		if failed := failures(s); len(failed) > 0 {
			t.Errorf("%s, every behaviour held: failed %q", name, failed)
		}
	}
	for name, spoil := range map[string]func(*benchout.Isolation){
		"B got a 429":            func(s *benchout.Isolation) { s.BBesideFlood.Answers = map[string]int{"201": 299, "429": 1} },
		"B's request timed out":  func(s *benchout.Isolation) { s.BAlone.Answers = map[string]int{"201": 299, "error: timeout": 1} },
		"A got a 5xx":            func(s *benchout.Isolation) { s.AFlood.Answers = map[string]int{"201": 300, "429": 2699, "503": 1} },
		"A was never limited":    func(s *benchout.Isolation) { s.AFlood.Answers = map[string]int{"201": 3000} },
		"A got past its limit":   func(s *benchout.Isolation) { s.AFlood.Answers = map[string]int{"201": 400, "429": 2600} },
		"A's ledger off":         func(s *benchout.Isolation) { s.ACheck.LedgerCharges = 601 },
		"B's row missing":        func(s *benchout.Isolation) { s.BCheck.Rows, s.BCheck.Missing = 899, 1 },
		"B's charge not made":    func(s *benchout.Isolation) { s.BCheck.Logical = 901 },
		"a refusal stored a key": func(s *benchout.Isolation) { s.ARefusedStored = 1 },
	} {
		s := good
		spoil(&s)
		if len(failures(s)) == 0 {
			t.Errorf("%s: the run passed", name)
		}
	}
}

func TestSpanRunsFromTheFirstSendToTheLastAnswer(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	phase := []shot{
		{sent: at.Add(time.Second), latency: 5 * time.Second},
		{sent: at, latency: 10 * time.Millisecond},
		{sent: at.Add(9 * time.Second), latency: 20 * time.Millisecond},
	}
	if got, want := span(phase), 9020*time.Millisecond; got != want {
		t.Errorf("span = %v, want %v", got, want)
	}
}

func TestIsolationFlags(t *testing.T) {
	t.Parallel()
	env := func(string) string { return "" }
	c, err := parseIsolationFlags(nil, env)
	if err != nil || c.limit != 10 || c.times != 10 || c.dynamoDB != "http://127.0.0.1:4566" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, bad := range [][]string{{"-times", "1"}, {"-phase", "500ms"}, {"-target", "http://example.com"}, {"extra"}} {
		if _, err := parseIsolationFlags(bad, env); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
