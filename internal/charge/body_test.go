package charge_test

import (
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
)

// TestParseBodyRefusesIllFormedText: a description (or any string of the
// body) that is not Unicode text is refused as a whole body, before the
// fingerprint is taken. Decoded as U+FFFD it would be stored as something
// other than what was sent, and "\ud800" and "\udbff" would be one request.
// POST /charges and the charge-requests queue both read bodies here.
func TestParseBodyRefusesIllFormedText(t *testing.T) {
	t.Parallel()
	const pre = `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"`
	for name, body := range map[string]string{
		"lone high surrogate":           pre + `caf\ud800"}`,
		"lone low surrogate":            pre + `\udc00"}`,
		"surrogates in the wrong order": pre + `\ude00\ud83d"}`,
		"high surrogate, then a char":   pre + `\ud83d\u0041"}`,
		"invalid UTF-8":                 pre + "caf\xe9\"}",
		"surrogate encoded in UTF-8":    pre + "\xed\xa0\x80\"}",
		"in a member name":              `{"amount":1500,"currency":"EUR","source":"tok_visa","\ud800":""}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, _, err := charge.ParseBody([]byte(body))
			var be *charge.BodyError
			if !errors.As(err, &be) || !errors.Is(err, charge.ErrInvalidRequest) {
				t.Fatalf("ParseBody(%q) = %+v, %v; want a *BodyError", body, r, err)
			}
		})
	}
	r, _, err := charge.ParseBody([]byte(pre + `\ud83d\ude00 caf\u00e9"}`))
	if err != nil || r.Description != "😀 café" {
		t.Fatalf("a surrogate pair: %+v, %v; want the description 😀 café", r, err)
	}
}

// TestEmptyDescriptionIsNoDescription: an empty description is neither
// stored nor returned, so a body that sends one is the request without it,
// with its fingerprint, however the rest is written.
func TestEmptyDescriptionIsNoDescription(t *testing.T) {
	t.Parallel()
	_, want, err := charge.ParseBody([]byte(`{"amount":1500,"currency":"EUR","source":"tok_visa"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"amount":1500,"currency":"EUR","source":"tok_visa","description":""}`,
		`{ "description" : "", "source":"tok_visa", "currency":"EUR", "amount": 1.5e3 }`,
	} {
		r, fp, err := charge.ParseBody([]byte(body))
		if err != nil || fp != want || r.Description != "" || r.Money.Amount != 1500 {
			t.Errorf("%s: %+v, %s, %v; want the fingerprint %s of the body without a description", body, r, fp, err, want)
		}
	}
	if _, fp, err := charge.ParseBody([]byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":" "}`)); err != nil || fp == want {
		t.Errorf("a description of one space: %s, %v; want a fingerprint of its own", fp, err)
	}
}
