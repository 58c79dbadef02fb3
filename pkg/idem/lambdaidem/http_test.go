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

// throttledAfterInFlight is a Backend whose Begin, once it has told a
// caller that another attempt holds the key (ErrInFlight), is throttled
// (ErrUnavailable) on the caller's next claim: DynamoDB under load.
type throttledAfterInFlight struct {
	idem.Backend
	sawInFlight atomic.Bool
}

func (s *throttledAfterInFlight) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if s.sawInFlight.Load() {
		return idem.Begun{}, fmt.Errorf("mystore: begin: throttled: %w", idem.ErrUnavailable)
	}
	b, err := s.Backend.Begin(ctx, key, fp, intent)
	if errors.Is(err, idem.ErrInFlight) {
		s.sawInFlight.Store(true)
	}
	return b, err
}

// TestWaitThenThrottledIsInProgress: a retry that, waiting
// (Options.Wait), found the key held by the first attempt, whose outcome
// is unknown, and then met a throttled claim, is told "nothing was done".
// But Do saw proof of the opposite: an attempt with this key ran and may
// have carried the request out. The answer must not be
// service-unavailable, "this request was not carried out".
func TestWaitThenThrottledIsInProgress(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	s := &throttledAfterInFlight{Backend: inner}
	var runs atomic.Int32
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Unknown(idem.Response{}), errors.New("provider timed out: the charge may have gone through")
	}, func(o *lambdaidem.Options) { o.Wait = 2 * time.Second })
	key := idemtest.UniqueKey(t, "x").ClientKey()
	first, err := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if err != nil || first.StatusCode != 503 || !strings.Contains(first.Body, "outcome-pending") {
		t.Fatalf("first: %d %s, %v; want 503 outcome-pending", first.StatusCode, first.Body, err)
	}
	retry, err := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if err != nil || runs.Load() != 1 {
		t.Fatalf("retry: %v, %d runs", err, runs.Load())
	}
	if strings.Contains(retry.Body, "service-unavailable") || strings.Contains(strings.ToLower(retry.Body), "nothing was done") {
		t.Fatalf("retry of a request whose first attempt may have charged: %d %s\nwant 409 or outcome-pending, never \"nothing was done\"", retry.StatusCode, retry.Body)
	}
}

// TestPassedExpiryIsLeftOut: a key whose first attempt left
// its outcome unknown stays IN_FLIGHT, and deduplicates, until a
// reconciler settles it (recovery.md: "an hour or two days later too").
// v1 now sends Idempotency-Expires on the 409 from the InFlightError's
// RecordExpiresAt, the earliest retention could end had the command been
// settled when its lease ended. A day later that is a date in the past,
// on an answer that proves the key still deduplicates.
func TestPassedExpiryIsLeftOut(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		return idem.Unknown(idem.Response{}), errors.New("provider timed out")
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	if first, _ := handler(t.Context(), httpRequest("acme", key, `{}`)); first.StatusCode != 503 {
		t.Fatalf("first: %d %s", first.StatusCode, first.Body)
	}
	clock.Advance(25 * time.Hour) // the reconciler has not run yet
	retry, _ := handler(t.Context(), httpRequest("acme", key, `{}`))
	if retry.StatusCode != 409 {
		t.Fatalf("retry: %d %s; want 409", retry.StatusCode, retry.Body)
	}
	if h, ok := retry.Headers[lambdaidem.HeaderIdempotencyExpires]; ok {
		at, err := time.Parse(http.TimeFormat, h)
		if err != nil || !at.After(clock.Now()) {
			t.Fatalf("409 with Idempotency-Expires %q at %s: the key still deduplicates, but the header says it stopped", h, clock.Now().Format(http.TimeFormat))
		}
	}
}

// plainBegin is a custom Backend as backend.go allows one ("Return the
// sentinels of this package, wrapped or not, or its typed errors:
// callers test them with errors.Is alone"): its Begin gives ErrMismatch
// and ErrInFlight as plain sentinels, as pkg/idem's own
// plain_conformance_test wrapper does (and passes the suite).
type plainBegin struct{ idem.Backend }

func (p plainBegin) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	b, err := p.Backend.Begin(ctx, key, fp, intent)
	for _, s := range []error{idem.ErrMismatch, idem.ErrInFlight} {
		if errors.Is(err, s) {
			return b, fmt.Errorf("plain store: %w", s)
		}
	}
	return b, err
}

