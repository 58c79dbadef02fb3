package client_test

import (
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/pkg/client"
)

// TestEveryRefundIsReachedThroughTheList runs the charge function behind
// the local gateway. A charge with more refunds than it embeds says so,
// and both ListRefunds and AllRefunds reach each refund once.
func TestEveryRefundIsReachedThroughTheList(t *testing.T) {
	t.Parallel()
	c, id := charged(t, newStack(t, nil))
	made := map[string]bool{}
	for range 12 {
		re, err := c.Refund(t.Context(), id, client.NewCommandID(), client.WithRefundAmount(1))
		if err != nil {
			t.Fatal(err)
		}
		made[re.Refund.ID] = true
	}
	ch, err := c.Get(t.Context(), id)
	if err != nil || len(ch.Refunds) != 10 || !ch.RefundsHasMore {
		t.Fatalf("Get: %d refunds, RefundsHasMore %t, %v; want 10 and true", len(ch.Refunds), ch.RefundsHasMore, err)
	}
	seen := map[string]bool{}
	for after := ""; ; {
		page, err := c.ListRefunds(t.Context(), id, 5, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range page.Refunds {
			seen[re.ID] = true
		}
		if !page.HasMore {
			break
		}
		after = page.Refunds[len(page.Refunds)-1].ID
	}
	all := 0
	for re, err := range c.AllRefunds(t.Context(), id) {
		if err != nil || !made[re.ID] {
			t.Fatalf("AllRefunds: %+v, %v", re, err)
		}
		all++
	}
	if len(seen) != len(made) || all != len(made) {
		t.Fatalf("ListRefunds reached %d refunds, AllRefunds %d; want each of %d", len(seen), all, len(made))
	}
}

// TestRefundBeyondTheLimitIsErrRefundLimit: the service's final 409 is
// ErrRefundLimit, returned at once.
func TestRefundBeyondTheLimitIsErrRefundLimit(t *testing.T) {
	t.Parallel()
	c, id := charged(t, newStack(t, nil, func(c *app.ChargeConfig) { c.MaxRefunds = 1 }))
	if _, err := c.Refund(t.Context(), id, client.NewCommandID(), client.WithRefundAmount(1)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Refund(t.Context(), id, client.NewCommandID(), client.WithRefundAmount(1))
	var p *client.ProblemError
	if !errors.Is(err, client.ErrRefundLimit) || !errors.As(err, &p) || p.RetryAfter != 0 {
		t.Fatalf("a second refund of a charge limited to one: %v, want ErrRefundLimit, final", err)
	}
}

// charged is a client of st and the id of a charge of 1500 it made.
func charged(t *testing.T, st *stack) (*client.Client, string) {
	t.Helper()
	c, err := client.New(st.URL, client.WithToken("dev:acme"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Create(t.Context(), client.NewCommandID(), client.Money{Amount: 1500, Currency: "EUR"}, "tok_visa")
	if err != nil {
		t.Fatal(err)
	}
	return c, res.Charge.ID
}
