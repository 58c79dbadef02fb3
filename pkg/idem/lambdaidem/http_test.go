package lambdaidem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// beginFails is a custom Backend whose Begin fails with err: the
// handler never runs.
type beginFails struct {
	idem.Backend
	err error
}

func (b beginFails) Begin(context.Context, idem.Key, idem.Fingerprint, []byte) (idem.Begun, error) {
	return idem.Begun{}, b.err
}

// answerTo is the middleware's answer when Begin fails with err, on a
// store whose clock reads t0. The handler must not run.
func answerTo(t *testing.T, t0 time.Time, err error) events.APIGatewayV2HTTPResponse {
	t.Helper()
	clock := idemtest.NewClock(t0)
	s := beginFails{Backend: memstore.New(func(o *memstore.Options) { o.Clock = clock.Now }), err: err}
	var runs atomic.Int32
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201}), nil
	})
	resp, herr := handler(t.Context(), httpRequest("acme", "k-1", `{}`))
	if herr != nil || runs.Load() != 0 {
		t.Fatalf("error %v, %d runs; want an answer, the handler not run", herr, runs.Load())
	}
	for k, v := range resp.Headers {
		if strings.Contains(v, "0001") {
			t.Errorf("header %s: %q: a zero time", k, v)
		}
	}
	if strings.Contains(resp.Body, "0001-01-01") {
		t.Errorf("body %s: a zero time", resp.Body)
	}
	return resp
}

// TestBeginSentinels: a custom Backend's plain sentinels, wrapped, are
// answered as its typed errors are; the typed errors' times are used
// when they are set.
func TestBeginSentinels(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	leaseEnd, recordEnd := t0.Add(20*time.Second), t0.Add(24*time.Hour)
	cases := []struct {
		name         string
		err          error
		status       int
		slug         string
		retryAfter   string
		detail       string // a part of the detail
		expires      time.Time
		notInDetails string
	}{
		{"plain ErrMismatch", fmt.Errorf("mystore: begin: %w", idem.ErrMismatch), 422, "idempotency-key-reused", "", "different request", time.Time{}, ""},
		{"*MismatchError", fmt.Errorf("mystore: %w", &idem.MismatchError{RecordExpiresAt: recordEnd}), 422, "idempotency-key-reused", "", "different request", recordEnd, ""},
		{"plain ErrInFlight", fmt.Errorf("mystore: begin: %w", idem.ErrInFlight), 409, "request-in-progress", "1", "same key", time.Time{}, "This request was not carried out"},
		{"*InFlightError", &idem.InFlightError{LeaseExpiresAt: leaseEnd, RecordExpiresAt: recordEnd}, 409, "request-in-progress", "20", "2026-03-01T12:00:20Z", recordEnd, ""},
		{"plain ErrUnknownClaim", fmt.Errorf("mystore: begin: %w", idem.ErrUnknownClaim), 503, "outcome-pending", "1", "same key", time.Time{}, "This request was not carried out"},
		{"*UnknownClaimError", &idem.UnknownClaimError{LeaseExpiresAt: leaseEnd, RecordExpiresAt: recordEnd, Err: errors.New("timeout")}, 503, "outcome-pending", "1", "2026-03-01T12:00:20Z", recordEnd, "This request was not carried out"},
		{"*UnknownClaimError, last try throttled", &idem.UnknownClaimError{LeaseExpiresAt: leaseEnd, Err: idem.ErrUnavailable}, 503, "outcome-pending", "1", "same key", time.Time{}, "This request was not carried out"},
		{"ErrUnavailable", fmt.Errorf("mystore: begin: %w", idem.ErrUnavailable), 503, "service-unavailable", "1", "This request was not carried out", time.Time{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			resp := answerTo(t, t0, c.err)
			p := wantProblem(t, resp, c.status, c.slug)
			if resp.Headers["Retry-After"] != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", resp.Headers["Retry-After"], c.retryAfter)
			}
			if !strings.Contains(p.Detail, c.detail) || (c.notInDetails != "" && strings.Contains(p.Detail, c.notInDetails)) {
				t.Errorf("detail %q: want %q in it, and not %q", p.Detail, c.detail, c.notInDetails)
			}
			want := ""
			if !c.expires.IsZero() {
				want = c.expires.Format(http.TimeFormat)
			}
			if got := resp.Headers[lambdaidem.HeaderIdempotencyExpires]; got != want {
				t.Errorf("Idempotency-Expires %q, want %q", got, want)
			}
		})
	}
}

// TestBeginErrorsProveNothing: only an error wrapping ErrUnavailable
// proves that Begin wrote no record. Any other leaves the claim unknown,
// so the answer is to retry with the same key, never "nothing was done".
func TestBeginErrorsProveNothing(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for name, err := range map[string]error{
		"a custom store's timeout": errors.New("mystore: request timed out"),
		"a cancelled context":      fmt.Errorf("mystore: begin: %w", context.Canceled),
		"a deadline":               fmt.Errorf("mystore: begin: %w", context.DeadlineExceeded),
		"an error of its SDK":      &types.InternalServerError{Message: aws.String("internal")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resp := answerTo(t, t0, err)
			p := wantProblem(t, resp, 503, "outcome-pending")
			if strings.Contains(strings.ToLower(p.Detail), "nothing was done") || !strings.Contains(p.Detail, "same key") || resp.Headers["Retry-After"] == "" {
				t.Fatalf("detail %q, Retry-After %q: want a retry with the same key, never \"nothing was done\"", p.Detail, resp.Headers["Retry-After"])
			}
		})
	}
}

// noExpiry is a custom Backend that gives no RecordExpiresAt.
type noExpiry struct{ idem.Backend }

func (n noExpiry) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	b, err := n.Backend.Begin(ctx, key, fp, intent)
	b.RecordExpiresAt = time.Time{}
	if b.Lease != nil {
		b.Lease.RecordExpiresAt = time.Time{}
	}
	return b, err
}

func (n noExpiry) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	err := n.Backend.Commit(ctx, l, resp, writes...)
	l.RecordExpiresAt = time.Time{}
	return err
}

// TestZeroRecordExpiresAt: a store that does not say when a record
// expires gets no Idempotency-Expires header, rather than year 1.
func TestZeroRecordExpiresAt(t *testing.T) {
	t.Parallel()
	handler := lambdaidem.HTTP(noExpiry{memstore.New()}, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{}`)}), nil
	})
	req := httpRequest("acme", idemtest.UniqueKey(t, "x").ClientKey(), `{}`)
	for i := range 2 {
		resp, err := handler(t.Context(), req)
		if err != nil || resp.StatusCode != 201 || (resp.Headers[lambdaidem.HeaderReplayed] == "true") != (i == 1) {
			t.Fatalf("call %d: %d %v, %v", i+1, resp.StatusCode, resp.Headers, err)
		}
		if h, ok := resp.Headers[lambdaidem.HeaderIdempotencyExpires]; ok {
			t.Fatalf("call %d: Idempotency-Expires %q, want none", i+1, h)
		}
	}
}
