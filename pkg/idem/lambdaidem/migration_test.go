package lambdaidem_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
)

// TestMigration: without a key, a request runs unprotected, its writes
// still committed, and is counted, logged and answered with the headers
// that say the key will be required; with a key, nothing changes.
func TestMigration(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s idemtest.Subject) {
		var (
			runs, missing atomic.Int32
			logs          bytes.Buffer
			keys          []string // of the runs, in order
		)
		since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		sunset := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
		handler := lambdaidem.HTTP(s.Store, "create-order", func(_ context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
			runs.Add(1)
			keys = append(keys, l.Key.String())
			if strings.Contains(req.Body, "timeout") {
				return idem.Unknown(idem.Response{}), nil
			}
			return idem.Succeeded(idem.Response{Status: 201, Headers: map[string]string{"Link": `</orders/1>; rel="self"`}, Body: []byte(`{}`)},
				s.Row(l.Key.String())), nil
		}, func(o *lambdaidem.Options) {
			o.Migration = &lambdaidem.KeyMigration{
				Since: since, Sunset: sunset,
				OnMissingKey: func(_ context.Context, r lambdaidem.Request) {
					if r.Route == "POST /orders" {
						missing.Add(1)
					}
				},
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}
		})
		call := func(req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			t.Helper()
			resp, err := handler(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		body := `{"item":"secret-book"}`
		for i := range 2 {
			resp := call(httpRequest("acme", "", body))
			if resp.StatusCode != 201 || resp.Headers[lambdaidem.HeaderReplayed] != "" || resp.Headers[lambdaidem.HeaderIdempotencyExpires] != "" {
				t.Fatalf("call %d without a key: %d %v; want the handler's own answer, no replay", i+1, resp.StatusCode, resp.Headers)
			}
			wantLink := `</orders/1>; rel="self", <` + lambdaidem.DefaultProblemBase + `invalid-idempotency-key>; rel="deprecation"`
			if resp.Headers["Deprecation"] != "@1767225600" || resp.Headers["Sunset"] != "Wed, 01 Jul 2026 00:00:00 GMT" || resp.Headers["Link"] != wantLink {
				t.Fatalf("call %d without a key: headers %v", i+1, resp.Headers)
			}
		}
		if runs.Load() != 2 || missing.Load() != 2 || keys[0] == keys[1] {
			t.Fatalf("%d runs, %d counted, keys %v; want each request without a key run under a key of its own, and counted", runs.Load(), missing.Load(), keys)
		}
		for _, k := range keys {
			if !s.RowExists(t, k) {
				t.Fatal("the business write of a request without a key was not committed")
			}
		}
		line := logs.String()
		if strings.Count(line, "ran unprotected") != 2 || !strings.Contains(line, "route=\"POST /orders\"") || !strings.Contains(line, "operation=create-order") || strings.Contains(line, "secret") {
			t.Fatalf("log %q: want a line per request with the route and operation, never the body", line)
		}

		pending := call(httpRequest("acme", "", `{"item":"timeout"}`))
		if p := wantProblem(t, pending, 503, "outcome-pending"); pending.Headers["Retry-After"] != "" || pending.Headers["Deprecation"] == "" || !strings.Contains(p.Detail, "may do it again") {
			t.Fatalf("an unknown outcome without a key: %v %q; want no invitation to retry", pending.Headers, p.Detail)
		}

		key := idemtest.UniqueKey(t, "x").ClientKey()
		keyed := call(httpRequest("acme", key, body))
		if keyed.StatusCode != 201 || keyed.Headers["Deprecation"] != "" || keyed.Headers[lambdaidem.HeaderIdempotencyExpires] == "" {
			t.Fatalf("with a key: %d %v; want the usual answer, no deprecation", keyed.StatusCode, keyed.Headers)
		}
		if again := call(httpRequest("acme", key, body)); again.Headers[lambdaidem.HeaderReplayed] != "true" {
			t.Fatalf("a retry with a key: %v; want a replay", again.Headers)
		}
		if bad := call(httpRequest("acme", "bad\x01key", body)); bad.StatusCode != 400 || bad.Headers["Deprecation"] != "" {
			t.Fatalf("an invalid key: %d %v; want 400, as ever", bad.StatusCode, bad.Headers)
		}
		wantProblem(t, call(httpRequest("", "", body)), 401, "unauthorized")
		if runs.Load() != 4 || missing.Load() != 3 {
			t.Fatalf("%d runs, %d counted; want 4 and 3", runs.Load(), missing.Load())
		}
	})
}
