package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

const refundBody = `{"id":"re_0123456789abcdef01234567","charge_id":"ch_0123456789abcdef01234567","amount":500,"currency":"EUR","reason":"duplicate","status":"succeeded","provider_reference":"rf_1","created_at":"2025-01-02T03:04:05Z"}`

func refunded(replayed bool) reply {
	r := created(replayed)
	r.header["Location"] = "/charges/ch_0123456789abcdef01234567/refunds/re_0123456789abcdef01234567"
	r.body = refundBody
	return r
}

const chargeID = "ch_0123456789abcdef01234567"

// TestRefundReplaysTheStoredRefund: a second Refund with the same id gets
// the first one's refund, replayed, from the same request bytes.
func TestRefundReplaysTheStoredRefund(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, refunded(false), refunded(true))
	id := NewCommandID()
	opts := []RefundOption{WithRefundAmount(500), WithRefundReason(ReasonDuplicate)}
	first, err := c.Refund(t.Context(), chargeID, id, opts...)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Refund(t.Context(), chargeID, id, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || !again.Replayed || again.Refund != first.Refund || first.Attempts != 1 {
		t.Fatalf("first %+v, again %+v: want the same refund, replayed the second time", first, again)
	}
	want := Refund{ID: "re_0123456789abcdef01234567", ChargeID: chargeID, Amount: 500, Currency: "EUR", Reason: ReasonDuplicate,
		Status: "succeeded", ProviderReference: "rf_1", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	if first.Refund != want {
		t.Errorf("refund %+v, want %+v", first.Refund, want)
	}
	if want := time.Date(2025, 1, 3, 3, 4, 5, 0, time.UTC); !again.KeyExpiresAt.Equal(want) {
		t.Errorf("KeyExpiresAt = %v, want %v", again.KeyExpiresAt, want)
	}
	for i := range s.keys {
		if s.keys[i] != string(id) || s.bodies[i] != `{"amount":500,"reason":"duplicate"}` || s.paths[i] != "POST /charges/"+chargeID+"/refunds" {
			t.Errorf("request %d: %s key %q body %s", i+1, s.paths[i], s.keys[i], s.bodies[i])
		}
	}
}

// TestRefundOfAllThatRemainsSendsNoAmount: without WithRefundAmount the
// body has no amount (all that remains); WithRefundAmount(0) sends 0,
// which the API refuses, rather than refunding everything.
func TestRefundOfAllThatRemainsSendsNoAmount(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, refunded(false))
	if _, err := c.Refund(t.Context(), chargeID, NewCommandID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refund(t.Context(), chargeID, NewCommandID(), WithRefundAmount(0)); err != nil {
		t.Fatal(err)
	}
	if s.bodies[0] != `{}` || s.bodies[1] != `{"amount":0}` {
		t.Fatalf("bodies %q, want {} and {\"amount\":0}", s.bodies)
	}
}

// TestRefundRetriesReuseTheID: every retry inside Refund sends the
// caller's id and the same body bytes.
func TestRefundRetriesReuseTheID(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{now: time.Now()}
	c, s := newScripted(t, ft.options(0.5),
		reply{http.StatusBadGateway, nil, "bad gateway"},
		problemReply(http.StatusConflict, "request-in-progress", map[string]string{HeaderRetryAfter: "1"}),
		problemReply(http.StatusServiceUnavailable, "outcome-pending", map[string]string{HeaderRetryAfter: "1"}),
		refunded(true))
	id := NewCommandID()
	res, err := c.Refund(t.Context(), chargeID, id, WithRefundReason(ReasonFraudulent))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 4 || !res.Replayed {
		t.Fatalf("result %+v, want a replay after 4 attempts", res)
	}
	for i := range s.keys {
		if s.keys[i] != string(id) || s.bodies[i] != `{"reason":"fraudulent"}` {
			t.Errorf("attempt %d sent key %q body %s, want %q {\"reason\":\"fraudulent\"}", i+1, s.keys[i], s.bodies[i], id)
		}
	}
}

// TestRefundExceedingTheChargeIsFinalWithoutRetryAfter: without
// Retry-After the answer is final for the id (not retried, RetryAfter 0);
// with it, other refunds were in flight, so Refund retries, and if it
// gives up the error's RetryAfter says a later retry may succeed.
func TestRefundExceedingTheChargeIsFinalWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("final", func(t *testing.T) {
		t.Parallel()
		ft := &fakeTime{now: time.Now()}
		c, s := newScripted(t, ft.options(0), problemReply(http.StatusConflict, "refund-exceeds-charge", nil), refunded(false))
		_, err := c.Refund(t.Context(), chargeID, NewCommandID(), WithRefundAmount(5000))
		var p *ProblemError
		if !errors.Is(err, ErrRefundExceedsCharge) || !errors.As(err, &p) || p.RetryAfter != 0 || s.requests() != 1 {
			t.Fatalf("err = %v after %d requests; want ErrRefundExceedsCharge, RetryAfter 0, after 1", err, s.requests())
		}
	})
	t.Run("in flight, then refunded", func(t *testing.T) {
		t.Parallel()
		ft := &fakeTime{now: time.Now()}
		c, s := newScripted(t, ft.options(0),
			problemReply(http.StatusConflict, "refund-exceeds-charge", map[string]string{HeaderRetryAfter: "2"}), refunded(false))
		res, err := c.Refund(t.Context(), chargeID, NewCommandID(), WithRefundAmount(500))
		if err != nil || res.Attempts != 2 || s.requests() != 2 || len(ft.waits) != 1 || ft.waits[0] != 2*time.Second {
			t.Fatalf("%+v, %v after %d requests, waits %v; want the refund on attempt 2, after 2s", res, err, s.requests(), ft.waits)
		}
	})
	t.Run("in flight until the attempts run out", func(t *testing.T) {
		t.Parallel()
		ft := &fakeTime{now: time.Now()}
		c, s := newScripted(t, append(ft.options(0), WithMaxAttempts(3)),
			problemReply(http.StatusConflict, "refund-exceeds-charge", map[string]string{HeaderRetryAfter: "2"}))
		_, err := c.Refund(t.Context(), chargeID, NewCommandID(), WithRefundAmount(500))
		var p *ProblemError
		if !errors.Is(err, ErrRefundExceedsCharge) || !errors.As(err, &p) || p.RetryAfter != 2*time.Second || s.requests() != 3 {
			t.Fatalf("err = %v after %d requests; want ErrRefundExceedsCharge with RetryAfter 2s after 3", err, s.requests())
		}
	})
}

