package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

func TestLoopbackOnly(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:3000", "http://localhost:3000", "http://[::1]:4010", "http://127.0.0.2"} {
		if err := loopback(u); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1:3000", "https://api.example.com", "http://0.0.0.0:3000", "127.0.0.1:3000", "ftp://127.0.0.1", "http://localhost.example.com"} {
		if loopback(u) == nil {
			t.Errorf("%s accepted", u)
		}
	}
}

func TestParseLoadFlags(t *testing.T) {
	env := func(name string) string {
		if name == "DYNAMODB_ENDPOINT" {
			return "http://127.0.0.1:8000"
		}
		return ""
	}
	c, err := parseLoadFlags([]string{"-n", "50", "-rate", "10"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ops != 50 || c.Rate != 10 || c.dynamoDB != "http://127.0.0.1:8000" || !strings.HasPrefix(c.tenant, "load-") {
		t.Fatalf("config %+v", c)
	}
	if d, _ := parseLoadFlags(nil, func(string) string { return "" }); d.dynamoDB != "http://127.0.0.1:4566" || d.Ops != 20000 || d.Rate != 2080 {
		t.Fatalf("defaults %+v", d)
	}
	for _, args := range [][]string{
		{"-target", "http://192.168.1.10:3000"},
		{"-provider", "http://example.com"},
		{"-dynamodb", "https://dynamodb.us-east-1.amazonaws.com"},
		{"-tenant", "has#separator"},
		{"-rate", "0"},
		{"-max-inflight", "0"},
		{"extra"},
	} {
		if _, err := parseLoadFlags(args, env); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

func TestWaitForChargesDrainsWhatTheSettleLeft(t *testing.T) {
	// Missing 3, 2, 1, 0 on successive checks, a millisecond apart.
	missing := []int{3, 2, 1, 0}
	poll := func(n *int) func(context.Context) (checked, error) {
		return func(context.Context) (checked, error) {
			c := checked{Check: benchout.Check{Missing: missing[min(*n, len(missing)-1)]}}
			*n++
			return c, nil
		}
	}
	ctx := context.Background()

	var n int
	w, err := waitForCharges(ctx, 0, time.Minute, time.Millisecond, poll(&n))
	if err != nil {
		t.Fatal(err)
	}
	if w.missingAtSettle != 3 || w.check.Missing != 0 || n != 4 {
		t.Fatalf("no settle, a drain: %+v after %d checks", w, n)
	}

	n = 0
	w, err = waitForCharges(ctx, 0, 0, time.Millisecond, poll(&n))
	if err != nil {
		t.Fatal(err)
	}
	if w.missingAtSettle != 3 || w.check.Missing != 3 || n != 1 {
		t.Fatalf("no settle, no drain: %+v after %d checks", w, n)
	}

	n = 0
	w, err = waitForCharges(ctx, time.Minute, 0, time.Millisecond, poll(&n))
	if err != nil {
		t.Fatal(err)
	}
	if w.missingAtSettle != 0 || w.check.Missing != 0 || w.drain != 0 || n != 4 {
		t.Fatalf("resolved within the settle: %+v after %d checks", w, n)
	}

	// Still missing when the drain runs out: it stops, and says so.
	always := func(context.Context) (checked, error) { return checked{Check: benchout.Check{Missing: 1}}, nil }
	w, err = waitForCharges(ctx, 0, 20*time.Millisecond, time.Millisecond, always)
	if err != nil {
		t.Fatal(err)
	}
	if w.missingAtSettle != 1 || w.check.Missing != 1 || w.drain < 20*time.Millisecond {
		t.Fatalf("drain ran out: %+v", w)
	}
}
