package dynamostore

import (
	"context"
	"errors"
	"net"
	"sync"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// Attempts watches each attempt the SDK makes at one call, inside its
// retry loop. The call's error is only its last attempt's. A claim whose
// first attempt was applied, its answer lost, and whose retries were then
// throttled fails with a throttling error. Only a call DynamoDB never got
// or refused unprocessed, at every attempt, is known not to have been
// applied. The store watches its own writes so. A caller's writes beside
// it may use one Attempts per call.
type Attempts struct {
	mu      sync.Mutex
	n       int
	unknown bool
}

// Option adds the watch to one call's middleware stack, right inside the
// SDK's retry loop. A client that ignores it (not the SDK's) makes no
// attempt seen, which counts as unknown.
func (a *Attempts) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("idem.attempts", a.handle), "Retry", middleware.After)
	})
}

func (a *Attempts) handle(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleFinalize(ctx, in)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	if err != nil && !unprocessed(err) {
		a.unknown = true
	}
	return out, md, err
}

// Refused reports whether the call failed unprocessed at every attempt:
// then it wrote nothing.
func (a *Attempts) Refused() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n > 0 && !a.unknown
}

// unprocessed reports whether err is an attempt DynamoDB never processed.
// Either the connection could not be made, so the request never left, or
// DynamoDB answered with one of its 4xx: throttling, a validation or
// permission error, a failed condition. None of those follows a write it
// applied. A server error may, and any other transport error says nothing.
func unprocessed(err error) bool {
	var (
		dial *net.OpError
		resp *awshttp.ResponseError
	)
	if errors.As(err, &dial) && dial.Op == "dial" {
		return true
	}
	if !errors.As(err, &resp) {
		return false
	}
	code := resp.HTTPStatusCode()
	return code >= 400 && code < 500
}
