package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestEarlierAmbiguousAttemptIsNotForgotten: Create's error is only
// its last answer's. When an earlier attempt's outcome was unknown (a bare
// 5xx from the gateway, a dropped connection after the request left), a
// later answer that proves nothing about that earlier attempt (503
// provider-unavailable, a gateway 429, a gateway 401) must not make the
// call's error say that nothing was charged / that the failure is final.
func TestEarlierAmbiguousAttemptIsNotForgotten(t *testing.T) {
	t.Parallel()
	for name, later := range map[string]reply{
		"503 provider-unavailable": problemReply(http.StatusServiceUnavailable, "provider-unavailable", nil),
		"503 service-unavailable":  problemReply(http.StatusServiceUnavailable, "service-unavailable", nil),
		"bare 429":                 {http.StatusTooManyRequests, map[string]string{"Content-Type": "application/json"}, `{"message":"Too Many Requests"}`},
	} {
		t.Run("bare 502, then "+name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			c, _ := newScripted(t, append(ft.options(0), WithMaxAttempts(2)),
				reply{http.StatusBadGateway, map[string]string{"Content-Type": "application/json"}, `{"message":"Internal server error"}`},
				later)
			_, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
			if errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("err = %v: ErrUnavailable %v, ErrOutcomeUnknown %v; want ErrOutcomeUnknown, not ErrUnavailable (the first attempt may have charged)",
					err, errors.Is(err, ErrUnavailable), errors.Is(err, ErrOutcomeUnknown))
			}
		})
		t.Run("network error, then "+name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			s := &scripted{replies: []reply{later}}
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			hc := &http.Client{Transport: &dropping{n: 1, rt: srv.Client().Transport}}
			c, err := New(srv.URL, append(ft.options(0), WithHTTPClient(hc), WithMaxAttempts(2))...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
			if errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("err = %v: ErrUnavailable %v, ErrOutcomeUnknown %v; want ErrOutcomeUnknown, not ErrUnavailable (the first attempt may have charged)",
					err, errors.Is(err, ErrUnavailable), errors.Is(err, ErrOutcomeUnknown))
			}
		})
	}
	// A token that expires during the retries: the last answer is the
	// gateway's 401, a final answer, after an attempt that may have charged.
	t.Run("bare 504, then gateway 401", func(t *testing.T) {
		t.Parallel()
		ft := &fakeTime{now: time.Now()}
		c, _ := newScripted(t, append(ft.options(0), WithMaxAttempts(2)),
			reply{http.StatusGatewayTimeout, map[string]string{"Content-Type": "application/json"}, `{"message":"Endpoint request timed out"}`},
			reply{http.StatusUnauthorized, map[string]string{"Content-Type": "application/json"}, `{"message":"Unauthorized"}`})
		_, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("err = %v: ErrUnauthorized %v, ErrOutcomeUnknown %v; want ErrOutcomeUnknown (the first attempt may have charged)",
				err, errors.Is(err, ErrUnauthorized), errors.Is(err, ErrOutcomeUnknown))
		}
	})
}

// TestA201ThatDoesNotDecodeIsUnknown: a 201 proves the card was
// charged. If its body or its Idempotency-Expires cannot be read, the
// error must at least say the outcome is unknown (retry with the same id),
// not match no sentinel at all (which a caller's switch treats as final).
func TestA201ThatDoesNotDecodeIsUnknown(t *testing.T) {
	t.Parallel()
	badBody := created(false)
	badBody.body = `<html>charged</html>`
	badExpires := created(false)
	badExpires.header = map[string]string{"Content-Type": "application/json", HeaderIdempotencyExpires: "tomorrow"}
	for name, r := range map[string]reply{"body": badBody, "Idempotency-Expires": badExpires} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, _ := newScripted(t, nil, r)
			_, err := c.Create(context.Background(), NewCommandID(), eur1500, "tok_visa")
			if err == nil || !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("a 201 that does not decode: err = %v, ErrOutcomeUnknown %v; want ErrOutcomeUnknown (the card was charged)", err, errors.Is(err, ErrOutcomeUnknown))
			}
		})
	}
}

