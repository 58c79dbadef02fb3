package client

import (
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// chargeIn is the charge chargeID, authorized for 1999, in status with
// amount.
func chargeIn(status ChargeStatus, amount int64) Charge {
	return Charge{ID: chargeID, Amount: amount, AmountAuthorized: 1999, Currency: "EUR", Status: status,
		ProviderReference: "pr_1", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// ok200 answers 200 with ch, as the API writes it.
func ok200(ch Charge) reply {
	body := `{"id":"` + ch.ID + `","amount":` + strconv.FormatInt(ch.Amount, 10) +
		`,"amount_authorized":` + strconv.FormatInt(ch.AmountAuthorized, 10) + `,"currency":"EUR","status":"` + string(ch.Status) +
		`","provider_reference":"pr_1","created_at":"2025-01-02T03:04:05Z","amount_refunded":0}`
	return reply{http.StatusOK, map[string]string{"Content-Type": "application/json"}, body}
}

// stateConflict answers 409 charge-state-conflict for a charge in status.
func stateConflict(status ChargeStatus) reply {
	return reply{http.StatusConflict, map[string]string{"Content-Type": "application/problem+json"},
		`{"type":"` + ProblemBase + `charge-state-conflict","title":"The charge is in another state","status":409,"detail":"d","charge_status":"` + string(status) + `"}`}
}

var bare502 = reply{http.StatusBadGateway, map[string]string{"Content-Type": "application/json"}, `{"message":"Internal server error"}`}

// lost is an answer that never arrives: the request ran, then the
// connection dropped.
var lost = reply{}

// TestCaptureRepeatAfterALostAnswerGets200: the first capture ran but its
// answer was lost; Capture sends the same request again, with no key, and
// the repeat's 200 is the call's answer.
func TestCaptureRepeatAfterALostAnswerGets200(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]reply{"dropped connection": lost, "bare 502": bare502} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			c, s := newScripted(t, ft.options(0), first, ok200(chargeIn(StatusSucceeded, 1500)))
			ch, err := c.Capture(t.Context(), chargeID, WithCaptureAmount(1500))
			if err != nil || !reflect.DeepEqual(ch, chargeIn(StatusSucceeded, 1500)) || s.requests() != 2 {
				t.Fatalf("Capture: %+v, %v after %d requests; want the captured charge after 2", ch, err, s.requests())
			}
			for i := range s.paths {
				if s.paths[i] != "POST /charges/"+chargeID+"/capture" || s.bodies[i] != `{"amount":1500}` || s.keys[i] != "" || s.types[i] != "application/json" {
					t.Errorf("request %d: %s key %q body %s type %q; want the same capture each time, no key",
						i+1, s.paths[i], s.keys[i], s.bodies[i], s.types[i])
				}
			}
		})
	}
}

// TestCaptureOfAllSendsNoAmount: without WithCaptureAmount the body is {}
// (all the charge holds); WithCaptureAmount(0) sends 0, which the API
// refuses, rather than capturing everything.
func TestCaptureOfAllSendsNoAmount(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, ok200(chargeIn(StatusSucceeded, 1999)))
	if _, err := c.Capture(t.Context(), chargeID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capture(t.Context(), chargeID, WithCaptureAmount(0)); err != nil {
		t.Fatal(err)
	}
	if s.bodies[0] != `{}` || s.bodies[1] != `{"amount":0}` {
		t.Fatalf("bodies %q, want {} and {\"amount\":0}", s.bodies)
	}
}

// TestCancelSendsNoBodyAndNoKey: a cancel is its path alone.
func TestCancelSendsNoBodyAndNoKey(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, ok200(chargeIn(StatusCanceled, 1999)))
	ch, err := c.Cancel(t.Context(), chargeID)
	if err != nil || !reflect.DeepEqual(ch, chargeIn(StatusCanceled, 1999)) {
		t.Fatalf("Cancel: %+v, %v; want the canceled charge", ch, err)
	}
	if s.paths[0] != "POST /charges/"+chargeID+"/cancel" || s.bodies[0] != "" || s.types[0] != "" || s.keys[0] != "" {
		t.Fatalf("sent %s key %q body %q type %q; want no key, no body", s.paths[0], s.keys[0], s.bodies[0], s.types[0])
	}
}

