package stripesim

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// refund is a stored Refund.
type refund struct {
	Object        string            `json:"object"`
	ID            string            `json:"id"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	PaymentIntent string            `json:"payment_intent"`
	Charge        string            `json:"charge"`
	Metadata      map[string]string `json:"metadata"`
	FailureReason string            `json:"failure_reason,omitempty"`
	Created       int64             `json:"created"`

	idempotencyKey string
}

// refunds reports whether r still takes money back. A failed or canceled
// refund returns its amount to what the charge has left to refund.
func (r *refund) refunds() bool { return r.Status != "failed" && r.Status != "canceled" }

// charge is a Charge as webhook events carry it, with its refunds.
type charge struct {
	Object         string      `json:"object"`
	ID             string      `json:"id"`
	Amount         int64       `json:"amount"`
	AmountRefunded int64       `json:"amount_refunded"`
	Currency       string      `json:"currency"`
	PaymentIntent  string      `json:"payment_intent"`
	Refunded       bool        `json:"refunded"`
	Status         string      `json:"status"`
	Refunds        *refundList `json:"refunds"`
}

type refundList struct {
	Object  string    `json:"object"`
	URL     string    `json:"url"`
	HasMore bool      `json:"has_more"`
	Data    []*refund `json:"data"`
}

// Refund list limits, as Stripe's.
const (
	defaultListLimit = 10
	maxListLimit     = 100
)

func (s *Simulator) handleRefund(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.writeError(w, r, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "Invalid request body."})
		return
	}
	idemKey := r.Header.Get("Idempotency-Key")
	code, body, replayed := s.createRefund(idemKey, r.PostForm)
	s.writeIdempotent(w, r, idemKey, code, body, replayed)
}

// createRefund runs a refund request under the simulator's lock. A key
// Stripe holds answers as for PaymentIntents. The fingerprint names the
// endpoint, so a key first used for a charge is refused. A refused refund
// saves nothing under its key.
func (s *Simulator) createRefund(idemKey string, form map[string][]string) (int, []byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock()
	fp := "POST /v1/refunds;" + fingerprint(form)
	if code, body, replayed, held := s.held(idemKey, fp, now); held {
		return code, body, replayed
	}
	rf, pi, refused := s.newRefund(form, now)
	if refused != nil {
		return http.StatusBadRequest, errorBody(*refused), false
	}
	rf.idempotencyKey = idemKey
	s.refunds = append(s.refunds, rf)
	body := mustJSON(rf)
	if idemKey != "" {
		s.keys[idemKey] = &key{fingerprint: fp, firstUsed: now, status: http.StatusOK, body: body}
	}
	s.hooks.refunded(rf, s.chargeOf(pi), now)
	return http.StatusOK, body, false
}

// newRefund validates a refund request into a Refund of its PaymentIntent.
// Or it returns the error Stripe would answer. A refund needs a succeeded
// PaymentIntent. It never takes back more than the PaymentIntent has left.
// The caller holds the lock.
func (s *Simulator) newRefund(form map[string][]string, now time.Time) (*refund, *intent, *apiError) {
	id := first(form, "payment_intent")
	pi := s.intents[id]
	switch {
	case id == "":
		return nil, nil, &apiError{Type: "invalid_request_error", Code: "parameter_missing", Param: "payment_intent",
			Message: "This simulator refunds by payment_intent only."}
	case pi == nil:
		return nil, nil, &apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "payment_intent",
			Message: fmt.Sprintf("No such payment_intent: '%s'", id)}
	case pi.Status != "succeeded":
		return nil, nil, &apiError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state", Param: "payment_intent",
			Message: "This PaymentIntent does not have a successful charge to refund."}
	}
	left := pi.AmountReceived - s.refundedOf(pi.ID)
	amount := left
	if v := first(form, "amount"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return nil, nil, &apiError{Type: "invalid_request_error", Code: "parameter_invalid", Param: "amount",
				Message: "Amount must be a positive integer."}
		}
		amount = n
	}
	switch {
	case left == 0:
		return nil, nil, &apiError{Type: "invalid_request_error", Code: "charge_already_refunded",
			Message: fmt.Sprintf("Charge %s has already been refunded.", pi.LatestCharge)}
	case amount > left:
		return nil, nil, &apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, left)}
	}
	return &refund{
		Object: "refund", ID: newID("re_"), Amount: amount, Currency: pi.Currency, Status: "succeeded",
		PaymentIntent: pi.ID, Charge: pi.LatestCharge, Metadata: metadata(form), Created: now.Unix(),
	}, pi, nil
}

// refundedOf sums the refunds of the PaymentIntent id that take money
// back. The caller holds the lock.
func (s *Simulator) refundedOf(id string) int64 {
	var sum int64
	for _, rf := range s.refunds {
		if rf.PaymentIntent == id && rf.refunds() {
			sum += rf.Amount
		}
	}
	return sum
}

// chargeOf is pi's charge with its refunds, newest first. The caller holds
// the lock.
func (s *Simulator) chargeOf(pi *intent) *charge {
	c := &charge{Object: "charge", ID: pi.LatestCharge, Amount: pi.Amount, AmountRefunded: s.refundedOf(pi.ID),
		Currency: pi.Currency, PaymentIntent: pi.ID, Status: "succeeded",
		Refunds: &refundList{Object: "list", URL: "/v1/charges/" + pi.LatestCharge + "/refunds", Data: []*refund{}}}
	c.Refunded = c.AmountRefunded == pi.AmountReceived
	for _, rf := range slices.Backward(s.refunds) {
		if rf.PaymentIntent == pi.ID {
			snapshot := *rf
			c.Refunds.Data = append(c.Refunds.Data, &snapshot)
		}
	}
	return c
}

// handleListRefunds lists refunds newest first, of one PaymentIntent if
// payment_intent says so, a page of limit at a time after starting_after.
func (s *Simulator) handleListRefunds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			s.writeError(w, r, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid", Param: "limit",
				Message: "Limit must be an integer from 1 to 100."})
			return
		}
		limit = n
	}
	s.mu.Lock()
	data := []*refund{}
	for _, rf := range slices.Backward(s.refunds) {
		if pi := q.Get("payment_intent"); pi == "" || rf.PaymentIntent == pi {
			data = append(data, rf)
		}
	}
	if after := q.Get("starting_after"); after != "" {
		i := slices.IndexFunc(data, func(rf *refund) bool { return rf.ID == after })
		data = data[i+1:] // -1 when unknown: the whole list
	}
	page := refundList{Object: "list", URL: "/v1/refunds", HasMore: len(data) > limit, Data: data[:min(limit, len(data))]}
	body := mustJSON(page)
	s.mu.Unlock()
	s.write(w, r, http.StatusOK, body)
}

// Refunded counts the Refunds created under the idempotency key, failed
// ones included: more than one means a refund was duplicated.
func (s *Simulator) Refunded(idempotencyKey string) int {
	return s.countRefunds(idempotencyKey, func(*refund) bool { return true })
}

// RefundsFailed counts the Refunds created under the idempotency key that
// failed since (FailRefunds): each returned its amount.
func (s *Simulator) RefundsFailed(idempotencyKey string) int {
	return s.countRefunds(idempotencyKey, func(rf *refund) bool { return rf.Status == "failed" })
}

// countRefunds counts the Refunds created under the idempotency key that
// match.
func (s *Simulator) countRefunds(idempotencyKey string, match func(*refund) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rf := range s.refunds {
		if rf.idempotencyKey == idempotencyKey && match(rf) {
			n++
		}
	}
	return n
}

// RefundedAmount sums the refunds of the PaymentIntent id that take money
// back: never more than its amount.
func (s *Simulator) RefundedAmount(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refundedOf(id)
}

// FailRefunds fails every refund of a PMRefundFail PaymentIntent that has
// not failed yet. It acts as the card's issuer returning it. Its amount may
// be refunded again.
func (s *Simulator) FailRefunds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock()
	n := 0
	for _, rf := range s.refunds {
		if pi := s.intents[rf.PaymentIntent]; pi.PaymentMethod == PMRefundFail && rf.refunds() {
			rf.Status, rf.FailureReason = "failed", "expired_or_canceled_card"
			s.hooks.refundFailed(rf, now)
			n++
		}
	}
	return n
}
