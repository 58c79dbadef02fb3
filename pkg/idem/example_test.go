package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// errProviderDown and errProviderTimeout stand for a payment provider's
// answers: it refused before acting, or it may have acted.
var (
	errProviderDown    = errors.New("provider unavailable")
	errProviderTimeout = errors.New("provider timed out")
)

// Do runs the charge once per intent. The function tells Do what became
// of the effect: success with the charge row to commit with the record,
// a decline to store, "did not happen" to release the key, or "unknown"
// to leave the record IN_FLIGHT for a reconciler. In production the
// backend is an *dynamostore.Store on DynamoDB; here it is the in-memory store.
func ExampleDo() {
	ctx := context.Background()
	store := memstore.New()
	key, _ := idem.NewKey("acme", "create-charge", "order-42")
	fp, _ := idem.FingerprintJSON([]byte(`{"amount": 1500, "currency": "EUR"}`))

	// chargeCard stands for the provider's client.
	chargeCard := func(ctx context.Context, reference string) (string, error) {
		fmt.Println("charging card")
		return "ch_1", nil
	}
	charge := func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		// Every attempt at this command sends the same reference, and it
		// holds no part of the key.
		id, err := chargeCard(ctx, idem.Reference("charge", l.Key, l.CreatedAt))
		switch {
		case errors.Is(err, errProviderDown):
			return idem.NotApplied(idem.Response{Status: 503}), nil
		case errors.Is(err, errProviderTimeout):
			return idem.Unknown(idem.Response{Status: 503}), nil
		case err != nil:
			return idem.Outcome{}, err // unknown too, and err is returned
		}
		row := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("charges") /* the charge row */}}
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"id":"` + id + `"}`)}, row), nil
	}

	for attempt := 1; attempt <= 2; attempt++ {
		res, err := idem.Do(ctx, store, key, fp, []byte(`{"amount":1500}`), charge)
		var inflight *idem.InFlightError
		switch {
		case errors.As(err, &inflight):
			fmt.Println("409: in progress until", inflight.LeaseExpiresAt)
		case errors.Is(err, idem.ErrMismatch):
			fmt.Println("422: key reused")
		case err != nil:
			fmt.Println("500:", err)
		default:
			fmt.Printf("attempt %d: %d %s replayed=%v\n", attempt, res.Response.Status, res.Response.Body, res.Replayed)
		}
	}
	fmt.Println("rows committed:", len(store.Writes()))
	// Output:
	// charging card
	// attempt 1: 201 {"id":"ch_1"} replayed=false
	// attempt 2: 201 {"id":"ch_1"} replayed=true
	// rows committed: 1
}

// The lifecycle by hand: Begin, then Commit, Fail or Release. *dynamostore.Store
// has the same methods on DynamoDB.
func Example_lifecycle() {
	ctx := context.Background()
	store := memstore.New()

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
	_, err := store.Begin(ctx, key, other, nil)
	fmt.Println(errors.Is(err, idem.ErrMismatch))
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
