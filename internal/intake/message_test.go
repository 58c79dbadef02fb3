package intake_test

import (
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/intake"
)

func TestParseMessageRefusesMalformedMessages(t *testing.T) {
	t.Parallel()
	const req = `{"amount":1500,"currency":"EUR","source":"tok_visa"}`
	tests := map[string]struct{ body, field string }{
		"not json":            {`{"tenant":`, ""},
		"not an object":       {`["acme"]`, ""},
		"duplicate member":    {`{"tenant":"acme","command_id":"a","command_id":"b","request":` + req + `}`, ""},
		"unknown member":      {`{"tenant":"acme","command_id":"a","request":` + req + `,"key":"a"}`, ""},
		"member case":         {`{"Tenant":"acme","command_id":"a","request":` + req + `}`, ""},
		"no tenant":           {`{"command_id":"a","request":` + req + `}`, "tenant"},
		"null tenant":         {`{"tenant":null,"command_id":"a","request":` + req + `}`, "tenant"},
		"bad tenant":          {`{"tenant":"ac#me","command_id":"a","request":` + req + `}`, "tenant"},
		"number id":           {`{"tenant":"acme","command_id":42,"request":` + req + `}`, "command_id"},
		"empty id":            {`{"tenant":"acme","command_id":"","request":` + req + `}`, "command_id"},
		"id with outer space": {`{"tenant":"acme","command_id":"a ","request":` + req + `}`, "command_id"},
		"no request":          {`{"tenant":"acme","command_id":"a"}`, "request"},
		"request as string":   {`{"tenant":"acme","command_id":"a","request":"{\"amount\":1500}"}`, "request"},
		"fractional amount":   {`{"tenant":"acme","command_id":"a","request":{"amount":1.5,"currency":"EUR","source":"tok_visa"}}`, "request"},
		"extra request field": {`{"tenant":"acme","command_id":"a","request":{"amount":1500,"currency":"EUR","source":"tok_visa","x":1}}`, "request"},
		"lone surrogate":      {`{"tenant":"acme","command_id":"a","request":{"amount":1500,"currency":"EUR","source":"tok_visa","description":"\ud800"}}`, ""},
		"invalid UTF-8":       {"{\"tenant\":\"acme\",\"command_id\":\"a\",\"request\":{\"amount\":1500,\"currency\":\"EUR\",\"source\":\"tok_visa\",\"description\":\"caf\xe9\"}}", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := intake.ParseMessage(tt.body)
			var me *intake.MalformedError
			if !errors.As(err, &me) || me.Field != tt.field {
				t.Fatalf("ParseMessage: %v, want a *MalformedError of field %q", err, tt.field)
			}
		})
	}
}

// A message's fingerprint is the one POST /charges computes for the same
// body, however either writes it.
func TestParseMessageFingerprintsTheRequestAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	_, httpFP, err := charge.ParseBody([]byte(`{"amount":1500,"currency":"EUR","source":"tok_visa","description":"Order 42"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{
		`{"amount":1500,"currency":"EUR","source":"tok_visa","description":"Order 42"}`,
		`{ "description" : "Order 42", "source":"tok_visa", "currency":"EUR", "amount": 1.5e3 }`,
		`{"amount":1500.0,"currency":"EUR","source":"tok_visa","description":"Order \u0034\u0032"}`,
	} {
		cmd, err := intake.ParseMessage(`{"command_id":"order-42","request":` + req + `,"tenant":"acme"}`)
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		if cmd.Fingerprint != httpFP || cmd.Key.String() != "acme#create-charge#order-42" || cmd.Request.Money.Amount != 1500 {
			t.Errorf("%s: %+v, want the API's fingerprint %s", req, cmd, httpFP)
		}
	}
}
