package stripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providertest"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

func charge(reference, source string) provider.ChargeRequest {
	return provider.ChargeRequest{Reference: reference, Amount: 1500, Currency: "EUR", Source: source}
}

// TestChargeSendsOnePaymentIntent: amount in minor units, currency in lower
// case, the source as payment_method, the reference in metadata.
func TestChargeSendsOnePaymentIntent(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	res, err := b.adapter.Charge(context.Background(), charge("co_shape", stripesim.PMVisa))
	if err != nil || res.Status != provider.StatusCharged || !strings.HasPrefix(res.ChargeID, "pi_") {
		t.Fatalf("charge: %+v, %v", res, err)
	}
	req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/payment_intents/"+res.ChargeID, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pi struct {
		Amount        int64             `json:"amount"`
		Currency      string            `json:"currency"`
		PaymentMethod string            `json:"payment_method"`
		Status        string            `json:"status"`
		Metadata      map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pi); err != nil {
		t.Fatal(err)
	}
	if pi.Amount != 1500 || pi.Currency != "eur" || pi.PaymentMethod != stripesim.PMVisa || pi.Status != "succeeded" ||
		pi.Metadata[stripe.MetadataReference] != "co_shape" {
		t.Fatalf("PaymentIntent %+v", pi)
	}
}

func TestDeclines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ source, code string }{
		{stripesim.PMDeclined, "generic_decline"},
		{stripesim.PMInsufficientFunds, "insufficient_funds"},
		{stripesim.PMAuthenticationRequired, "authentication_required"}, // no 3-D Secure
	} {
		b := newBackend(t)
		res, err := b.adapter.Charge(context.Background(), charge("co_decline", c.source))
		if err != nil || res.Status != provider.StatusDeclined || res.DeclineCode != c.code || res.ChargeID == "" {
			t.Errorf("%s: %+v, %v; want declined %s", c.source, res, err, c.code)
		}
	}
}

// TestParameterMismatchIsPermanent: a reference Stripe holds for another
// request is refused, and says so.
func TestParameterMismatchIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	req := charge("co_mismatch", stripesim.PMVisa)
	first, err := b.adapter.Charge(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.Amount = 2000
	_, err = b.adapter.Charge(context.Background(), req)
	var se *stripe.Error
	if !errors.Is(err, provider.ErrRejected) || !errors.Is(err, stripe.ErrKeyReused) || !errors.As(err, &se) || se.Type != "idempotency_error" {
		t.Fatalf("resend with another amount: %v", err)
	}
	// The first charge stands, and a search still finds it.
	b.clock.Advance(stripe.SettleWindow)
	if got, err := b.adapter.Lookup(context.Background(), req.Reference); err != nil || got != first {
		t.Fatalf("lookup: %+v, %v; first %+v", got, err, first)
	}
	if n := b.sim.Charged(req.Reference); n != 1 {
		t.Fatalf("charged %d times", n)
	}
}