// TestCaptureAndCancelRetryUnsettledAnswers: an answer that settles
// nothing (in progress, pending, throttled, busy) is retried with the same
// request, never sooner than Retry-After.
func TestCaptureAndCancelRetryUnsettledAnswers(t *testing.T) {
	t.Parallel()
	calls := map[string]func(*Client) (Charge, error){
		"capture": func(c *Client) (Charge, error) { return c.Capture(t.Context(), chargeID, WithCaptureAmount(1500)) },
		"cancel":  func(c *Client) (Charge, error) { return c.Cancel(t.Context(), chargeID) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			c, s := newScripted(t, ft.options(0),
				problemReply(http.StatusConflict, "request-in-progress", map[string]string{HeaderRetryAfter: "1"}),
				problemReply(http.StatusServiceUnavailable, "outcome-pending", map[string]string{HeaderRetryAfter: "2"}),
				reply{http.StatusTooManyRequests, map[string]string{"Content-Type": "application/json"}, `{"message":"Too Many Requests"}`},
				problemReply(http.StatusServiceUnavailable, "service-unavailable", map[string]string{HeaderRetryAfter: "1"}),
				ok200(chargeIn(StatusSucceeded, 1500)))
			if _, err := call(c); err != nil || s.requests() != 5 {
				t.Fatalf("err %v after %d requests; want the charge on attempt 5", err, s.requests())
			}
			want := []time.Duration{time.Second, 2 * time.Second, 0, time.Second}
			if len(ft.waits) != len(want) {
				t.Fatalf("waits %v, want %v", ft.waits, want)
			}
			for i := range want {
				if ft.waits[i] != want[i] || s.bodies[i+1] != s.bodies[0] || s.paths[i+1] != s.paths[0] {
					t.Errorf("retry %d: waited %v (want %v), sent %s %s (want %s %s)", i+1, ft.waits[i], want[i], s.paths[i+1], s.bodies[i+1], s.paths[0], s.bodies[0])
				}
			}
		})
	}
}

// TestStateConflictCarriesTheChargesStatus: a capture or a cancel the
// charge's state forbids is ErrChargeState, returned at once, with the
// status the answer's charge_status names.
func TestStateConflictCarriesTheChargesStatus(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		call func(*Client) (Charge, error)
		now  ChargeStatus
	}{
		"capture a canceled charge": {func(c *Client) (Charge, error) { return c.Capture(t.Context(), chargeID) }, StatusCanceled},
		"capture another amount":    {func(c *Client) (Charge, error) { return c.Capture(t.Context(), chargeID, WithCaptureAmount(700)) }, StatusSucceeded},
		"cancel a captured charge":  {func(c *Client) (Charge, error) { return c.Cancel(t.Context(), chargeID) }, StatusSucceeded},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, s := newScripted(t, nil, stateConflict(tc.now), ok200(chargeIn(StatusSucceeded, 1500)))
			_, err := tc.call(c)
			var p *ProblemError
			if !errors.Is(err, ErrChargeState) || !errors.As(err, &p) || p.ChargeStatus != tc.now || s.requests() != 1 {
				t.Fatalf("err = %v (%+v) after %d requests; want ErrChargeState with status %s after 1", err, p, s.requests(), tc.now)
			}
		})
	}
}

// TestCaptureAfterAnAmbiguousAttempt: a bare 502 may come after the
// capture ran. A later 503 provider-unavailable proves nothing about that
// attempt, so the error is ErrOutcomeUnknown, never ErrUnavailable
// ("nothing was captured"). A charge-state-conflict does prove it: had the
// first attempt captured, the same request would have been answered 200.
func TestCaptureAfterAnAmbiguousAttempt(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		later   reply
		want    error
		unknown bool
	}{
		"503 provider-unavailable":  {problemReply(http.StatusServiceUnavailable, "provider-unavailable", nil), ErrOutcomeUnknown, true},
		"409 charge-state-conflict": {stateConflict(StatusCanceled), ErrChargeState, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			c, _ := newScripted(t, append(ft.options(0), WithMaxAttempts(3)), bare502, tc.later)
			_, err := c.Capture(t.Context(), chargeID, WithCaptureAmount(1500))
			if !errors.Is(err, tc.want) || errors.Is(err, ErrOutcomeUnknown) != tc.unknown || errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v: %v %v, ErrOutcomeUnknown %v, ErrUnavailable %v; want ErrOutcomeUnknown %v, never ErrUnavailable",
					err, tc.want, errors.Is(err, tc.want), errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrUnavailable), tc.unknown)
			}
		})
	}
}

// TestCreateCaptureLaterAuthorizesOnly: WithCaptureLater sends
// "capture":false, and the 201's charge requires capture. Without it the
// body has no capture member, the same request as "capture":true.
func TestCreateCaptureLaterAuthorizesOnly(t *testing.T) {
	t.Parallel()
	authorized := created(false)
	authorized.body = ok200(chargeIn(StatusRequiresCapture, 1999)).body
	c, s := newScripted(t, nil, authorized)
	res, err := c.Create(t.Context(), NewCommandID(), Money{Amount: 1999, Currency: "EUR"}, "tok_visa", WithCaptureLater())
	if err != nil || !reflect.DeepEqual(res.Charge, chargeIn(StatusRequiresCapture, 1999)) {
		t.Fatalf("Create: %+v, %v; want the authorized charge", res.Charge, err)
	}
	if want := `{"amount":1999,"currency":"EUR","source":"tok_visa","capture":false}`; s.bodies[0] != want {
		t.Fatalf("body %s, want %s", s.bodies[0], want)
	}
}
