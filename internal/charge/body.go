package charge

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MaxBodyBytes is the largest request body accepted, however it arrives
// (POST /charges, or the request of a charge-requests message).
const MaxBodyBytes = 16 * 1024

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
	reasonJSON     = "The body is not a single valid JSON value of UTF-8 text without duplicate keys."
	reasonShape    = "The body must be an object with a number amount, string currency, source and description, an optional boolean capture, and no other fields."
)

// ParseBody validates a create request body, the JSON object of
// POST /charges, completely, and returns the request and the fingerprint
// the command is claimed with: SHA-256 over the body's canonical JSON with
// the amount written as an integer and an empty description left out, so
// that every way of sending the same request (re-serialized, 1500.0 for
// 1500, "description":"" or none, over HTTP or on the queue) has the same
// fingerprint. A string that is not Unicode text (bytes that are
// not UTF-8, a lone surrogate's \u escape) is refused with the JSON, as
// canonicalisation would make it U+FFFD. An invalid body is a *BodyError
// or an *InvalidError; both match ErrInvalidRequest.
func ParseBody(body []byte) (Request, idem.Fingerprint, error) {
	if len(body) > MaxBodyBytes {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonTooLarge}
	}
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonJSON}
	}
	in, ok := requestMembers(canonical)
	if !ok {
		return Request{}, idem.Fingerprint{}, &BodyError{reasonShape}
	}
	amount, err := ParseAmount(in.amount)
	if err != nil {
		return Request{}, idem.Fingerprint{}, err
	}
	r, err := NewRequest(amount, in.currency, in.source, in.description)
	if err != nil {
		return Request{}, idem.Fingerprint{}, err
	}
	r.AuthorizeOnly = in.capture != nil && !*in.capture
	var digits [20]byte // any int64
	whole := strconv.AppendInt(digits[:0], amount, 10)
	emptyDescription := in.described && in.description == ""
	captureNow := in.capture != nil && *in.capture
	if string(whole) != in.amount.String() || emptyDescription || captureNow {
		// 1500.0 and 1.5e3 are the amount 1500, an empty description
		// is none (it is neither stored nor returned), and "capture":true
		// is the default: the same request, so the same fingerprint as
		// the body with "amount":1500 and neither member.
		canonical, err = normalised(canonical, string(whole), emptyDescription, captureNow)
		if err != nil {
			return Request{}, idem.Fingerprint{}, fmt.Errorf("charge: re-canonicalize the body: %w", err)
		}
	}
	return r, idem.FingerprintOf(canonical), nil
}

// members are a create request's members as sent: the amount as written
// if it is a number (empty if it is anything else), the others decoded,
// and whether a description was sent at all.
type members struct {
	amount                        json.Number
	currency, source, description string
	described                     bool
	capture                       *bool
}

// requestMembers reads the members of a canonical body (what
// idem.CanonicalJSON returns: valid, its keys unique). The body must be an
// object, or null (no members), whose members are among amount, currency,
// source, description and capture, none null, the next three strings and
// capture a boolean.
func requestMembers(canonical []byte) (members, bool) {
	var m members
	var fields map[string]json.RawMessage
	if json.Unmarshal(canonical, &fields) != nil {
		return m, false // not an object
	}
	for name, value := range fields {
		if string(value) == "null" {
			return m, false
		}
		var to *string
		switch name {
		case "amount":
			if c := value[0]; c == '-' || c >= '0' && c <= '9' {
				m.amount = json.Number(value)
			}
			continue
		case "currency":
			to = &m.currency
		case "source":
			to = &m.source
		case "description":
			to, m.described = &m.description, true
		case "capture":
			m.capture = new(bool)
			if json.Unmarshal(value, m.capture) != nil {
				return m, false // not a boolean
			}
			continue
		default:
			return m, false
		}
		if json.Unmarshal(value, to) != nil {
			return m, false // not a string
		}
	}
	return m, true
}

// normalised is the canonical body with the amount written as whole and,
// if dropDescription or dropCapture, without that member; the other
// members are kept as they are.
func normalised(canonical []byte, whole string, dropDescription, dropCapture bool) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &fields); err != nil {
		return nil, err
	}
	fields["amount"] = json.RawMessage(whole)
	if dropDescription {
		delete(fields, "description")
	}
	if dropCapture {
		delete(fields, "capture")
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return idem.CanonicalJSON(b)
}
