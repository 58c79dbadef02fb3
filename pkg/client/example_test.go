package client_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/chargeonce/chargeonce/pkg/client"
)

// The command id is minted once, when the intent to charge is formed, and
// kept with it; Create and every retry inside it, and a later resumed call,
// all send that id, so the card is charged once.
func Example() {
	ctx := context.Background()
	st, err := startStack(ctx, nil, nil) // the local stack: handler, emulator, provider simulator
	if err != nil {
		fmt.Println("start stack:", err)
		return
	}
	defer st.Close()

	c, err := client.New(st.URL, client.WithToken("dev:acme"))
	if err != nil {
		fmt.Println(err)
		return
	}
	id := client.NewCommandID() // once, outside any retry loop; store it with the order
	order := client.Money{Amount: 1500, Currency: "EUR"}

	res, err := c.Create(ctx, id, order, "tok_visa", client.WithDescription("Order 42"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Charge.Status, res.Charge.Amount, res.Charge.Currency, "replayed:", res.Replayed)

	// Later (after a crash, say) the same intent is resumed with the same id.
	again, err := c.Create(ctx, id, order, "tok_visa", client.WithDescription("Order 42"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("replayed:", again.Replayed, "same charge:", again.Charge.ID == res.Charge.ID)

	// The same id with another amount is refused: it names another intent.
	_, err = c.Create(ctx, id, client.Money{Amount: 2000, Currency: "EUR"}, "tok_visa", client.WithDescription("Order 42"))
	fmt.Println("key reused:", errors.Is(err, client.ErrKeyReused))
	fmt.Println("cards charged:", st.Sim.Ledger().TotalCharges)
	// Output:
	// succeeded 1500 EUR replayed: false
	// replayed: true same charge: true
	// key reused: true
	// cards charged: 1
}
