package stripe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

// TestReplayRefusedOutright: a replay Stripe refuses for the request
// itself (a PaymentMethod it does not know) proves nothing was charged and
// is ErrRejected; a refusal of the API key proves nothing of the original
// (it may have run under another key) and is ErrUnavailable, to defer.
func TestReplayRefusedOutright(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBackend(t)
	req := charge("co_unknown_pm", "pm_unknown_to_stripe")
	lr := provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()}
	_, err := b.adapter.LookupRequest(ctx, lr)
	var e *stripe.Error
	if !errors.Is(err, provider.ErrRejected) || !errors.As(err, &e) || e.Code != "resource_missing" {
		t.Fatalf("replay of an unknown PaymentMethod: %v, want ErrRejected (resource_missing)", err)
	}

	other, err := stripe.New("sk_test_another_key", func(o *stripe.Options) { o.BaseURL, o.Clock = b.url, b.clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	lr = provider.LookupRequest{ChargeRequest: charge("co_other_key", stripesim.PMVisa), FirstSent: b.clock.Now()}
	if _, err := other.LookupRequest(ctx, lr); !errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrRejected) {
		t.Fatalf("replay under another API key: %v, want ErrUnavailable", err)
	}
}
