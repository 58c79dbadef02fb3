package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/client"
)

// TestBareGateway500AfterTheChargeIsUnknown runs the real charge function
// behind the local gateway. The function charges and records the charge,
// then the gateway answers a bare 500, as API Gateway does when the
// function outlives its timeout. The client must not say that nothing was
// charged: a caller that believed it would mint a new id and charge twice.
func TestBareGateway500AfterTheChargeIsUnknown(t *testing.T) {
	t.Parallel()
	var lost atomic.Bool
	lost.Store(true)
	st := newStackWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !lost.Load() {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		})
	}, nil)
	c, err := client.New(st.URL, client.WithToken("dev:acme"), client.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	id := client.NewCommandID()
	_, err = c.Create(t.Context(), id, client.Money{Amount: 1500, Currency: "EUR"}, "tok_visa")
	if charged := st.Sim.Ledger().TotalCharges; charged != 1 {
		t.Fatalf("the provider charged %d times, want 1", charged)
	}
	if errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a bare 500 after the charge: %v; want ErrOutcomeUnknown, never ErrUnavailable (nothing was charged)", err)
	}
	lost.Store(false)
	res, err := c.Create(t.Context(), id, client.Money{Amount: 1500, Currency: "EUR"}, "tok_visa")
	if err != nil || !res.Replayed || st.Sim.Ledger().TotalCharges != 1 {
		t.Fatalf("the retry with the same id: %+v, %v, %d charges; want the replay of the one charge", res, err, st.Sim.Ledger().TotalCharges)
	}
}
