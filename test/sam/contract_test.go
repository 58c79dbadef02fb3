//go:build samlocal

package sam

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/chargeonce/chargeonce/internal/local/samlocal"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// check validates one answer against api/openapi.yaml, as
// internal/charge's validateContract does for the handler's.
func check(t *testing.T, method, path string, reqHeaders map[string]string, status int, header map[string]string, body string) {
	t.Helper()
	specRouter := testkit.SpecRouter(t)
	req, _ := http.NewRequest(method, "http://localhost"+path, nil)
	for k, v := range reqHeaders {
		req.Header.Set(k, v)
	}
	route, params, err := specRouter.FindRoute(req)
	if err != nil {
		t.Fatalf("openapi: no route for %s %s: %v", method, path, err)
	}
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  status,
		Header:  h,
		Body:    io.NopCloser(strings.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: answer %d %s violates api/openapi.yaml: %v", method, path, status, body, err)
	}
}

// queueVisible is the approximate number of visible messages on a
// queue of the stack.
func queueVisible(ctx context.Context, s *samlocal.Stack, url string) (string, error) {
	out, err := s.Clients.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return "", err
	}
	return out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)], nil
}
