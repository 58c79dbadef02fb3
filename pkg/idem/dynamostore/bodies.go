package dynamostore

import (
	"context"
	"fmt"
	"io"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// GuardRequestBodies keeps net/http from dropping an answer because the
// SDK closed the request body. The SDK would send the applied call again.
// Add it to the client's configuration:
//
//	cfg.APIOptions = append(cfg.APIOptions, dynamostore.GuardRequestBodies)
//
// It hands net/http a request body without WriteTo. The SDK closes the
// body once the answer's headers arrive. net/http may still read it then,
// for bytes past Content-Length. A closed body's WriteTo fails with io.EOF.
// net/http then closes the connection under the answer. The SDK retries
// the call, which was applied: a claim then meets its own record. A
// closed Read just ends.
func GuardRequestBodies(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("GuardRequestBodies", func(
		ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler,
	) (middleware.DeserializeOutput, middleware.Metadata, error) {
		if req, ok := in.Request.(*smithyhttp.Request); ok {
			if stream, ok := req.GetStream().(interface {
				io.ReadSeeker
				io.WriterTo
			}); ok {
				hidden, err := req.SetStream(readSeeker{stream})
				if err != nil {
					return middleware.DeserializeOutput{}, middleware.Metadata{}, fmt.Errorf("dynamostore: request stream: %w", err)
				}
				hidden.ContentLength = req.ContentLength // as earlier steps set it
				in.Request = hidden
			}
		}
		return next.HandleDeserialize(ctx, in)
	}), middleware.After)
}

// readSeeker is a stream with only Read and Seek.
type readSeeker struct{ io.ReadSeeker }
