package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// An operation whose only effect is the row it commits with the record
// fails with an error, the reflex of a handler: its outcome is unknown, so
// its key stays IN_FLIGHT and a retry is told "in progress". A sweep with
// ReleaseLocalEffect releases it (the failed attempt cannot have written
// its row, and now never will), and the next retry runs the operation
// again.
func ExampleReleaseLocalEffect() {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	key, _ := idem.NewKey("acme", "create-order", "order-42")
	fp := idem.FingerprintOf([]byte(`{"sku":"tea"}`))

	attempts := 0
	createOrder := func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		if attempts++; attempts == 1 {
			return idem.Outcome{}, errors.New("connection reset")
		}
		row := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("orders") /* the order row */}}
		return idem.Succeeded(idem.Response{Status: 201}, row), nil
	}
	res, err := idem.Do(ctx, store, key, fp, nil, createOrder)
	fmt.Println("first attempt:", res.Status, err != nil)
	_, err = idem.Do(ctx, store, key, fp, nil, createOrder)
	fmt.Println("retry, in progress:", errors.Is(err, idem.ErrInFlight))

	clock.Advance(time.Minute) // the attempt's lease runs out
	swept, err := idem.Sweep(ctx, store, idem.ReleaseLocalEffect)
	fmt.Printf("swept: %d found, %d settled, %v\n", swept.Found, swept.Settled, err)

	res, err = idem.Do(ctx, store, key, fp, nil, createOrder)
	fmt.Println("retry:", res.Status, res.Response.Status, err, "after", attempts, "attempts")
	// Output:
	// first attempt: IN_FLIGHT true
	// retry, in progress: true
	// swept: 1 found, 1 settled, <nil>
	// retry: SUCCEEDED 201 <nil> after 2 attempts
}

// A payment's attempt dies after it may have charged the card. The
// reconciler recovers the key: it takes the lease over and its resolver
// asks the provider, by the reference derived from the command, what
// happened, postponing while the provider cannot say.
func ExampleRecover() {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	key, _ := idem.NewKey("acme", "create-charge", "order-42")
	fp := idem.FingerprintOf([]byte(`{"amount":1500}`))
	if _, err := store.Begin(ctx, key, fp, []byte(`{"amount":1500}`)); err != nil { // the attempt that dies
		fmt.Println(err)
		return
	}

	// lookup stands for the provider's client; it is down at first.
	down := true
	lookup := func(ctx context.Context, reference string) (chargeID string, err error) {
		if down {
			return "", errors.New("provider unavailable")
		}
		return "ch_1", nil
	}
	resolve := func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		id, err := lookup(ctx, idem.Reference("charge", l.Key, l.CreatedAt)) // what the attempt sent
		if err != nil {
			return idem.Postponed(clock.Now().Add(30 * time.Second)), nil
		}
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"id":"` + id + `"}`)}), nil
	}
	try := func() {
		r, err := idem.Recover(ctx, store, key, resolve)
		fmt.Println(r.Status, r.Lease != nil, err)
	}

	try() // the attempt's lease has not run out: left alone
	clock.Advance(time.Minute)
	try() // taken over, provider down: postponed
	down = false
	clock.Advance(time.Minute)
	try() // taken over again: the charge is found and committed

	res, _ := idem.Do(ctx, store, key, fp, nil, nil)
	fmt.Println("retry:", res.Replayed, res.Response.Status, string(res.Response.Body))
	// Output:
	// IN_FLIGHT false <nil>
	// IN_FLIGHT true <nil>
	// SUCCEEDED true <nil>
	// retry: true 201 {"id":"ch_1"}
}

// A DoJSON function asks a warehouse to ship an order, then crashes before
// its result is stored. The key stays IN_FLIGHT. A sweep's resolver reads
// the order back from the lease's intent, asks the warehouse, and settles
// the command with the shipment. The retry gets that shipment, and the
// warehouse shipped once.
func ExampleSucceededJSON() {
	type order struct {
		ID  string `json:"id"`
		SKU string `json:"sku"`
	}
	type shipment struct {
		Order    string `json:"order"`
		Tracking string `json:"tracking"`
	}
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	shipped := map[string]string{} // the warehouse: order id to tracking number
	calls := 0
	ship := func(ctx context.Context, l *idem.Lease, o order) (shipment, error) {
		calls++
		shipped[o.ID] = "TRK-1"
		return shipment{}, errors.New("crashed after shipping") // the answer is lost
	}
	o := order{ID: "order-42", SKU: "tea"}
	key, _ := idem.NewKey("acme", "ship-order", o.ID)

	_, err := idem.DoJSON(ctx, store, key, o, func(ctx context.Context, l *idem.Lease) (shipment, error) { return ship(ctx, l, o) })
	fmt.Println("first call:", err)

	clock.Advance(time.Minute) // the attempt's lease runs out
	resolve := func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		var o order
		if err := json.Unmarshal(l.Intent, &o); err != nil {
			return idem.Outcome{}, err
		}
		tracking, ok := shipped[o.ID]
		if !ok {
			return idem.NotApplied(idem.Response{}), nil // never shipped: a retry ships it
		}
		return idem.SucceededJSON(shipment{Order: o.ID, Tracking: tracking})
	}
	swept, err := idem.Sweep(ctx, store, resolve)
	fmt.Printf("swept: %d found, %d settled, %v\n", swept.Found, swept.Settled, err)

	s, err := idem.DoJSON(ctx, store, key, o, func(ctx context.Context, l *idem.Lease) (shipment, error) { return ship(ctx, l, o) })
	fmt.Println("retry:", s, err, "warehouse calls:", calls)
	// Output:
	// first call: crashed after shipping
	// swept: 1 found, 1 settled, <nil>
	// retry: {order-42 TRK-1} <nil> warehouse calls: 1
}
