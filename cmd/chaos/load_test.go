package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/client"
)

// reply is one answer of a test API: a status and, for a problem, its
// slug and Retry-After.
type reply struct {
	status     int
	slug       string
	retryAfter string
}

// api answers each request with the next of replies.
func api(t *testing.T, replies ...reply) string {
	t.Helper()
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp := replies[min(n, len(replies)-1)]
		n++
		if rp.retryAfter != "" {
			w.Header().Set(client.HeaderRetryAfter, rp.retryAfter)
		}
		if rp.slug == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rp.status)
			fmt.Fprint(w, `{"id":"ch_1","status":"succeeded"}`)
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(rp.status)
		fmt.Fprintf(w, `{"type":%q,"title":"t","status":%d}`, client.ProblemBase+rp.slug, rp.status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAnIntentEndsAsItsAnswersSay: a client gives up on "nothing was done"
// only when no call of its may have run; it calls again after an unknown
// outcome, and stops at a final answer.
func TestAnIntentEndsAsItsAnswersSay(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		calls   [][]reply // each call's answers: pkg/client tries each in turn
		abandon bool
		want    []string // how each call ends the intent; "" calls again
	}{
		"created":                   {calls: [][]reply{{{201, "", ""}}}, want: []string{endDone}},
		"refused for good":          {calls: [][]reply{{{502, "provider-rejected", ""}}}, want: []string{endRefused}},
		"refund beyond the charge":  {calls: [][]reply{{{409, "refund-exceeds-charge", ""}}}, want: []string{endRefused}},
		"unavailable, kept trying":  {calls: [][]reply{{{503, "service-unavailable", "1"}}}, want: []string{""}},
		"unavailable, given up":     {calls: [][]reply{{{503, "provider-unavailable", "1"}}}, abandon: true, want: []string{endAbandoned}},
		"held back, given up":       {calls: [][]reply{{{409, "refund-exceeds-charge", "1"}}}, abandon: true, want: []string{endAbandoned}},
		"pending, never given up":   {calls: [][]reply{{{503, "outcome-pending", "1"}}, {{503, "service-unavailable", "1"}}}, abandon: true, want: []string{"", ""}},
		"a bare 500 may have run":   {calls: [][]reply{{{500, "", ""}}, {{503, "provider-unavailable", "1"}}}, abandon: true, want: []string{"", ""}},
		"in progress, then created": {calls: [][]reply{{{409, "request-in-progress", "1"}}, {{201, "", ""}}}, want: []string{"", endDone}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := &intent{Kind: kindCharge, ID: "k"}
			for i, answers := range tc.calls {
				c, err := client.New(api(t, answers...), client.WithMaxAttempts(1), client.WithBackoff(time.Millisecond, time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.Create(context.Background(), in.ID, client.Money{Amount: 1000, Currency: currency}, "tok_visa")
				if got := in.ends(err, tc.abandon); got != tc.want[i] {
					t.Fatalf("call %d (%v): ends %q, want %q", i+1, err, got, tc.want[i])
				}
			}
		})
	}
}

func TestStoredAnswersAreTheOnesReplayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a    answer
		want bool
	}{
		{answer{Status: 201}, true}, {answer{Status: 402, Problem: "card-declined"}, true},
		{answer{Status: 409, Problem: "refund-exceeds-charge"}, true}, {answer{Status: 409, Problem: "refund-exceeds-charge", RetryAfter: "2"}, false},
		{answer{Status: 200}, false}, {answer{Status: 503, Problem: "outcome-pending"}, false}, {answer{Status: 409, Problem: "request-in-progress"}, false},
	} {
		if got := tc.a.stored(); got != tc.want {
			t.Errorf("%s stored: %t, want %t", tc.a.name(), got, tc.want)
		}
	}
}
