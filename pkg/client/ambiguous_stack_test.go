package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/client"
)

// TestUnavailableAfterAnAmbiguousAttemptCharged runs the real charge
// function behind the local gateway. The first attempt reaches the gateway
// but its function starts late (a cold start); the client's attempt timeout
// ends it, an ambiguous outcome. The second attempt is answered 503
// provider-unavailable (the provider was briefly down) and the key is
// released. Then the first invocation runs (API Gateway does not cancel a
// function whose client left) and charges the card. Create returned an
// error matching ErrUnavailable, "nothing was charged", and not
// ErrOutcomeUnknown: a caller that believed it and minted a new id would
// charge the card twice.
func TestUnavailableAfterAnAmbiguousAttemptCharged(t *testing.T) {
	t.Parallel()
	release, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st := newStackWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			first := false
			if r.Method == http.MethodPost {
				once.Do(func() { first = true })
			}
			if !first {
				next.ServeHTTP(w, r)
				return
			}
			// The first invocation: it starts only once released, and
			// runs to its end whatever the client does.
			<-release
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
			close(done)
		})
	}, nil)
	c, err := client.New(st.URL, client.WithToken("dev:acme"), client.WithMaxAttempts(2),
		client.WithAttemptTimeout(500*time.Millisecond), client.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	id := client.NewCommandID()
	_, err = c.Create(t.Context(), id, client.Money{Amount: 1500, Currency: "EUR"}, providersim.SourceUnavailableOnce)
	close(release)
	<-done
	if charged := st.Sim.Ledger().TotalCharges; charged != 1 {
		t.Fatalf("the provider charged %d times, want 1 (the first attempt's)", charged)
	}
	if errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Create: %v (ErrUnavailable %v, ErrOutcomeUnknown %v), and the card was charged once; want ErrOutcomeUnknown, never ErrUnavailable (nothing was charged)",
			err, errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrOutcomeUnknown))
	}
}
