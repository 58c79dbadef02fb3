package charge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MaxBodyBytes is the largest request body accepted, however it arrives
// (POST /charges, or the request of a charge-requests message).
const MaxBodyBytes = 16 * 1024

// requestFields are the exact member names of a create request.
var requestFields = []string{"amount", "currency", "source", "description"}

// BodyError says why a request body is not one the contract accepts as a
// whole (its size, its JSON, its members); a member's value that is wrong
// is an *InvalidError instead. Reason is a sentence for the client.
type BodyError struct {
	Reason string
}

func (e *BodyError) Error() string { return "charge: body: " + e.Reason }

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *BodyError) Is(target error) bool { return target == ErrInvalidRequest }

// The reasons of a *BodyError.
const (
	reasonTooLarge = "The body must be at most 16384 bytes."
	reasonJSON     = "The body is not a single valid JSON value without duplicate keys."
	reasonShape    = "The body must be an object with a number amount and string currency, source and description, and no other fields."
)

// ParseBody validates a create request body, the JSON object of
// POST /charges, completely, and returns the request and the fingerprint
// the command is claimed with: SHA-256 over the body's canonical JSON with
// the amount written as an integer, so that every way of sending the same
// request (re-serialized, 1500.0 for 1500, over HTTP or on the queue) has
// the same fingerprint. An invalid body is a *BodyError or an
// *InvalidError; both match ErrInvalidRequest.
func ParseBody(body []byte) (Request, idem.Fingerprint, error) {
	if len(body) > MaxBodyBytes {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonTooLarge}
	}
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonJSON}
	}
	// A map keeps the names exactly as sent (encoding/json would match a
	// struct's case-insensitively), and with UseNumber the amount as written.
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
	}
	for name, value := range fields {
		if !slices.Contains(requestFields, name) || value == nil {
			return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
		}
	}
	var in struct{ Currency, Source, Description string }
	for _, m := range [...]struct {
		name string
		to   *string
	}{{"currency", &in.Currency}, {"source", &in.Source}, {"description", &in.Description}} {
		if v, ok := fields[m.name]; ok {
			if *m.to, ok = v.(string); !ok {
				return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
			}
		}
	}
	number, _ := fields["amount"].(json.Number)
	amount, err := ParseAmount(number)
	if err != nil {
		return Request{}, idem.Fingerprint{}, err
	}
	r, err := NewRequest(amount, in.Currency, in.Source, in.Description)
	if err != nil {
		return Request{}, idem.Fingerprint{}, err
	}
	if whole := strconv.FormatInt(amount, 10); number.String() != whole {
		// 1500.0 and 1.5e3 are the amount 1500: the same request, so the
		// same fingerprint as the body with "amount":1500.
		canonical, err = withAmount(canonical, whole)
		if err != nil {
			return Request{}, idem.Fingerprint{}, fmt.Errorf("charge: re-canonicalize the body: %w", err)
		}
	}
	return r, idem.FingerprintOf(canonical), nil
}

// withAmount is the canonical body with the amount written as whole, the
// other members kept as they are.
func withAmount(canonical []byte, whole string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &fields); err != nil {
		return nil, err
	}
	fields["amount"] = json.RawMessage(whole)
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return idem.CanonicalJSON(b)
}