// TestRefundLimitReachedIsFinalWithoutRetryAfter: as a refund that
// exceeds the charge. Without Retry-After the charge's refunds reach the
// limit for good: not retried. With it, refunds in flight fill it, and
// one may fail: retried, and the refusal proves this attempt did nothing.
func TestRefundLimitReachedIsFinalWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("final", func(t *testing.T) {
		t.Parallel()
		ft := &fakeTime{now: time.Now()}
		c, s := newScripted(t, ft.options(0), problemReply(http.StatusConflict, "refund-limit-reached", nil), refunded(false))
		_, err := c.Refund(t.Context(), chargeID, NewCommandID(), WithRefundAmount(500))
		var p *ProblemError
		if !errors.Is(err, ErrRefundLimit) || !errors.As(err, &p) || p.RetryAfter != 0 || s.requests() != 1 {
			t.Fatalf("err = %v after %d requests; want ErrRefundLimit, RetryAfter 0, after 1", err, s.requests())
		}
	})
	t.Run("in flight until the attempts run out", func(t *testing.T) {
		t.Parallel()
		ft := &fakeTime{now: time.Now()}
		c, s := newScripted(t, append(ft.options(0), WithMaxAttempts(3)),
			problemReply(http.StatusConflict, "refund-limit-reached", map[string]string{HeaderRetryAfter: "2"}))
		_, err := c.Refund(t.Context(), chargeID, NewCommandID(), WithRefundAmount(500))
		var p *ProblemError
		if !errors.Is(err, ErrRefundLimit) || errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &p) || p.RetryAfter != 2*time.Second || s.requests() != 3 {
			t.Fatalf("err = %v after %d requests; want ErrRefundLimit with RetryAfter 2s after 3, not ErrOutcomeUnknown", err, s.requests())
		}
	})
}

