package idem

import (
	"context"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// attempts watches each attempt the SDK makes at one call, inside its
// retry loop. The call's error is only its last attempt's: a claim whose
// first attempt was applied, its answer lost, and whose retries were then
// throttled fails with a throttling error. Only a call DynamoDB refused
// unprocessed every time is known not to have been applied.
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
// processing it: its throttling errors. A server error may follow a write
// that was applied, and a transport error says nothing.
func unprocessed(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded":
		return true
	}
	return false
}