// TestDedupWindowEnds: past Stripe's key window the same reference charges
// again, which is why the adapter declares DedupWindow.
func TestDedupWindowEnds(t *testing.T) {
	t.Parallel()
	b := newBackend(t, func(o *stripesim.Options) { o.KeyWindow = time.Hour })
	req := charge("co_window", stripesim.PMVisa)
	first, err := b.adapter.Charge(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(59 * time.Minute)
	if again, err := b.adapter.Charge(context.Background(), req); err != nil || again != first {
		t.Fatalf("inside the window: %+v, %v; first %+v", again, err, first)
	}
	b.clock.Advance(time.Minute)
	later, err := b.adapter.Charge(context.Background(), req)
	if err != nil || later.ChargeID == first.ChargeID {
		t.Fatalf("past the window: %+v, %v; first %+v", later, err, first)
	}
	if n := b.sim.Charged(req.Reference); n != 2 {
		t.Fatalf("charged %d times, want 2 past the window", n)
	}
	if got := b.adapter.Guarantees(); got.DedupWindow != 24*time.Hour || got.SettleWindow != stripe.SearchLag+provider.DefaultSettleWindow {
		t.Fatalf("Guarantees %+v", got)
	}
}

// TestLookupTrustsNoEarlySearchMiss: a charge is invisible to search until
// the index catches up; the settle window covers that lag.
func TestLookupTrustsNoEarlySearchMiss(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	res, err := b.adapter.Charge(context.Background(), charge("co_lag", stripesim.PMVisa))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.adapter.Lookup(context.Background(), "co_lag"); err != nil || got.Status != provider.StatusNotFound {
		t.Fatalf("lookup before the index caught up: %+v, %v", got, err)
	}
	b.clock.Advance(stripe.SearchLag)
	if got, err := b.adapter.Lookup(context.Background(), "co_lag"); err != nil || got != res {
		t.Fatalf("lookup after the lag: %+v, %v; charge %+v", got, err, res)
	}
}

func TestLookupRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("replay finds a charge the index does not show yet", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_replay", stripesim.PMVisa)
		res, err := b.adapter.Charge(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.adapter.LookupRequest(ctx, provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()})
		if err != nil || got != res {
			t.Fatalf("lookup by replay: %+v, %v; charge %+v", got, err, res)
		}
		if n := b.sim.Charged(req.Reference); n != 1 {
			t.Fatalf("charged %d times", n)
		}
	})

	t.Run("replay of a decline", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_replay_decline", stripesim.PMInsufficientFunds)
		res, err := b.adapter.Charge(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.adapter.LookupRequest(ctx, provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()})
		if err != nil || got != res {
			t.Fatalf("lookup by replay: %+v, %v; charge %+v", got, err, res)
		}
	})

	t.Run("replay while the first request executes asks again later", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_replay_late", stripesim.PMLate)
		if _, err := b.adapter.Charge(ctx, req); !errors.Is(err, provider.ErrAmbiguous) {
			t.Fatalf("charge: %v", err)
		}
		lr := provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()}
		if _, err := b.adapter.LookupRequest(ctx, lr); !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("lookup while in progress: %v", err)
		}
		b.sim.Land()
		got, err := b.adapter.LookupRequest(ctx, lr)
		if err != nil || got.Status != provider.StatusCharged {
			t.Fatalf("lookup after landing: %+v, %v", got, err)
		}
		if n := b.sim.Charged(req.Reference); n != 1 {
			t.Fatalf("charged %d times", n)
		}
	})

	t.Run("replay rolls forward a request that never reached Stripe", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_replay_never_sent", stripesim.PMVisa)
		got, err := b.adapter.LookupRequest(ctx, provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()})
		if err != nil || got.Status != provider.StatusCharged {
			t.Fatalf("lookup by replay: %+v, %v", got, err)
		}
		if again, err := b.adapter.Charge(ctx, req); err != nil || again != got {
			t.Fatalf("the client's retry: %+v, %v; lookup %+v", again, err, got)
		}
		if n := b.sim.Charged(req.Reference); n != 1 {
			t.Fatalf("charged %d times", n)
		}
	})

	t.Run("outside the key window it searches and never charges", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_old", stripesim.PMVisa)
		lr := provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()}
		b.clock.Advance(stripe.DedupWindow - 30*time.Minute) // inside Stripe's window, outside the margin
		got, err := b.adapter.LookupRequest(ctx, lr)
		if err != nil || got.Status != provider.StatusNotFound {
			t.Fatalf("lookup: %+v, %v", got, err)
		}
		if n := b.sim.Charged(req.Reference); n != 0 {
			t.Fatalf("charged %d times", n)
		}
	})

	t.Run("a replayed server error falls back to search", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_replay_api_error", stripesim.PMAPIError)
		if _, err := b.adapter.Charge(ctx, req); !errors.Is(err, provider.ErrAmbiguous) {
			t.Fatalf("charge: %v", err)
		}
		lr := provider.LookupRequest{ChargeRequest: req, FirstSent: b.clock.Now()}
		// Stripe replays its saved 500; search does not show the charge yet.
		if got, err := b.adapter.LookupRequest(ctx, lr); err != nil || got.Status != provider.StatusNotFound {
			t.Fatalf("lookup inside the search lag: %+v, %v", got, err)
		}
		b.clock.Advance(stripe.SearchLag)
		if got, err := b.adapter.LookupRequest(ctx, lr); err != nil || got.Status != provider.StatusCharged {
			t.Fatalf("lookup after the search lag: %+v, %v", got, err)
		}
		if n := b.sim.Charged(req.Reference); n != 1 {
			t.Fatalf("charged %d times", n)
		}
	})

	t.Run("CheckSource takes PaymentMethod ids only", func(t *testing.T) {
		t.Parallel()
		a := newAdapter(t, "http://"+providertest.ClosedAddr(t))
		for _, src := range []string{stripesim.PMVisa, "pm_1Q0PsIJvEtkwdCNYMhYVkTs7"} {
			if err := a.CheckSource(src); err != nil {
				t.Errorf("CheckSource(%q): %v", src, err)
			}
		}
		for _, src := range []string{"4242424242424242", "tok_visa", "pm_!", "pm_card visa", "card_1Q0Ps"} {
			if err := a.CheckSource(src); !errors.Is(err, provider.ErrRejected) || strings.Contains(err.Error(), src) {
				t.Errorf("CheckSource(%q): %v, want ErrRejected without the source", src, err)
			}
		}
	})

	t.Run("a key reused for other parameters falls back to search", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t)
		req := charge("co_reused", stripesim.PMVisa)
		res, err := b.adapter.Charge(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(stripe.SearchLag)
		other := req
		other.Amount++
		got, err := b.adapter.LookupRequest(ctx, provider.LookupRequest{ChargeRequest: other, FirstSent: b.clock.Now()})
		if err != nil || got != res {
			t.Fatalf("lookup: %+v, %v; charge %+v", got, err, res)
		}
	})
}