// TestRefundAfterAnAmbiguousAttempt: a bare 502 may come after the
// refund was made. A later 503 provider-unavailable proves nothing about
// that attempt, so the error is ErrOutcomeUnknown, never ErrUnavailable
// ("nothing was refunded"). A stored outcome replayed to the retry
// (refund-declined, a final refund-exceeds-charge) is the command's, so
// it stands; charge-state-conflict is not stored, so it does not.
func TestRefundAfterAnAmbiguousAttempt(t *testing.T) {
	t.Parallel()
	bare502 := reply{http.StatusBadGateway, map[string]string{"Content-Type": "application/json"}, `{"message":"Internal server error"}`}
	for name, tc := range map[string]struct {
		later   reply
		want    error
		unknown bool
	}{
		"503 provider-unavailable":  {problemReply(http.StatusServiceUnavailable, "provider-unavailable", nil), ErrOutcomeUnknown, true},
		"409 refund-declined":       {problemReply(http.StatusConflict, "refund-declined", nil), ErrRefundDeclined, false},
		"409 refund-exceeds-charge": {problemReply(http.StatusConflict, "refund-exceeds-charge", nil), ErrRefundExceedsCharge, false},
		"409 refund-limit-reached":  {problemReply(http.StatusConflict, "refund-limit-reached", nil), ErrRefundLimit, false},
		"409 charge-state-conflict": {problemReply(http.StatusConflict, "charge-state-conflict", nil), ErrChargeState, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeTime{now: time.Now()}
			c, s := newScripted(t, append(ft.options(0), WithMaxAttempts(3)), bare502, tc.later)
			id := NewCommandID()
			_, err := c.Refund(t.Context(), chargeID, id, WithRefundAmount(500))
			if !errors.Is(err, tc.want) || errors.Is(err, ErrOutcomeUnknown) != tc.unknown || errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v: %v %v, ErrOutcomeUnknown %v, ErrUnavailable %v; want ErrOutcomeUnknown %v, never ErrUnavailable",
					err, tc.want, errors.Is(err, tc.want), errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrUnavailable), tc.unknown)
			}
			for i, k := range s.keys {
				if k != string(id) {
					t.Errorf("attempt %d sent key %q, want %q", i+1, k, id)
				}
			}
		})
	}
}

// TestRefundRefusesAnInvalidIDWithoutRequest: as Create does.
func TestRefundRefusesAnInvalidIDWithoutRequest(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, refunded(false))
	if _, err := c.Refund(t.Context(), chargeID, "bad\tid"); !errors.Is(err, ErrInvalid) || s.requests() != 0 {
		t.Fatalf("err = %v after %d requests, want ErrInvalid after none", err, s.requests())
	}
}

// TestGetRefundAndTheChargesRefunds: GetRefund reads the refund's path;
// Get decodes the charge's amount refunded and its refunds.
func TestGetRefundAndTheChargesRefunds(t *testing.T) {
	t.Parallel()
	json200 := map[string]string{"Content-Type": "application/json"}
	charge := strings.TrimSuffix(chargeBody, "}") + `,"amount_refunded":500,"refunds":[` + refundBody + `]}`
	c, s := newScripted(t, nil, reply{http.StatusOK, json200, refundBody}, reply{http.StatusOK, json200, charge})
	re, err := c.GetRefund(t.Context(), chargeID, "re_0123456789abcdef01234567")
	if err != nil || re.ID != "re_0123456789abcdef01234567" || re.ChargeID != chargeID {
		t.Fatalf("GetRefund: %+v, %v", re, err)
	}
	ch, err := c.Get(t.Context(), chargeID)
	if err != nil || ch.AmountRefunded != 500 || len(ch.Refunds) != 1 || ch.Refunds[0] != re {
		t.Fatalf("Get: %+v, %v; want amount refunded 500 and the one refund", ch, err)
	}
	if want := "GET /charges/" + chargeID + "/refunds/re_0123456789abcdef01234567"; s.paths[0] != want || s.paths[1] != "GET /charges/"+chargeID {
		t.Fatalf("paths %q, want %q then the charge's", s.paths, want)
	}
}

