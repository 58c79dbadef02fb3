package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := func(secret string) func(string) string {
		return func(key string) string {
			if key == envSecret {
				return secret
			}
			return ""
		}
	}
	tests := []struct {
		name    string
		args    []string
		env     string
		want    config
		wantErr bool
	}{
		{"defaults", nil, "", config{addr: "127.0.0.1:4010", slow: 2 * time.Second}, false},
		{"secret from env", nil, "from-env", config{addr: "127.0.0.1:4010", secret: "from-env", slow: 2 * time.Second}, false},
		{"flag beats env", []string{"-secret", "from-flag"}, "from-env", config{addr: "127.0.0.1:4010", secret: "from-flag", slow: 2 * time.Second}, false},
		{"empty flag beats env", []string{"-secret="}, "from-env", config{addr: "127.0.0.1:4010", slow: 2 * time.Second}, false},
		{"all flags", []string{"-addr", ":9000", "-slow", "150ms"}, "", config{addr: ":9000", slow: 150 * time.Millisecond}, false},
		{"negative slow", []string{"-slow", "-1s"}, "", config{}, true},
		{"bad slow", []string{"-slow", "soon"}, "", config{}, true},
		{"extra argument", []string{"serve"}, "", config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseConfig(tt.args, env(tt.env), io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseConfig(%q) error = %v, wantErr %v", tt.args, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseConfig(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestHelpDoesNotShowTheSecret(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := parseConfig([]string{"-h"}, func(string) string { return "hunter2" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("error = %v, want flag.ErrHelp", err)
	}
	if strings.Contains(out.String(), "hunter2") {
		t.Errorf("usage shows the secret:\n%s", out.String())
	}
}

func TestServeUntilCancelled(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, ln, providersim.New(providersim.WithSecret("s3cret"), providersim.WithLogger(logger)), logger)
	}()

	c := provider.NewClient("http://"+ln.Addr().String(), "s3cret")
	const source = "tok_visa_4242424242424242"
	res, err := c.Charge(t.Context(), provider.ChargeRequest{Reference: "order-1", Amount: 100, Currency: "EUR", Source: source})
	if err != nil || res.Status != provider.StatusCharged {
		t.Fatalf("Charge = %+v, %v", res, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after cancellation")
	}
	if _, err := c.Lookup(t.Context(), "order-1"); !errors.Is(err, provider.ErrUnavailable) {
		t.Errorf("Lookup after shutdown: error = %v, want ErrUnavailable", err)
	}
	out := logs.String()
	if strings.Contains(out, source) {
		t.Errorf("logs show the source:\n%s", out)
	}
	for _, want := range []string{`"msg":"listening"`, `"reference":"order-1"`, `"outcome":"created"`, `"msg":"shutting down"`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %s:\n%s", want, out)
		}
	}
}
