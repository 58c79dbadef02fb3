package idem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// runDoJSON calls DoJSON and turns a panic into an error.
func runDoJSON(t testing.TB, s idem.Backend, k idem.Key, req any, runs *atomic.Int32, v int) (got int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PANIC: %v", p)
		}
	}()
	return idem.DoJSON(t.Context(), s, k, req, countedJSON(runs, v, nil))
}

// TestDoJSONDoesNotPanicOnValidRequests: requests json.Marshal
// writes without error must not make DoJSON panic.
func TestDoJSONDoesNotPanicOnValidRequests(t *testing.T) {
	t.Parallel()
	for name, req := range map[string]any{} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			got, err := runDoJSON(t, memstore.New(), idemtest.UniqueKey(t, "acme"), req, &runs, 7)
			if err != nil || got != 7 || runs.Load() != 1 {
				t.Fatalf("DoJSON(%T) = %d, %v (%d runs); want 7, nil, 1 run", req, got, err, runs.Load())
			}
		})
	}
}

// reviewCode is a map key json.Marshal writes through MarshalText (a map
// key's MarshalJSON is never used), which also has a MarshalJSON.
type reviewCode struct{ s string }

func (c reviewCode) MarshalText() ([]byte, error) { return []byte(c.s), nil }
func (c reviewCode) MarshalJSON() ([]byte, error) { return []byte(`"code"`), nil }

// TestDoJSONMapKeyTextMarshalerWithMarshalJSON: two requests that
// differ only in a map key's text, not UTF-8, share a fingerprint: the
// second gets the first one's result without running.
func TestDoJSONMapKeyTextMarshalerWithMarshalJSON(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	k := idemtest.UniqueKey(t, "acme")
	var runs atomic.Int32
	first := map[reviewCode]int{{"caf\xe9"}: 1}
	second := map[reviewCode]int{{"caf\xe8"}: 1}
	got1, err1 := runDoJSON(t, s, k, first, &runs, 1)
	got2, err2 := runDoJSON(t, s, k, second, &runs, 2)
	if err2 == nil && got2 == got1 {
		t.Fatalf("first %d, %v; second %d, %v (%d runs): the second request got the first one's result; want ErrInvalidJSON or a mismatch", got1, err1, got2, err2, runs.Load())
	}
	var mismatch *idem.MismatchError
	if !errors.Is(err1, idem.ErrInvalidJSON) && !errors.As(err2, &mismatch) {
		t.Fatalf("first %d, %v; second %d, %v; want ErrInvalidJSON or a mismatch", got1, err1, got2, err2)
	}
}

// reviewNote is an unexported non-struct type: json.Marshal ignores it
// when embedded.
type reviewNote string

// ReviewIgnoredReq has text json.Marshal never writes: an embedded
// unexported non-struct, and an embedded struct's field hidden by the
// outer one of the same name.
type ReviewIgnoredReq struct {
	reviewNote
	ReviewInner
	Ref    string `json:"ref"`
	Amount int    `json:"amount"`
}

type ReviewInner struct {
	Ref string `json:"ref"` // hidden by ReviewIgnoredReq.Ref
}

// TestDoJSONAcceptsTextJSONNeverWrites: a request is refused for
// bytes that are not in its JSON form at all.
func TestDoJSONAcceptsTextJSONNeverWrites(t *testing.T) {
	t.Parallel()
	for name, req := range map[string]ReviewIgnoredReq{
		"an embedded unexported non-struct":     {reviewNote: "\xff", Ref: "order-1", Amount: 1500},
		"an embedded struct's field it shadows": {ReviewInner: ReviewInner{Ref: "\xff"}, Ref: "order-1", Amount: 1500},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			got, err := runDoJSON(t, memstore.New(), idemtest.UniqueKey(t, "acme"), req, &runs, 7)
			if err != nil || got != 7 || runs.Load() != 1 {
				t.Fatalf("DoJSON = %d, %v (%d runs); want 7, nil, 1 run: the bytes refused are not in the request's JSON", got, err, runs.Load())
			}
		})
	}
}

// ReviewOptional is the common optional-value wrapper: its MarshalJSON
// writes the value with json.Marshal, which writes U+FFFD for bytes that
// are not UTF-8, so the text CanonicalJSON sees is valid and nothing
// refuses it.
type ReviewOptional[T any] struct {
	Set bool
	V   T
}

func (o ReviewOptional[T]) MarshalJSON() ([]byte, error) {
	if !o.Set {
		return []byte("null"), nil
	}
	return json.Marshal(o.V)
}

type ReviewOptionalReq struct {
	Amount int                    `json:"amount"`
	Note   ReviewOptional[string] `json:"note"`
}

// TestDoJSONTextBehindMarshalJSON: two requests that differ only in
// a string, not UTF-8, written by a field's MarshalJSON through
// json.Marshal, share a fingerprint: the second gets the first one's
// result without running, the case the change claims to close.
func TestDoJSONTextBehindMarshalJSON(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	k := idemtest.UniqueKey(t, "acme")
	var runs atomic.Int32
	first := ReviewOptionalReq{1500, ReviewOptional[string]{true, "Jos\xe9"}}
	second := ReviewOptionalReq{1500, ReviewOptional[string]{true, "Jos\xe8"}}
	got1, err1 := runDoJSON(t, s, k, first, &runs, 1)
	got2, err2 := runDoJSON(t, s, k, second, &runs, 2)
	if err2 == nil && got2 == got1 {
		t.Fatalf("first %d, %v; second %d, %v (%d runs): the second request got the first one's result; want ErrInvalidJSON", got1, err1, got2, err2, runs.Load())
	}
}
