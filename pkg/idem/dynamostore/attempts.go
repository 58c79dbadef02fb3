package dynamostore

import (
	"context"
	"errors"
	"sync"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// attempts watches each attempt the SDK makes at one call, inside its
// retry loop. The call's error is only its last attempt's: a claim whose
// first attempt was applied, its answer lost, and whose retries were then
// throttled fails with a throttling error. Only a call DynamoDB refused
// unprocessed every time (a 4xx at each attempt) is known not to have been
// applied.
type attempts struct {
	mu      sync.Mutex
	n       int
	unknown bool
}

// option adds the watch to one call's middleware stack, right inside the
// SDK's retry loop. A client that ignores it (not the SDK's) makes no
// attempt seen, which counts as unknown.
func (a *attempts) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("idem.attempts", a.handle), "Retry", middleware.After)
	})
}

func (a *attempts) handle(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleFinalize(ctx, in)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	if err != nil && !unprocessed(err) {
		a.unknown = true
	}
	return out, md, err
}

// refused reports whether DynamoDB refused every attempt unprocessed.
func (a *attempts) refused() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n > 0 && !a.unknown
}

// unprocessed reports whether err is DynamoDB refusing a request before
// processing it: any of its 4xx answers (throttling, a validation or
// permission error, a failed condition), none of which follows a write it
// applied. A server error may, and a transport error says nothing.
func unprocessed(err error) bool {
	var resp *awshttp.ResponseError
	if !errors.As(err, &resp) {
		return false
	}
	code := resp.HTTPStatusCode()
	return code >= 400 && code < 500
}
