package stripesim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// AuthorizationWindow is how long Stripe holds an uncaptured card
// authorization before it cancels the PaymentIntent: seven days.
const AuthorizationWindow = 7 * 24 * time.Hour

// cancelable are the statuses a PaymentIntent may be canceled from.
var cancelable = map[string]bool{
	"requires_payment_method": true, "requires_capture": true, "requires_confirmation": true, "requires_action": true,
}

func (s *Simulator) handleCapture(w http.ResponseWriter, r *http.Request) {
	s.handleChange(w, r, "capture", s.capture)
}

func (s *Simulator) handleCancel(w http.ResponseWriter, r *http.Request) {
	s.handleChange(w, r, "cancel", s.cancel)
}

// handleChange runs a capture or a cancel (op) of a PaymentIntent under
// the simulator's lock. A key Stripe holds answers as for a create; the
// fingerprint names the endpoint and the PaymentIntent. A refused change
// saves nothing under its key, as a refused refund.
func (s *Simulator) handleChange(w http.ResponseWriter, r *http.Request, op string, change func(pi *intent, form map[string][]string, now time.Time) *apiError) {
	if err := r.ParseForm(); err != nil {
		s.writeError(w, r, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "Invalid request body."})
		return
	}
	idemKey, id := r.Header.Get("Idempotency-Key"), r.PathValue("id")
	code, body, replayed := func() (int, []byte, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.opts.Clock()
		fp := "POST /v1/payment_intents/" + id + "/" + op + ";" + fingerprint(r.PostForm)
		if code, body, replayed, held := s.held(idemKey, fp, now); held {
			return code, body, replayed
		}
		pi := s.intents[id]
		if pi == nil {
			return http.StatusNotFound, errorBody(apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "intent",
				Message: fmt.Sprintf("No such payment_intent: '%s'", id)}), false
		}
		if refused := change(pi, r.PostForm, now); refused != nil {
			return http.StatusBadRequest, errorBody(*refused), false
		}
		s.hooks.settled(pi, now)
		body := mustJSON(pi)
		if idemKey != "" {
			s.keys[idemKey] = &key{fingerprint: fp, firstUsed: now, status: http.StatusOK, body: body}
		}
		return http.StatusOK, body, false
	}()
	s.writeIdempotent(w, r, idemKey, code, body, replayed)
}

// capture captures amount_to_capture (all that is held by default) of an
// authorized pi, or returns Stripe's refusal. The caller holds the lock.
func (s *Simulator) capture(pi *intent, form map[string][]string, _ time.Time) *apiError {
	if pi.Status != "requires_capture" {
		return unexpectedState(pi, fmt.Sprintf("This PaymentIntent could not be captured because it has a status of %s.", pi.Status))
	}
	amount := pi.AmountCapturable
	if v := first(form, "amount_to_capture"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return &apiError{Type: "invalid_request_error", Code: "parameter_invalid", Param: "amount_to_capture", Message: "Amount must be a positive integer."}
		}
		amount = n
	}
	if amount > pi.AmountCapturable {
		return &apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount_to_capture",
			Message: fmt.Sprintf("The amount to capture (%d) is greater than the amount capturable (%d).", amount, pi.AmountCapturable)}
	}
	pi.Status, pi.AmountReceived, pi.AmountCapturable = "succeeded", amount, 0
	pi.captures++
	return nil
}

// cancel cancels pi, or returns Stripe's refusal. The caller holds the
// lock.
func (s *Simulator) cancel(pi *intent, form map[string][]string, now time.Time) *apiError {
	if !cancelable[pi.Status] {
		return unexpectedState(pi, fmt.Sprintf("You cannot cancel this PaymentIntent because it has a status of %s.", pi.Status))
	}
	cancelIntent(pi, first(form, "cancellation_reason"), now)
	return nil
}

func cancelIntent(pi *intent, reason string, now time.Time) {
	pi.Status, pi.AmountCapturable, pi.CanceledAt, pi.CancellationReason = "canceled", 0, now.Unix(), reason
}

func unexpectedState(pi *intent, message string) *apiError {
	snapshot := *pi
	return &apiError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state", Message: message, PaymentIntent: &snapshot}
}

// expire cancels every authorization AuthorizationWindow old at now, as
// Stripe does, with the reason "automatic". The simulator notices the
// time at each request, and in Ledger. The caller holds the lock.
func (s *Simulator) expire(now time.Time) {
	for _, pi := range s.order {
		if pi.Status == "requires_capture" && !now.Before(pi.createdAt.Add(AuthorizationWindow)) {
			cancelIntent(pi, "automatic", now)
			s.hooks.settled(pi, now)
		}
	}
}
