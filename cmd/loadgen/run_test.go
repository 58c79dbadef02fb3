package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRunnerSendsOpenLoopAndDropsAtTheCap(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer dev:t1" || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		<-release // hold every request until every send is due
		if r.Header.Get("Idempotency-Key") == "k1" {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	plan := []send{{0, 0, kindFirst}, {0, 1, kindRetry}, {0, 2, kindFirst}, {20 * time.Millisecond, 3, kindFirst}, {30 * time.Millisecond, 4, kindFirst}}
	var progress bytes.Buffer
	r := &runner{client: srv.Client(), url: srv.URL + "/charges", tenant: "t1", maxInFlight: 2, progress: &progress}
	go func() { time.Sleep(300 * time.Millisecond); close(release) }()
	out, elapsed := r.run(context.Background(), plan, func(op int) request {
		return request{key: "k" + string(rune('0'+op)), body: "{}"}
	})
	if elapsed < 300*time.Millisecond {
		t.Fatalf("the run ended after %v, before the held requests were answered", elapsed)
	}
	// The first two hold both slots while the other three fall due.
	var got []string
	for _, o := range out {
		got = append(got, o.answer())
	}
	if strings.Join(got, ",") != "201,201 replayed,dropped,dropped,dropped" {
		t.Fatalf("answers %q", got)
	}
	if out[0].latency < 200*time.Millisecond || out[0].lag > 100*time.Millisecond {
		t.Fatalf("held request: latency %v, lag %v", out[0].latency, out[0].lag)
	}
	if line := progress.String(); !strings.Contains(line, "\r[") || !strings.HasSuffix(line, "\n") || !strings.Contains(line, "dropped") {
		t.Fatalf("progress %q", line)
	}
}

func TestRunnerReportsTransportFailures(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	r := &runner{client: &http.Client{}, url: url, tenant: "t", maxInFlight: 1}
	out, _ := r.run(context.Background(), []send{{0, 0, kindFirst}}, func(int) request { return request{key: "k", body: "{}"} })
	if got := out[0].answer(); got != "error: connection refused" {
		t.Fatalf("answer %q", got)
	}
}

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		n, total int
		want     string
	}{{0, 10, "[.....]"}, {5, 10, "[##...]"}, {10, 10, "[#####]"}, {3, 0, "[.....]"}} {
		if got := bar(tc.n, tc.total, 5); got != tc.want {
			t.Errorf("bar(%d, %d) = %s, want %s", tc.n, tc.total, got, tc.want)
		}
	}
}
