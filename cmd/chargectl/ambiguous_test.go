package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/internal/testkit"
)

// ambiguousGateway answers the first POST with API Gateway's bare 502 (the
// function failed, maybe after it charged), then every later one with
// then.
func ambiguousGateway(t *testing.T, status int, contentType, body string) string {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"message":"Internal server error"}`)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCreateAfterAnAmbiguousAttemptIsNotFinal: the first attempt's
// bare 502 may have come after the charge; a later answer about another
// attempt (the token expired meanwhile: the gateway's 401) must not make
// chargectl call the command final (exit 1, no --id to resume with), which
// invites a new command id and a second charge.
func TestCreateAfterAnAmbiguousAttemptIsNotFinal(t *testing.T) {
	t.Parallel()
	url := ambiguousGateway(t, http.StatusUnauthorized, "application/json", `{"message":"Unauthorized"}`)
	stderr := &testkit.LogBuffer{}
	code, _ := runCLI(t, url, stderr, "create", "--amount", "1500", "--currency", "EUR", "--source", "tok_visa")
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	if code != exitPending || !strings.Contains(stderr.String(), "never a new one: chargectl create ... --id "+id) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and the warning that the card may have been charged", code, stderr, exitPending)
	}
}

// TestCreateUnavailableAfterAnAmbiguousAttemptWarns: a bare 502,
// then 503 provider-unavailable until --timeout: the first attempt may
// have charged, so chargectl must give the "may have been charged; never
// a new id" warning, not only "not known yet".
func TestCreateUnavailableAfterAnAmbiguousAttemptWarns(t *testing.T) {
	t.Parallel()
	url := ambiguousGateway(t, http.StatusServiceUnavailable, "application/problem+json",
		`{"type":"https://chargeonce.dev/problems/provider-unavailable","title":"Provider unavailable","status":503}`)
	stderr := &testkit.LogBuffer{}
	code, _ := runCLI(t, url, stderr, "create", "--amount", "1500", "--currency", "EUR", "--source", "tok_visa", "--timeout", "2s")
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	if code != exitPending || !strings.Contains(stderr.String(), "never a new one: chargectl create ... --id "+id) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and the warning that the card may have been charged", code, stderr, exitPending)
	}
}

// TestRateLimitedSaysNothingRanAndWhenToResume: a tenant over its limit
// is refused until the budget runs out; chargectl says that no attempt did
// anything, and when and how to resume, and exits 3.
func TestRateLimitedSaysNothingRanAndWhenToResume(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"type":"https://chargeonce.dev/problems/rate-limited","title":"Too many requests for this tenant","status":429}`)
	}))
	t.Cleanup(srv.Close)
	stderr := &testkit.LogBuffer{}
	code, _ := runCLI(t, srv.URL, stderr, "create", "--amount", "1500", "--source", "tok_visa", "--timeout", "300ms")
	id := mintedID.FindStringSubmatch(stderr.String())[1]
	want := "rate limited: the tenant is over its limit, and no attempt did anything; after 1s, resume with: chargectl create ... --id " + id
	if code != exitPending || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "may have") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitPending, want)
	}
}
