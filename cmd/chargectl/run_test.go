package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/internal/testkit"

	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

// runCLI runs chargectl against url and returns its exit status and output.
func runCLI(t *testing.T, url string, stderr *testkit.LogBuffer, args ...string) (int, string) {
	t.Helper()
	var stdout bytes.Buffer
	args = append(args[:1:1], append([]string{"--url", url, "--token", "dev:acme"}, args[1:]...)...)
	code := run(context.Background(), args, &stdout, stderr)
	return code, stdout.String()
}

var mintedID = regexp.MustCompile(`command id: ([0-9a-f-]{36}) \(resume with --id `)

func TestCreatePrintsIDFirstAndResumes(t *testing.T) {
	t.Parallel()
	stderr := &testkit.LogBuffer{}
	// The API records whether the id was on stderr when the first request
	// arrived.
	var requests atomic.Int32
	var idBeforeFirst atomic.Bool
	st := newStack(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if requests.Add(1) == 1 {
				idBeforeFirst.Store(mintedID.MatchString(stderr.String()))
			}
			next.ServeHTTP(w, r)
		})
	})

	code, out := runCLI(t, st.URL, stderr, "create", "--amount", "1500", "--currency", "EUR", "--source", "tok_visa", "--description", "Order 9")
	if code != exitOK {
		t.Fatalf("create: exit %d, stderr %s", code, stderr)
	}
	if !idBeforeFirst.Load() {
		t.Fatalf("the command id was not on stderr before the first request: %s", stderr)
	}
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	chargeID := regexp.MustCompile(`charge: +(ch_[0-9a-f]{24})`).FindStringSubmatch(out)
	if chargeID == nil || !strings.Contains(out, "replayed:     no") || !strings.Contains(out, "1500 EUR") || !strings.Contains(out, "Order 9") {
		t.Fatalf("create printed:\n%s", out)
	}

	resumed := &testkit.LogBuffer{}
	code, out = runCLI(t, st.URL, resumed, "create", "--amount", "1500", "--currency", "EUR", "--source", "tok_visa", "--description", "Order 9", "--id", id, "--json")
	if code != exitOK || !strings.Contains(resumed.String(), "resuming command id: "+id) {
		t.Fatalf("resume: exit %d, stderr %s", code, resumed)
	}
	var res createOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("resume --json printed %q: %v", out, err)
	}
	if string(res.CommandID) != id || !res.Replayed || res.Charge.ID != chargeID[1] || res.KeyExpiresAt.IsZero() {
		t.Fatalf("resume: %+v, want a replay of %s under id %s", res, chargeID[1], id)
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}

	code, out = runCLI(t, st.URL, &testkit.LogBuffer{}, "get", chargeID[1])
	if code != exitOK || !strings.Contains(out, chargeID[1]) || !strings.Contains(out, "succeeded") {
		t.Fatalf("get: exit %d, printed:\n%s", code, out)
	}
	getErr := &testkit.LogBuffer{}
	if code, _ = runCLI(t, st.URL, getErr, "get", "ch_000000000000000000000000"); code != exitFailed || !strings.Contains(getErr.String(), "404") {
		t.Fatalf("get unknown: exit %d, stderr %s", code, getErr)
	}
}

func TestCreateRetriesADroppedResponse(t *testing.T) {
	t.Parallel()
	// The first answer is produced, then the connection is dropped.
	var dropped atomic.Bool
	st := newStack(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if dropped.CompareAndSwap(false, true) {
				next.ServeHTTP(httptest.NewRecorder(), r)
				panic(http.ErrAbortHandler)
			}
			next.ServeHTTP(w, r)
		})
	})
	stderr := &testkit.LogBuffer{}
	code, out := runCLI(t, st.URL, stderr, "create", "--amount", "700", "--source", "tok_visa")
	if code != exitOK || !strings.Contains(out, "replayed:     yes") || !strings.Contains(stderr.String(), "attempt 1:") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if n := st.Sim.Ledger().TotalCharges; n != 1 {
		t.Fatalf("provider ledger shows %d charges, want 1", n)
	}
}

func TestCreateDeclined(t *testing.T) {
	t.Parallel()
	st := newStack(t, nil)
	stderr := &testkit.LogBuffer{}
	code, out := runCLI(t, st.URL, stderr, "create", "--amount", "1500", "--source", providersim.SourceDecline, "--json")
	if code != exitFailed || !strings.Contains(stderr.String(), "402") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var res errorOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Retryable || res.Problem == nil || res.Problem.Slug() != "card-declined" || res.CommandID == "" {
		t.Fatalf("--json printed %q (%v)", out, err)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no command":      {},
		"unknown command": {"refund"},
		"no amount":       {"create", "--source", "tok_visa"},
		"no source":       {"create", "--amount", "1"},
		"bad id":          {"create", "--amount", "1", "--source", "tok_visa", "--id", "bad\tid"},
		"bad url":         {"create", "--amount", "1", "--source", "tok_visa", "--url", "localhost"},
		"get without id":  {"get"},
		"unknown flag":    {"get", "--nope", "x"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage || stderr.Len() == 0 {
			t.Errorf("%s: exit %d, stderr %q; want %d with a message", name, code, stderr.String(), exitUsage)
		}
	}
}