// TestGetRefundUnknownIsNotFound: a 404 is ErrNotFound, returned at once.
func TestGetRefundUnknownIsNotFound(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, problemReply(http.StatusNotFound, "not-found", nil))
	if _, err := c.GetRefund(context.Background(), chargeID, "re_000000000000000000000000"); !errors.Is(err, ErrNotFound) || s.requests() != 1 {
		t.Fatalf("err = %v after %d requests, want ErrNotFound after 1", err, s.requests())
	}
}

// refundsPage is a page of the refunds ids name, and has_more.
func refundsPage(more bool, ids ...string) reply {
	var data []string
	for _, id := range ids {
		data = append(data, strings.Replace(refundBody, "re_0123456789abcdef01234567", id, 1))
	}
	body := fmt.Sprintf(`{"data":[%s],"has_more":%t}`, strings.Join(data, ","), more)
	return reply{http.StatusOK, map[string]string{"Content-Type": "application/json"}, body}
}

// TestListRefundsAsksForThePage: ListRefunds sends limit and
// starting_after only when given, and decodes the page.
func TestListRefundsAsksForThePage(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, refundsPage(true, "re_1", "re_2"), refundsPage(false))
	page, err := c.ListRefunds(t.Context(), chargeID, 2, "re_0")
	if err != nil || len(page.Refunds) != 2 || page.Refunds[1].ID != "re_2" || !page.HasMore {
		t.Fatalf("ListRefunds: %+v, %v; want re_1, re_2 and more", page, err)
	}
	if page, err = c.ListRefunds(t.Context(), chargeID, 0, ""); err != nil || len(page.Refunds) != 0 || page.HasMore {
		t.Fatalf("ListRefunds past the last: %+v, %v; want an empty page", page, err)
	}
	want := []string{"GET /charges/" + chargeID + "/refunds?limit=2&starting_after=re_0", "GET /charges/" + chargeID + "/refunds"}
	if !slices.Equal(s.paths, want) {
		t.Fatalf("requests %q, want %q", s.paths, want)
	}
}

// TestAllRefundsPagesThroughEveryRefund: AllRefunds reads pages of 100,
// each after the last refund of the one before, until has_more is false;
// an error ends the sequence.
func TestAllRefundsPagesThroughEveryRefund(t *testing.T) {
	t.Parallel()
	c, s := newScripted(t, nil, refundsPage(true, "re_1", "re_2"), refundsPage(false, "re_3"))
	var got []string
	for re, err := range c.AllRefunds(t.Context(), chargeID) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, re.ID)
	}
	want := []string{"GET /charges/" + chargeID + "/refunds?limit=100", "GET /charges/" + chargeID + "/refunds?limit=100&starting_after=re_2"}
	if !slices.Equal(got, []string{"re_1", "re_2", "re_3"}) || !slices.Equal(s.paths, want) {
		t.Fatalf("refunds %v from %q, want re_1, re_2, re_3 from %q", got, s.paths, want)
	}
	c, _ = newScripted(t, nil, refundsPage(true, "re_1"), problemReply(http.StatusNotFound, "not-found", nil))
	var errs []error
	for _, err := range c.AllRefunds(t.Context(), chargeID) {
		errs = append(errs, err)
	}
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], ErrNotFound) {
		t.Fatalf("a failing second page: %v, want re_1, then ErrNotFound, then nothing", errs)
	}
}
