package testkit

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
)

// PostCharge is the POST /charges event API Gateway hands the charge
// function. tenant is in the authorizer's TenantClaim claim; if empty,
// there is no authorizer context. key is the Idempotency-Key; if empty,
// there is no header. body is the JSON body.
func PostCharge(tenant, key, body string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RouteKey: httpapi.RouteCreate,
		RawPath:  "/charges",
		Headers:  map[string]string{"content-type": httpapi.ContentTypeJSON},
		Body:     body,
	}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.HTTP.Path = req.RawPath
	if key != "" {
		req.Headers["idempotency-key"] = key
	}
	if tenant != "" {
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{TenantClaim: tenant}},
		}
	}
	return req
}

// GetCharge is the GET /charges/{id} event, tenant as for PostCharge.
func GetCharge(tenant, id string) events.APIGatewayV2HTTPRequest {
	req := PostCharge(tenant, "", "")
	req.RouteKey, req.RawPath = httpapi.RouteGet, "/charges/"+id
	req.Headers = map[string]string{}
	req.PathParameters = map[string]string{"id": id}
	req.RequestContext.HTTP.Method, req.RequestContext.HTTP.Path = http.MethodGet, req.RawPath
	return req
}

// SQSEvent is the event Lambda's SQS event source hands a function for
// messages it received.
func SQSEvent(msgs ...sqstypes.Message) events.SQSEvent {
	var ev events.SQSEvent
	for _, m := range msgs {
		r := events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Attributes: m.Attributes, EventSource: "aws:sqs",
		}
		// The message attributes the receive asked for (the trace context).
		for name, v := range m.MessageAttributes {
			if r.MessageAttributes == nil {
				r.MessageAttributes = map[string]events.SQSMessageAttribute{}
			}
			r.MessageAttributes[name] = events.SQSMessageAttribute{StringValue: v.StringValue, DataType: aws.ToString(v.DataType)}
		}
		ev.Records = append(ev.Records, r)
	}
	return ev
}

// PostRefund is the POST /charges/{id}/refunds event, tenant and key as
// for PostCharge.
func PostRefund(tenant, key, chargeID, body string) events.APIGatewayV2HTTPRequest {
	req := PostCharge(tenant, key, body)
	req.RouteKey, req.RawPath = httpapi.RouteRefund, "/charges/"+chargeID+"/refunds"
	req.PathParameters = map[string]string{"id": chargeID}
	req.RequestContext.HTTP.Path = req.RawPath
	return req
}

// GetRefund is the GET /charges/{id}/refunds/{refund_id} event.
func GetRefund(tenant, chargeID, refundID string) events.APIGatewayV2HTTPRequest {
	req := GetCharge(tenant, chargeID)
	req.RouteKey, req.RawPath = httpapi.RouteGetRefund, "/charges/"+chargeID+"/refunds/"+refundID
	req.PathParameters["refund_id"] = refundID
	req.RequestContext.HTTP.Path = req.RawPath
	return req
}

// ListRefunds is the GET /charges/{id}/refunds event, with query as its
// raw query string. API Gateway joins a repeated parameter's values with
// commas.
func ListRefunds(tenant, chargeID, query string) events.APIGatewayV2HTTPRequest {
	req := GetCharge(tenant, chargeID)
	req.RouteKey, req.RawPath, req.RawQueryString = httpapi.RouteListRefunds, "/charges/"+chargeID+"/refunds", query
	req.RequestContext.HTTP.Path = req.RawPath
	values, _ := url.ParseQuery(query)
	if len(values) > 0 {
		req.QueryStringParameters = map[string]string{}
	}
	for k, v := range values {
		req.QueryStringParameters[k] = strings.Join(v, ",")
	}
	return req
}

// PostMove is POST /charges/{id}/capture or /cancel (verb), with body if
// any (and then its Content-Type), tenant as for PostCharge.
func PostMove(tenant, id, verb, body string) events.APIGatewayV2HTTPRequest {
	req := PostCharge(tenant, "", body)
	route := map[string]string{"capture": httpapi.RouteCapture, "cancel": httpapi.RouteCancel}[verb]
	req.RouteKey, req.RawPath = route, "/charges/"+id+"/"+verb
	req.PathParameters = map[string]string{"id": id}
	req.RequestContext.HTTP.Path = req.RawPath
	if body == "" {
		req.Headers = map[string]string{}
	}
	return req
}
