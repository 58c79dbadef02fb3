package lambdaidem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// An HTTP API handler runs once per Idempotency-Key: the retry gets the
// stored answer marked as a replay, and the key reused with another body
// is refused. In a Lambda, pass the handler to lambda.Start and the store
// is an *idem.Store; here it is the in-memory one, invoked directly.
func ExampleHTTP() {
	store := memstore.New()
	create := func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
		fmt.Println("creating the order")
		row := types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String("orders"),
			Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "o-1"}},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		}}
		created := idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"o-1"}`)}
		return idem.Succeeded(created, row), nil
	}
	handler := lambdaidem.HTTP(store, "create-order", create, func(o *lambdaidem.HTTPOptions) {
		o.Tenant = lambdaidem.TenantFromJWTClaim("tenant_id")
	})

	request := func(body string) events.APIGatewayV2HTTPRequest {
		req := events.APIGatewayV2HTTPRequest{
			RouteKey: "POST /orders",
			Headers:  map[string]string{"content-type": "application/json", "idempotency-key": "k-7"},
			Body:     body,
		}
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"tenant_id": "acme"}},
		}
		return req
	}
	for _, body := range []string{`{"item":"book"}`, `{ "item": "book" }`, `{"item":"lamp"}`} {
		resp, _ := handler(context.Background(), request(body))
		fmt.Println(resp.StatusCode, resp.Headers["Content-Type"], "replayed:", resp.Headers[lambdaidem.HeaderReplayed] == "true")
	}
	// Output:
	// creating the order
	// 201 application/json replayed: false
	// 201 application/json replayed: true
	// 422 application/problem+json replayed: false
}

// errWarehouseDown stands for a dependency that refused before acting.
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