// TestResentChargeThatCannotDialIsAmbiguous: Stripe executes a charge sent
// on a kept-alive connection that then drops without an answer; Go's
// transport re-sends it (it carries an Idempotency-Key) and the re-dial is
// refused. The charge may have happened: the dial error must not pass for
// "never sent".
func TestResentChargeThatCannotDialIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const dropped = "co_dropped"
	srv := providertest.DropServer(t, b.sim, func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") == dropped
	})
	a := newAdapter(t, srv.URL, func(o *stripe.Options) { o.HTTPClient, o.Clock = srv.Client(), b.clock.Now })
	// The first charge leaves its connection in the client's pool.
	if _, err := a.Charge(context.Background(), charge("co_first", stripesim.PMVisa)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Charge(context.Background(), charge(dropped, stripesim.PMVisa))
	var opErr *net.OpError
	if !errors.As(err, &opErr) || opErr.Op != "dial" {
		t.Fatalf("charge: %v; want the re-send's dial error in the chain", err)
	}
	if !errors.Is(err, provider.ErrAmbiguous) || errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("charge: %v; want ErrAmbiguous only", err)
	}
	if n := b.sim.Charged(dropped); n != 1 {
		t.Fatalf("charged %d times, want the dropped request executed once", n)
	}
}

func TestNewRefusesPublishableKeys(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", "pk_test_123", "whsec_123"} {
		if _, err := stripe.New(key); err == nil || (key != "" && strings.Contains(err.Error(), key)) {
			t.Errorf("New(%q): %v", key, err)
		}
	}
}

// TestWrongKeyIsRejected: an answer to a bad key is a permanent refusal,
// and no error quotes the key.
func TestWrongKeyIsRejected(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const wrong = "sk_test_wrong_key_7d1e"
	a, err := stripe.New(wrong, func(o *stripe.Options) { o.BaseURL = b.url })
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Charge(context.Background(), charge("co_wrong_key", stripesim.PMVisa))
	var se *stripe.Error
	if !errors.Is(err, provider.ErrRejected) || !errors.As(err, &se) || se.HTTPStatus != http.StatusUnauthorized {
		t.Fatalf("charge with a wrong key: %v", err)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(b.logs.String(), wrong) {
		t.Fatalf("the key leaked: %v\n%s", err, b.logs.String())
	}
}
