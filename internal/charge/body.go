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
	// encoding/json matches field names case-insensitively; the contract
	// names them exactly, so check the names before decoding.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &fields); err != nil {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
	}
	for name, value := range fields {
		if !slices.Contains(requestFields, name) || string(value) == "null" {
			return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
		}
	}
	var in struct {
		Amount      any    `json:"amount"` // a json.Number if it is a number
		Currency    string `json:"currency"`
		Source      string `json:"source"`
		Description string `json:"description"`
	}
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
	}
	number, _ := in.Amount.(json.Number)
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
		fields["amount"] = json.RawMessage(whole)
		if canonical, err = json.Marshal(fields); err == nil {
			canonical, err = idem.CanonicalJSON(canonical)
		}
		if err != nil {
			return Request{}, idem.Fingerprint{}, fmt.Errorf("charge: re-canonicalize the body: %w", err)
		}
	}
	return r, idem.FingerprintOf(canonical), nil
}
