//go:build samlocal

package sam

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/local/samlocal"
)

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
