package charge

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// MaxBodyBytes is the largest request body accepted, however it arrives.
// That is POST /charges, or a charge-requests message.
const MaxBodyBytes = 16 * 1024

// BodyError says why the contract refuses a request body as a whole: its
// size, its JSON, its members. A member's wrong value is an *InvalidError
// instead. Reason is a sentence for the client.
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

// ParseBody validates a create request body, the JSON object of POST
// /charges. It returns the request and the fingerprint the command is
// claimed with.
//
// The fingerprint is SHA-256 over the body's canonical JSON. The amount is
// written as an integer, and an empty description is left out. So every
// way of sending one request has one fingerprint: re-serialized, 1500.0
// for 1500, "description":"" or none, over HTTP or on the queue.
//
// A string that is not Unicode text is refused with the JSON:
// canonicalisation would make it U+FFFD. Bytes that are not UTF-8 are such
// a string, and so is a lone surrogate's \u escape. An invalid body is a
// *BodyError or an *InvalidError. Both match ErrInvalidRequest.
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
		// 1500.0 and 1.5e3 are the amount 1500. An empty description is
		// none: it is neither stored nor returned. "capture":true is the
		// default. Each is the same request, so it has the fingerprint of
		// the body with "amount":1500 and neither member.
		canonical, err = normalised(canonical, string(whole), emptyDescription, captureNow)
		if err != nil {
			return Request{}, idem.Fingerprint{}, fmt.Errorf("charge: re-canonicalize the body: %w", err)
		}
	}
	return r, idem.FingerprintOf(canonical), nil
}

// members are a create request's members as sent. The amount is as written
// if it is a number, else empty. The others are decoded. described says
// whether a description was sent at all.
type members struct {
	amount                        json.Number
	currency, source, description string
	described                     bool
	capture                       *bool
}

// requestMembers reads the members of a canonical body, as
// idem.CanonicalJSON returns it: valid, its keys unique. The body must be
// an object, or null (no members). Its members are among amount, currency,
// source, description and capture. None is null. Currency, source and
// description are strings, and capture is a boolean.
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

// normalised is the canonical body with the amount written as whole. If
// dropDescription or dropCapture, that member is left out. The other
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

// The reasons a refund may give, as Stripe names them.
var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// ParseRefundBody validates a refund request body and returns the request
// and its fingerprint. The body is the JSON object of POST
// /charges/{id}/refunds; empty is {}. null is refused: it is not an
// object. The fingerprint covers the charge id, so one key on two charges
// is two requests. It covers the amount as an integer.
func ParseRefundBody(chargeID string, body []byte) (RefundRequest, idem.Fingerprint, error) {
	if len(body) > MaxBodyBytes {
		return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonTooLarge}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonJSON}
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(canonical, &fields) != nil || fields == nil {
		return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape} // not an object
	}
	var req RefundRequest
	for name, value := range fields {
		switch name {
		case "amount":
			if c := value[0]; c != '-' && (c < '0' || c > '9') {
				return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape}
			}
			if req.Amount, err = ParseAmount(json.Number(value)); err != nil {
				return RefundRequest{}, idem.Fingerprint{}, err
			}
			if req.Amount < MinAmount || req.Amount > MaxAmount {
				return RefundRequest{}, idem.Fingerprint{}, &InvalidError{"amount", fmt.Sprintf("must be between %d and %d minor units", MinAmount, MaxAmount)}
			}
			fields[name] = json.RawMessage(strconv.FormatInt(req.Amount, 10))
		case "reason":
			if json.Unmarshal(value, &req.Reason) != nil {
				return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape}
			}
			if !refundReasons[req.Reason] {
				return RefundRequest{}, idem.Fingerprint{}, &InvalidError{"reason", "must be duplicate, fraudulent or requested_by_customer"}
			}
		default:
			return RefundRequest{}, idem.Fingerprint{}, &BodyError{reasonRefundShape}
		}
	}
	fields["charge"], _ = json.Marshal(chargeID)
	b, _ := json.Marshal(fields) // raw values read from valid JSON
	canonical, err = idem.CanonicalJSON(b)
	if err != nil {
		return RefundRequest{}, idem.Fingerprint{}, fmt.Errorf("charge: re-canonicalize the refund body: %w", err)
	}
	return req, idem.FingerprintOf(canonical), nil
}

// reasonRefundShape is the *BodyError of a refund body of another shape.
const reasonRefundShape = "The body must be an object with an optional number amount and an optional string reason, and no other fields."

// ParseCaptureBody reads a capture's body: empty, {}, or {"amount": n}.
// Zero means all that the authorization holds.
func ParseCaptureBody(body []byte) (int64, error) {
	if len(body) > MaxBodyBytes {
		return 0, &BodyError{reasonTooLarge}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return 0, nil
	}
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return 0, &BodyError{reasonJSON}
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(canonical, &fields) != nil || fields == nil {
		return 0, &BodyError{reasonCaptureShape}
	}
	var amount int64
	for name, value := range fields {
		if c := value[0]; name != "amount" || c != '-' && (c < '0' || c > '9') {
			return 0, &BodyError{reasonCaptureShape}
		}
		if amount, err = ParseAmount(json.Number(value)); err != nil {
			return 0, err
		}
		if amount < MinAmount || amount > MaxAmount {
			return 0, &InvalidError{"amount", fmt.Sprintf("must be between %d and %d minor units", MinAmount, MaxAmount)}
		}
	}
	return amount, nil
}

// reasonCaptureShape is the *BodyError of a capture body of another shape.
const reasonCaptureShape = "The body must be empty or an object with an optional number amount, and no other fields."

// ParsePage validates a list's query parameters. limit is from 1 to
// MaxRefundsLimit, DefaultRefundsLimit when absent. starting_after is a
// refund's id. A parameter present but empty is refused.
func ParsePage(query map[string]string) (Page, error) {
	p := Page{Limit: DefaultRefundsLimit}
	if v, ok := query["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxRefundsLimit || strconv.Itoa(n) != v {
			return Page{}, &InvalidError{"limit", fmt.Sprintf("must be a whole number from 1 to %d", MaxRefundsLimit)}
		}
		p.Limit = n
	}
	if v, ok := query["starting_after"]; ok {
		if !IsRefundID(v) {
			return Page{}, &InvalidError{"starting_after", "must be the id of a refund of this charge"}
		}
		p.StartingAfter = v
	}
	return p, nil
}

// ParseCommandID validates a client-supplied idempotency key.
func ParseCommandID(s string) (CommandID, error) {
	if err := idem.CheckClientKey(s); err != nil {
		return "", err
	}
	return CommandID(s), nil
}

// ParseAmount reads an amount written as a JSON number. As in JSON
// Schema's integer, what counts is the value, not how it is written. 1500,
// 1500.0 and 1.5e3 are all 1500. 1500.5 is refused, and so is anything but
// a number (an empty n). NewRequest checks the range of what it returns.
func ParseAmount(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	invalid := &InvalidError{"amount", fmt.Sprintf("must be a whole number between %d and %d minor units", MinAmount, MaxAmount)}
	// Once the value is known to be in range, its exponent is small. So it
	// is checked exactly: 1500.0000000000000001 is 1500 as a float64.
	if f, err := n.Float64(); err != nil || f < MinAmount || f > MaxAmount {
		return 0, invalid
	}
	if r, ok := new(big.Rat).SetString(n.String()); ok && r.IsInt() {
		return r.Num().Int64(), nil
	}
	return 0, invalid
}
