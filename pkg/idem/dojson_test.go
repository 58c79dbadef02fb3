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
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
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
	store := memstore.New() // an *dynamostore.Store on DynamoDB in production
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
	ctx := t.Context()
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
	if _, err := idem.DoJSON(ctx, s, k, map[string]any{"amount": 200}, fn); !errors.Is(err, idem.ErrMismatch) || runs.Load() != 1 {
		t.Fatalf("another request under the key: %v, %d runs; want ErrMismatch, no run", err, runs.Load())
	}
	if _, err := idem.DoJSON(ctx, s, k, req, countedJSON(&runs, 7, nil)); err == nil || !strings.Contains(err.Error(), k.LogHash()) {
		t.Fatalf("a stored result read as another type: %v; want a decoding error naming the key's hash", err)
	}
}

func TestDoJSONErrors(t *testing.T) {
	ctx := t.Context()
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
				dynamotest.WantInFlight(t, err)
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

// jsonText is a field that json.Marshal writes through MarshalText.
type jsonText string

func (t jsonText) MarshalText() ([]byte, error) { return []byte(t), nil }

// TestDoJSONRefusesTextThatIsNotUTF8: json.Marshal writes U+FFFD for each
// byte that is not UTF-8, so two requests that differ only there would
// share a fingerprint, and the second would get the first one's result.
// DoJSON refuses such a request, stores nothing and runs nothing. Bytes
// ([]byte) are written as base64, which keeps them apart, so they pass.
func TestDoJSONRefusesTextThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	type named struct {
		Name string `json:"name"`
	}
	type nested struct {
		Items []map[string]any `json:"items"`
	}
	type tagged struct {
		Count string `json:"count,string"`
		Skip  string `json:"-"`
	}
	for name, c := range map[string]struct {
		first, second any
		refused       bool
	}{
		"a string":         {named{"Jos\xe9"}, named{"Jos\xe8"}, true},
		"a map key":        {map[string]int{"k\xe9": 1}, map[string]int{"k\xe8": 1}, true},
		"a nested value":   {nested{[]map[string]any{{"a": []any{"x\xe9"}}}}, nested{[]map[string]any{{"a": []any{"x\xe8"}}}}, true},
		"a pointer":        {&named{"\xff"}, &named{"\xfe"}, true},
		"a text marshaler": {map[string]jsonText{"t": "\xe9"}, map[string]jsonText{"t": "\xe8"}, true},
		"a string option":  {tagged{Count: "\xe9"}, tagged{Count: "\xe8"}, true},
		"bytes":            {[]byte("\xe9"), []byte("\xe8"), false},
		"a skipped field":  {tagged{Count: "1", Skip: "\xe9"}, tagged{Count: "2", Skip: "\xe8"}, false},
		"a raw message":    {json.RawMessage("\"\xe9\""), json.RawMessage("\"\xe8\""), true},
		"U+FFFD itself":    {named{"\uFFFD"}, named{"\uFFFD!"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			k := idemtest.UniqueKey(t, "acme")
			var runs atomic.Int32
			_, err1 := idem.DoJSON(ctx, s, k, c.first, countedJSON(&runs, 1, nil))
			_, err2 := idem.DoJSON(ctx, s, k, c.second, countedJSON(&runs, 2, nil))
			if !c.refused {
				var mismatch *idem.MismatchError
				if err1 != nil || !errors.As(err2, &mismatch) || runs.Load() != 1 {
					t.Fatalf("first %v, second %v, %d runs; want the first run and the second refused as another request", err1, err2, runs.Load())
				}
				return
			}
			if !errors.Is(err1, idem.ErrInvalidJSON) || !errors.Is(err2, idem.ErrInvalidJSON) || runs.Load() != 0 {
				t.Fatalf("first %v, second %v, %d runs; want both refused with ErrInvalidJSON, nothing run", err1, err2, runs.Load())
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("a record was stored for a refused request: %v", err)
			}
		})
	}
}

// TestDoJSONStoresItsRequest: the lease carries the request's canonical
// JSON as the intent a resolver reads; a request too large to store is
// refused before anything runs.
func TestDoJSONStoresItsRequest(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	k := idemtest.UniqueKey(t, "acme")
	var intent []byte
	_, err := idem.DoJSON(t.Context(), s, k, map[string]any{"b": 2, "a": "x"}, func(_ context.Context, l *idem.Lease) (int, error) {
		intent = l.Intent
		return 1, nil
	})
	if err != nil || string(intent) != `{"a":"x","b":2}` {
		t.Fatalf("intent %s, %v; want the request's canonical JSON", intent, err)
	}
	var runs atomic.Int32
	big := idemtest.UniqueKey(t, "acme")
	_, err = idem.DoJSON(t.Context(), s, big, strings.Repeat("x", 200*1024), countedJSON(&runs, 1, nil))
	if !errors.Is(err, idem.ErrTooLarge) || runs.Load() != 0 {
		t.Fatalf("a 200 KiB request: %v, %d runs; want ErrTooLarge and no run", err, runs.Load())
	}
}
