package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

func ExampleStore() {
	ctx := context.Background()
	clients, err := testkit.NewClients()
	if err != nil {
		fmt.Println(err)
		return
	}
	table, drop, err := testkit.NewTable(ctx, idem.TableInput("example"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	store, err := idem.New(clients.DynamoDB, table)
	if err != nil {
		fmt.Println(err)
		return
	}

	// The client minted "order-42" once, when the customer pressed Pay.
	key, _ := idem.NewKey("acme", "create-charge", "order-42")
	fp, _ := idem.FingerprintJSON([]byte(`{"amount": 1500, "currency": "EUR"}`))

	for attempt := 1; attempt <= 2; attempt++ {
		begun, err := store.Begin(ctx, key, fp, nil)
		switch {
		case errors.Is(err, idem.ErrInFlight):
			fmt.Println("in flight: try later")
		case err != nil:
			fmt.Println(err)
		case begun.Replay != nil:
			fmt.Printf("attempt %d: replay %d %s\n", attempt, begun.Replay.Status, begun.Replay.Body)
		default:
			// Do the effect here, then record it together with its result.
			resp := idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}
			if err := store.Commit(ctx, begun.Lease, resp); err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf("attempt %d: charged\n", attempt)
		}
	}

	// The same key with another body is refused, never reinterpreted.
	other, _ := idem.FingerprintJSON([]byte(`{"amount": 9900, "currency": "EUR"}`))
	_, err = store.Begin(ctx, key, other, nil)
	fmt.Println(errors.Is(err, idem.ErrFingerprintMismatch))
	// Output:
	// attempt 1: charged
	// attempt 2: replay 201 {"id":"ch_1"}
	// true
}

func ExampleCanonicalJSON() {
	a, _ := idem.CanonicalJSON([]byte(`{ "b": [1, 2.50], "a": "x" }`))
	fmt.Println(string(a))
	_, err := idem.CanonicalJSON([]byte(`{"a":1,"a":2}`))
	fmt.Println(errors.Is(err, idem.ErrInvalidJSON))
	// Output:
	// {"a":"x","b":[1,2.50]}
	// true
}