// TestHTTPPlainSentinels: a key reused with another request is
// 422 idempotency-key-reused, and a key in flight 409 request-in-progress,
// whichever conforming Backend says so.
func TestHTTPPlainSentinels(t *testing.T) {
	t.Parallel()
	store := plainBegin{memstore.New()}
	handler := lambdaidem.HTTP(store, "create-order", func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		if req.Body == `{"item":"timeout"}` {
			return idem.Unknown(idem.Response{}), nil
		}
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{}`)}), nil
	})
	ctx := t.Context()
	key := idemtest.UniqueKey(t, "x").ClientKey()
	if first, err := handler(ctx, httpRequest("acme", key, `{"item":"book"}`)); err != nil || first.StatusCode != 201 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	reused, _ := handler(ctx, httpRequest("acme", key, `{"item":"pen"}`))
	if reused.StatusCode != 422 {
		t.Errorf("key reused with another request through a plain-sentinel Backend: %d %s; want 422 idempotency-key-reused", reused.StatusCode, reused.Body)
	}
	_, _ = handler(ctx, httpRequest("acme", key+"-t", `{"item":"timeout"}`))
	pending, _ := handler(ctx, httpRequest("acme", key+"-t", `{"item":"timeout"}`))
	if pending.StatusCode != 409 {
		t.Errorf("key in flight through a plain-sentinel Backend: %d %s; want 409 request-in-progress", pending.StatusCode, pending.Body)
	}
}

// unknownBegin is a conforming Backend whose claim landed but whose answer
// was lost: it writes the record, then says ErrUnknownClaim, plain (as the
// suite's plain-sentinel wrapper would give it).
type unknownBegin struct{ idem.Backend }

func (u unknownBegin) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if _, err := u.Backend.Begin(ctx, key, fp, intent); err != nil {
		return idem.Begun{}, err
	}
	return idem.Begun{}, fmt.Errorf("plain store: %w", idem.ErrUnknownClaim)
}

// TestHTTPPlainUnknownClaim: backend.go, "An error wrapping
// ErrUnavailable proves that no record was written: only then may a
// caller answer 'nothing was done'". A claim that landed, reported as
// ErrUnknownClaim, must not be answered "Service temporarily unavailable;
// nothing was done".
func TestHTTPPlainUnknownClaim(t *testing.T) {
	t.Parallel()
	handler := lambdaidem.HTTP(unknownBegin{memstore.New()}, "create-order", func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{}`)}), nil
	})
	resp, _ := handler(t.Context(), httpRequest("acme", idemtest.UniqueKey(t, "x").ClientKey(), `{"item":"book"}`))
	if resp.StatusCode == 503 && strings.Contains(resp.Body, "nothing was done") {
		t.Fatalf("a claim that landed (ErrUnknownClaim): %d %s", resp.StatusCode, resp.Body)
	}
}

// throttledBegin is a Backend whose Begin is throttled once on is set.
type throttledBegin struct {
	idem.Backend
	on atomic.Bool
}

func (s *throttledBegin) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	if s.on.Load() {
		return idem.Begun{}, fmt.Errorf("mystore: begin: throttled: %w", idem.ErrUnavailable)
	}
	return s.Backend.Begin(ctx, key, fp, intent)
}

// TestThrottledRetryTitleClaimsNothing: the CHANGELOG says
// "The throttled answer no longer says 'nothing was done'", and only the
// detail changed: the problem's title is still "Service temporarily
// unavailable; nothing was done". A retry of a request that was carried
// out (201, the order created) whose claim is throttled is told nothing
// was done.
func TestThrottledRetryTitleClaimsNothing(t *testing.T) {
	t.Parallel()
	s := &throttledBegin{Backend: memstore.New()}
	var runs atomic.Int32
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"order":"o-1"}`)}), nil
	})
	key := idemtest.UniqueKey(t, "x").ClientKey()
	first, _ := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if first.StatusCode != 201 {
		t.Fatalf("first: %d %s", first.StatusCode, first.Body)
	}
	s.on.Store(true)
	retry, _ := handler(t.Context(), httpRequest("acme", key, `{"amount":100}`))
	if strings.Contains(strings.ToLower(retry.Body), "nothing was done") {
		t.Fatalf("retry of a request that was carried out (%d runs): %d %s; says \"nothing was done\"", runs.Load(), retry.StatusCode, retry.Body)
	}
}

// TestOnWaitMayRefuseTheWait: Options.OnWait and SQSOptions.OnWait reach
// idem.Do. Refused, a request for a key in progress answers 409 at once,
// and a message is reported for redelivery at once. Neither runs.
func TestOnWaitMayRefuseTheWait(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs, waits atomic.Int32
	refuse := func(context.Context, idem.Key) bool { waits.Add(1); return false }
	key := idemtest.UniqueKey(t, "x").ClientKey()
	handler := lambdaidem.HTTP(s, "create-order", func(context.Context, events.APIGatewayV2HTTPRequest, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Outcome{}, errors.New("crashed") // the record stays IN_FLIGHT
	}, func(o *lambdaidem.Options) { o.Wait, o.OnWait = 5*time.Second, refuse })
	if _, err := handler(t.Context(), httpRequest("acme", key, `{}`)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := handler(t.Context(), httpRequest("acme", key, `{}`))
	if took := time.Since(start); err != nil || resp.StatusCode != http.StatusConflict || took > time.Second || runs.Load() != 1 || waits.Load() != 1 {
		t.Fatalf("a twin refused its wait: %d %s, %v, took %v, %d runs, told %d times; want 409 at once, one run, told once", resp.StatusCode, resp.Body, err, took, runs.Load(), waits.Load())
	}

	msg := sqsMessage(idemtest.UniqueKey(t, "x").ClientKey(), "", `{"order":"o-1"}`)
	sqs := lambdaidem.SQS(s, "fulfil", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Outcome{}, errors.New("crashed")
	}, func(o *lambdaidem.SQSOptions) { o.Wait, o.OnWait = 5*time.Second, refuse })
	batch := events.SQSEvent{Records: []events.SQSMessage{msg}}
	if _, err := sqs(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	out, err := sqs(t.Context(), batch)
	if took := time.Since(start); err != nil || len(out.BatchItemFailures) != 1 || took > time.Second || runs.Load() != 2 || waits.Load() != 2 {
		t.Fatalf("a redelivery refused its wait: %q, %v, took %v, %d runs, told %d times; want reported at once, two runs in all, told twice", failures(out), err, took, runs.Load(), waits.Load())
	}
}
