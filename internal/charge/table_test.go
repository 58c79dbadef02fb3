package charge_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestGetReadsStronglyConsistent: a charge answered 201 is found by the
// GET that follows it, which an eventually consistent read does not
// promise.
func TestGetReadsStronglyConsistent(t *testing.T) {
	t.Parallel()
	var consistent []bool
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
				return s.Initialize.Add(middleware.InitializeMiddlewareFunc("SeeGetItem",
					func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
						switch g := in.Parameters.(type) {
						case *dynamodb.GetItemInput:
							consistent = append(consistent, aws.ToBool(g.ConsistentRead))
						case *dynamodb.QueryInput:
							consistent = append(consistent, aws.ToBool(g.ConsistentRead))
						}
						return next.HandleInitialize(ctx, in)
					}), middleware.Before)
			})
		})
	}})
	created := h.do(post("acme", newKey(), visa))
	id, _ := chargeOf(t, created.Body)
	wantStatus(t, h.do(get("acme", id)), http.StatusOK)
	if len(consistent) != 1 || !consistent[0] {
		t.Fatalf("GET's reads, consistent: %v; want one strongly consistent read", consistent)
	}
}
