package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// DoJSON makes a plain function idempotent: the key comes from the
// caller, the fingerprint from the request value, and a retry gets the
// first call's result back as the function's own type, without running it.
func ExampleDoJSON() {
	type order struct {
		ID    string `json:"id"`
		Total int    `json:"total"`
	}
	type invoice struct {
		Number string `json:"number"`
		Total  int    `json:"total"`
	}
	ctx := context.Background()
	store := memstore.New() // an *idem.Store on DynamoDB in production
	sendInvoice := func(ctx context.Context, o order) (invoice, error) {
		fmt.Println("sending the invoice of", o.ID)
		return invoice{Number: "INV-1", Total: o.Total}, nil
	}

	for range 2 { // a retry, or the same message delivered twice
		o := order{ID: "order-42", Total: 1500}
		key, err := idem.NewKey("billing", "send-invoice", o.ID)
		if err != nil {
			return
		}
		inv, err := idem.DoJSON(ctx, store, key, o, func(ctx context.Context, _ *idem.Lease) (invoice, error) {
			return sendInvoice(ctx, o)
		})
		fmt.Println(inv, err)
	}
	// Output:
	// sending the invoice of order-42
	// {INV-1 1500} <nil>
	// {INV-1 1500} <nil>
}

type receipt struct {
	ID     string `json:"id"`
	Secret string `json:"-"` // not stored, so no call sees it
}

// countedJSON returns a function for DoJSON that counts its runs.
func countedJSON[T any](runs *atomic.Int32, v T, err error) func(context.Context, *idem.Lease) (T, error) {
	return func(context.Context, *idem.Lease) (T, error) {
		runs.Add(1)
		return v, err
	}
}

func TestDoJSON(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	k := idemtest.UniqueKey(t, "acme")
	req := map[string]any{"amount": 100, "currency": "EUR"}
	var runs atomic.Int32
	fn := countedJSON(&runs, receipt{ID: "r-1", Secret: "s"}, nil)

	first, err := idem.DoJSON(ctx, s, k, req, fn)
	if err != nil || first != (receipt{ID: "r-1"}) {
		t.Fatalf("first call = %+v, %v; want the stored form, without the unstored field", first, err)
	}
	// The same request, written otherwise: canonical JSON, so the same fingerprint.
	again, err := idem.DoJSON(ctx, s, k, json.RawMessage(`{ "currency": "EUR", "amount": 100 }`), fn)
	if err != nil || again != first || runs.Load() != 1 {
		t.Fatalf("retry = %+v, %v after %d runs; want a replay of %+v", again, err, runs.Load(), first)
	}
	if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusSucceeded {
		t.Fatalf("record %+v, %v; want SUCCEEDED", rec, err)
	}
	if _, err := idem.DoJSON(ctx, s, k, map[string]any{"amount": 200}, fn); !errors.Is(err, idem.ErrFingerprintMismatch) || runs.Load() != 1 {
		t.Fatalf("another request under the key: %v, %d runs; want ErrFingerprintMismatch, no run", err, runs.Load())
	}
	if _, err := idem.DoJSON(ctx, s, k, req, countedJSON(&runs, 7, nil)); err == nil || !strings.Contains(err.Error(), k.LogHash()) {
		t.Fatalf("a stored result read as another type: %v; want a decoding error naming the key's hash", err)
	}
}

func TestDoJSONErrors(t *testing.T) {
	t.Parallel()
	errDown := fmt.Errorf("provider down: %w", idem.ErrNotApplied)
	errTimeout := errors.New("provider timed out")
	cases := []struct {
		name       string
		fn         func(*atomic.Int32) func(context.Context, *idem.Lease) (receipt, error)
		wantErr    error
		wantStatus idem.Status
		// wantRuns is how often fn ran after a second call.
		wantRuns int32
	}{
		{"not applied", func(r *atomic.Int32) func(context.Context, *idem.Lease) (receipt, error) {
			return countedJSON(r, receipt{}, errDown)
		}, errDown, idem.StatusReleased, 2},
		{"unknown", func(r *atomic.Int32) func(context.Context, *idem.Lease) (receipt, error) {
			return countedJSON(r, receipt{}, errTimeout)
		}, errTimeout, idem.StatusInFlight, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			k := idemtest.UniqueKey(t, "acme")
			var runs atomic.Int32
			if _, err := idem.DoJSON(ctx, s, k, "req", c.fn(&runs)); err != c.wantErr {
				t.Fatalf("DoJSON error %v, want fn's own %v", err, c.wantErr)
			}
			if rec, err := s.Get(ctx, k); err != nil || rec.Status != c.wantStatus {
				t.Fatalf("record %+v, %v; want %s", rec, err, c.wantStatus)
			}
			_, err := idem.DoJSON(ctx, s, k, "req", c.fn(&runs))
			if c.wantStatus == idem.StatusInFlight {
				wantInFlight(t, err)
			}
			if runs.Load() != c.wantRuns {
				t.Fatalf("fn ran %d times, want %d", runs.Load(), c.wantRuns)
			}
		})
	}

	t.Run("unstorable result", func(t *testing.T) {
		t.Parallel()
		s := memstore.New()
		k := idemtest.UniqueKey(t, "acme")
		var runs atomic.Int32
		_, err := idem.DoJSON(ctx, s, k, "req", countedJSON(&runs, func() {}, nil))
		var unsupported *json.UnsupportedTypeError
		if !errors.As(err, &unsupported) || !strings.Contains(err.Error(), k.LogHash()) || strings.Contains(err.Error(), k.ClientKey()) {
			t.Fatalf("an unstorable result: %v; want *json.UnsupportedTypeError naming the key's hash, not the key", err)
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight {
			t.Fatalf("record %+v, %v; want IN_FLIGHT: the effect happened, its result is lost", rec, err)
		}
	})

	t.Run("request that is not one JSON value", func(t *testing.T) {
		t.Parallel()
		s := memstore.New()
		k := idemtest.UniqueKey(t, "acme")
		var runs atomic.Int32
		_, err := idem.DoJSON(ctx, s, k, json.RawMessage(`{"a":1,"a":2}`), countedJSON(&runs, 1, nil))
		if !errors.Is(err, idem.ErrInvalidJSON) || runs.Load() != 0 || strings.Contains(err.Error(), k.ClientKey()) {
			t.Fatalf("duplicate keys: %v, %d runs; want ErrInvalidJSON, no run, no key in the error", err, runs.Load())
		}
	})
}