// TestServiceSaidMaybeIsNotForgotten: a 503 outcome-pending or a 409
// request-in-progress is the service saying that the command may have
// run, or may still run. A later 503 service-unavailable (a throttled
// claim) proves only that its own attempt did nothing, so the call's
// error must match ErrOutcomeUnknown, never ErrUnavailable: a caller
// that believed "nothing was charged" and minted a new id would charge
// (or refund) twice.
func TestServiceSaidMaybeIsNotForgotten(t *testing.T) {
	t.Parallel()
	calls := map[string]func(*Client) error{
		"create": func(c *Client) error {
			_, err := c.Create(t.Context(), NewCommandID(), eur1500, "tok_visa")
			return err
		},
		"refund": func(c *Client) error {
			_, err := c.Refund(t.Context(), chargeID, NewCommandID())
			return err
		},
		"capture": func(c *Client) error {
			_, err := c.Capture(t.Context(), chargeID)
			return err
		},
	}
	firsts := map[string]reply{
		"503 outcome-pending":     problemReply(http.StatusServiceUnavailable, "outcome-pending", nil),
		"409 request-in-progress": problemReply(http.StatusConflict, "request-in-progress", nil),
	}
	throttled := problemReply(http.StatusServiceUnavailable, "service-unavailable", nil)
	for call, do := range calls {
		for first, r := range firsts {
			t.Run(call+": "+first+", then 503 service-unavailable", func(t *testing.T) {
				t.Parallel()
				ft := &fakeTime{now: time.Now()}
				c, s := newScripted(t, append(ft.options(0), WithMaxAttempts(2)), r, throttled)
				err := do(c)
				if s.requests() != 2 {
					t.Fatalf("%d requests, want 2", s.requests())
				}
				if errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrOutcomeUnknown) {
					t.Fatalf("err = %v: ErrUnavailable %v, ErrOutcomeUnknown %v; want ErrOutcomeUnknown, not ErrUnavailable (the first attempt said the command may have run)",
						err, errors.Is(err, ErrUnavailable), errors.Is(err, ErrOutcomeUnknown))
				}
			})
		}
	}
}

// TestOnlyARefusalProvesNothingRan: which retried answers leave a later
// 503 service-unavailable matching ErrOutcomeUnknown. Only a refusal
// proves that its attempt did nothing: 503 provider-unavailable or
// service-unavailable, a gateway 429 or a 429 rate-limited, a refund held
// back by the refunds in flight. Any other answer, one the client does not know included,
// may have come after the command ran.
func TestOnlyARefusalProvesNothingRan(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		first   reply
		unknown bool
	}{
		"500 internal-error":        {problemReply(http.StatusInternalServerError, "internal-error", nil), true},
		"409 of an unknown type":    {problemReply(http.StatusConflict, "some-new-conflict", nil), true},
		"503 provider-unavailable":  {problemReply(http.StatusServiceUnavailable, "provider-unavailable", nil), false},
		"503 service-unavailable":   {problemReply(http.StatusServiceUnavailable, "service-unavailable", nil), false},
		"bare 429":                  {reply{http.StatusTooManyRequests, map[string]string{"Content-Type": "application/json"}, `{"message":"Too Many Requests"}`}, false},
		"429 rate-limited":          {problemReply(http.StatusTooManyRequests, "rate-limited", map[string]string{HeaderRetryAfter: "1"}), false},
		"409 refund-exceeds, 2s on": {problemReply(http.StatusConflict, "refund-exceeds-charge", map[string]string{HeaderRetryAfter: "2"}), false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			c, _ := newScripted(t, append(ft.options(0), WithMaxAttempts(2)),
				tc.first, problemReply(http.StatusServiceUnavailable, "service-unavailable", nil))
			_, err := c.Refund(t.Context(), chargeID, NewCommandID())
			if errors.Is(err, ErrOutcomeUnknown) != tc.unknown || errors.Is(err, ErrUnavailable) == tc.unknown {
				t.Fatalf("err = %v: ErrOutcomeUnknown %v, ErrUnavailable %v; want ErrOutcomeUnknown %v",
					err, errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrUnavailable), tc.unknown)
			}
		})
	}
}
