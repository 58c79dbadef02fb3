package idemtest

import (
	"context"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// CallCounter counts DynamoDB calls by operation name, once per logical
// call (SDK retries of one call are not counted again).
type CallCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// Option installs the counter on a DynamoDB client.
func (c *CallCounter) Option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("CallCounter",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					c.mu.Lock()
					if c.counts == nil {
						c.counts = map[string]int{}
					}
					c.counts[awsmiddleware.GetOperationName(ctx)]++
					c.mu.Unlock()
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

// Snapshot returns the counts so far and resets them.
func (c *CallCounter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = nil
	if out == nil {
		out = map[string]int{}
	}
	return out
}
