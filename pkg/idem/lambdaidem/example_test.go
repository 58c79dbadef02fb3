package lambdaidem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// An API of another team's: its Lambda authorizer puts the tenant in its
// context, its clients send X-Request-Id, a request's sent_at is not part
// of what it asks for, and its problem types are its own.
func ExampleHTTP() {
	store := memstore.New() // an *dynamostore.Store on DynamoDB in production
	create := func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		fmt.Println("creating the order")
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"id":"o-1"}`)}), nil
	}
	handler := lambdaidem.HTTP(store, "create-order", create, func(o *lambdaidem.Options) {
		o.Header = "X-Request-Id"
		o.Tenant = lambdaidem.TenantFromLambdaContext("tenantId")
		o.Fingerprint = lambdaidem.FingerprintFields("item", "qty")
		o.ProblemBase = "https://api.example.com/problems/"
		o.OnReplay = func(_ context.Context, r lambdaidem.Request, _ idem.Key, resp idem.Response) idem.Response {
			fmt.Println("replayed on", r.Route)
			return resp
		}
	})

	for _, sentAt := range []string{"12:00:00", "12:00:05"} {
		req := events.APIGatewayV2HTTPRequest{
			RouteKey: "POST /orders",
			Headers:  map[string]string{"x-request-id": "req-7"},
			Body:     `{"item":"book","qty":1,"sent_at":"` + sentAt + `"}`,
		}
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"tenantId": "acme"}}
		resp, _ := handler(context.Background(), req)
		fmt.Println(resp.StatusCode, resp.Body, "replayed:", resp.Headers[lambdaidem.HeaderReplayed] == "true")
	}
	// Output:
	// creating the order
	// 201 {"id":"o-1"} replayed: false
	// replayed on POST /orders
	// 201 {"id":"o-1"} replayed: true
}

// Switching idempotency on for an API whose callers do not send keys yet:
// a request without one still runs, is logged by route, and its answer
// says the key will be required.
func ExampleKeyMigration() {
	store := memstore.New()
	create := func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 201, Body: []byte(`{"id":"o-1"}`)}), nil
	}
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	handler := lambdaidem.HTTP(store, "create-order", create, func(o *lambdaidem.Options) {
		o.Tenant = lambdaidem.TenantConstant("shop")
		o.Migration = &lambdaidem.KeyMigration{
			Since:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Sunset: time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC),
			Link:   "https://api.example.com/docs/idempotency",
			Logger: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime})),
		}
	})

	resp, _ := handler(context.Background(), events.APIGatewayV2HTTPRequest{RouteKey: "POST /orders", Body: `{"item":"book"}`})
	fmt.Println(resp.StatusCode)
	for _, h := range []string{"Deprecation", "Sunset", "Link"} {
		fmt.Printf("%s: %s\n", h, resp.Headers[h])
	}
	// Output:
	// level=WARN msg="lambdaidem: request without an idempotency key ran unprotected" operation=create-order route="POST /orders"
	// 201
	// Deprecation: @1767225600
	// Sunset: Wed, 01 Jul 2026 00:00:00 GMT
	// Link: <https://api.example.com/docs/idempotency>; rel="deprecation"
}

// A producer that resends a message stamps it with a new sent_at and SQS
// gives it a new message id: keyed by the producer's order_id and
// fingerprinted without sent_at, the resend is a no-op.
func ExampleFingerprintMessageFields() {
	store := memstore.New()
	fulfil := func(ctx context.Context, msg events.SQSMessage, l *idem.Lease) (idem.Outcome, error) {
		fmt.Println("shipping", l.Key.ClientKey())
		return idem.Succeeded(idem.Response{}), nil
	}
	handler := lambdaidem.SQS(store, "fulfil-order", fulfil, func(o *lambdaidem.SQSOptions) {
		o.Key = lambdaidem.KeyFromJSONField("order_id")
		o.Fingerprint = lambdaidem.FingerprintMessageFields("order_id", "items")
	})

	arn := "arn:aws:sqs:eu-west-1:123456789012:orders"
	resp, _ := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-1", EventSourceARN: arn, Body: `{"order_id":"o-42","items":["book"],"sent_at":"12:00:00"}`},
		{MessageId: "m-2", EventSourceARN: arn, Body: `{"order_id":"o-42","items":["book"],"sent_at":"12:00:05"}`},
	}})
	fmt.Println("to redeliver:", len(resp.BatchItemFailures))
	// Output:
	// shipping o-42
	// to redeliver: 0
}

var errWarehouseDown = errors.New("warehouse unavailable")

// An SQS handler processes each order once, however often it is sent: a
// second copy of o-1 under another message id is a no-op, and the message
// whose processing did not happen is reported for another delivery.
func ExampleSQS() {
	store := memstore.New()
	fulfil := func(ctx context.Context, msg events.SQSMessage, l *idem.Lease) (idem.Outcome, error) {
		if msg.Body == `{"order":"o-2"}` {
			return idem.NotApplied(idem.Response{}), errWarehouseDown
		}
		fmt.Println("shipping", msg.Body)
		return idem.Succeeded(idem.Response{}), nil
	}
	handler := lambdaidem.SQS(store, "fulfil-order", fulfil, func(o *lambdaidem.SQSOptions) {
		o.Key = lambdaidem.KeyFromAttribute("order-id")
	})

	message := func(id, order string) events.SQSMessage {
		return events.SQSMessage{
			MessageId:         id,
			EventSourceARN:    "arn:aws:sqs:eu-west-1:123456789012:orders",
			Body:              `{"order":"` + order + `"}`,
			MessageAttributes: map[string]events.SQSMessageAttribute{"order-id": {DataType: "String", StringValue: aws.String(order)}},
		}
	}
	resp, _ := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		message("m1", "o-1"), message("m2", "o-2"), message("m3", "o-1"),
	}})
	fmt.Println("redeliver:", resp.BatchItemFailures)
	// Output:
	// shipping {"order":"o-1"}
	// redeliver: [{m2}]
}

// By default the fingerprint covers the route's path parameters: a
// client that reuses one key and one body for two orders gets 422 for
// the second, not the first order's answer.
func ExampleFingerprintRequest() {
	store := memstore.New()
	put := func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{Status: 200, Body: []byte(`{"id":"` + req.PathParameters["id"] + `"}`)}), nil
	}
	handler := lambdaidem.HTTP(store, "put-order", put, func(o *lambdaidem.Options) {
		o.Tenant = lambdaidem.TenantConstant("shop")
	})

	for _, id := range []string{"o-1", "o-1", "o-2"} {
		resp, _ := handler(context.Background(), events.APIGatewayV2HTTPRequest{
			RouteKey:       "PUT /orders/{id}",
			PathParameters: map[string]string{"id": id},
			Headers:        map[string]string{"idempotency-key": "k-1"},
			Body:           `{"item":"book"}`,
		})
		fmt.Println(id, resp.StatusCode, resp.Headers[lambdaidem.HeaderReplayed] == "true")
	}
	// Output:
	// o-1 200 false
	// o-1 200 true
	// o-2 422 false
}

// A message whose key another attempt holds comes back when that
// attempt's lease ends. Visibility is given the change to make; here it
// prints it, where the package doc's three lines send it to SQS.
func ExampleSQS_visibility() {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(func(o *memstore.Options) { o.Clock = func() time.Time { return t0 } })
	msg := events.SQSMessage{
		MessageId: "m-1", ReceiptHandle: "rh-1", Body: `{"order":"o-1"}`,
		EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:orders",
	}
	held, _ := idem.NewKey("orders", "fulfil-order", "m-1")
	fp, _ := idem.FingerprintJSON([]byte(msg.Body))
	_, _ = store.Begin(context.Background(), held, fp, nil) // another attempt, holding the key for 30s

	handler := lambdaidem.SQS(store, "fulfil-order", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{}), nil
	}, func(o *lambdaidem.SQSOptions) {
		o.Visibility = func(_ context.Context, c lambdaidem.VisibilityChange) error {
			fmt.Println("deliver", c.ReceiptHandle, "again in", c.VisibilityTimeout, "s, from", c.QueueURL)
			return nil
		}
	})
	resp, _ := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg}})
	fmt.Println("redeliver:", resp.BatchItemFailures)
	// Output:
	// deliver rh-1 again in 30 s, from https://sqs.eu-west-1.amazonaws.com/123456789012/orders
	// redeliver: [{m-1}]
}

// A scheduled function recovers the stuck commands of a table shared by
// two operations: an invoice's by asking billing what it did under the
// command's reference, an order's by releasing it for a retry. Its main
// calls lambda.Start(sweep).
func ExampleSweep() {
	clock := idemtest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	for _, op := range []string{"send-invoice", "create-order"} { // two attempts that die
		key, _ := idem.NewKey("acme", op, "order-42")
		_, _ = store.Begin(context.Background(), key, idem.FingerprintOf([]byte(op)), nil)
	}
	clock.Advance(time.Minute) // their leases run out

	lookupInvoice := func(ctx context.Context, reference string) (string, error) { return "inv-1", nil } // billing's client
	sweep := lambdaidem.Sweep(store, idem.ByOperation(map[string]idem.Resolver{
		"send-invoice": func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
			id, err := lookupInvoice(ctx, idem.Reference("invoice", l.Key, l.CreatedAt))
			if err != nil {
				return idem.Postponed(clock.Now().Add(time.Minute)), nil
			}
			return idem.SucceededJSON(id)
		},
		"create-order": idem.ReleaseLocalEffect,
	}), func(o *lambdaidem.SweepOptions) { o.Logger = slog.New(slog.DiscardHandler) })

	swept, err := sweep(context.Background())
	fmt.Printf("found %d, settled %d, error %v\n", swept.Found, swept.Settled, err)
	// Output:
	// found 2, settled 2, error <nil>
}
