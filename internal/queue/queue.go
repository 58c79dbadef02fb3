// Package queue provides the queues' definition (main queue, dead-letter
// queue, redrive policy, timeouts), the one place tests, the local stack
// and the SAM template check take it from, shared by the reconcile queue
// and the charge-requests queue (package intake has its messages), and the
// reconcile messages the charge function and the sweeper send.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// The queues' settings. template.yaml must agree (a test checks).
const (
	// ReconcileTimeout is the reconcile function's timeout.
	ReconcileTimeout = 30 * time.Second
	// IntakeTimeout is the intake function's timeout; the charge-requests
	// queue's visibility timeout assumes it is ReconcileTimeout.
	IntakeTimeout = ReconcileTimeout
	// VisibilityTimeout is six times the functions' timeout, as Lambda
	// advises for SQS event sources.
	VisibilityTimeout = 6 * ReconcileTimeout
	// MaxReceiveCount deliveries, then the message goes to the DLQ.
	MaxReceiveCount = 5
	// Retention of the main queue; shorter than the DLQ's, since a message
	// keeps its first enqueue time when it moves to the DLQ.
	Retention    = 4 * 24 * time.Hour
	DLQRetention = 14 * 24 * time.Hour
	// MaxDelay is the longest delivery delay SQS allows.
	MaxDelay = 15 * time.Minute
	// BatchSize is how many messages the reconcile and intake functions
	// take at once.
	BatchSize = 10
	// SendBatchMax is the most messages one SendMessageBatch call carries.
	SendBatchMax = 10
)

// API is the part of *sqs.Client this package uses.
type API interface {
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, optFns ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Queues are the URLs of a created queue and its DLQ.
type Queues struct {
	URL, DLQURL string
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) }

// Create creates the queue named name and its DLQ (name-dlq)
// with the settings above. It is what tests and the local stack use.
func Create(ctx context.Context, client API, name string) (Queues, error) {
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(name + "-dlq"),
		Attributes: map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): seconds(DLQRetention)},
	})
	if err != nil {
		return Queues{}, fmt.Errorf("queue: create %s-dlq: %w", name, err)
	}
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return Queues{}, fmt.Errorf("queue: %s-dlq arn: %w", name, err)
	}
	redrive, _ := json.Marshal(map[string]any{
		"deadLetterTargetArn": attrs.Attributes[string(types.QueueAttributeNameQueueArn)],
		"maxReceiveCount":     MaxReceiveCount,
	})
	main, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(types.QueueAttributeNameVisibilityTimeout):      seconds(VisibilityTimeout),
			string(types.QueueAttributeNameMessageRetentionPeriod): seconds(Retention),
			string(types.QueueAttributeNameRedrivePolicy):          string(redrive),
		},
	})
	if err != nil {
		return Queues{}, fmt.Errorf("queue: create %s: %w", name, err)
	}
	return Queues{URL: aws.ToString(main.QueueUrl), DLQURL: aws.ToString(dlq.QueueUrl)}, nil
}

// message is the body of a reconcile message.
type message struct {
	Key string `json:"key"`
}

func encode(k idem.Key) string {
	b, _ := json.Marshal(message{Key: k.String()})
	return string(b)
}

// ParseMessage returns the key a reconcile message names.
func ParseMessage(body string) (idem.Key, error) {
	var m message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return idem.Key{}, fmt.Errorf("queue: message: %w", err)
	}
	return idem.ParseKey(m.Key)
}

// Sender sends reconcile messages to one queue.
type Sender struct {
	client API
	url    string
}

// NewSender returns a Sender for the queue at url.
func NewSender(client API, url string) (*Sender, error) {
	if client == nil || url == "" {
		return nil, errors.New("queue: sender needs a client and a queue URL")
	}
	return &Sender{client: client, url: url}, nil
}

// EnqueueReconcile asks for key to be reconciled after delay (rounded up to
// whole seconds, at most MaxDelay): when its lease will have run out. The
// message carries ctx's trace context, if any (tracing.MessageAttributes).
func (s *Sender) EnqueueReconcile(ctx context.Context, key idem.Key, delay time.Duration) error {
	secs := int32(math.Ceil(min(max(delay, 0), MaxDelay).Seconds()))
	_, err := s.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(s.url), MessageBody: aws.String(encode(key)), DelaySeconds: secs,
		MessageAttributes: tracing.MessageAttributes(ctx),
	})
	if err != nil {
		return fmt.Errorf("queue: send: %w", err)
	}
	return nil
}

// SendBatch sends one message per key, SendBatchMax to a SendMessageBatch call. It
// returns the keys whose entries failed (to be found again by the next
// sweep) and the first call error, if any. Every message carries ctx's
// trace context, if any.
func (s *Sender) SendBatch(ctx context.Context, keys []idem.Key) (failed []idem.Key, err error) {
	attrs := tracing.MessageAttributes(ctx)
	for start := 0; start < len(keys); start += SendBatchMax {
		chunk := keys[start:min(start+SendBatchMax, len(keys))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, k := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(encode(k)), MessageAttributes: attrs,
			}
		}
		out, cerr := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
		if cerr != nil {
			failed = append(failed, chunk...)
			if err == nil {
				err = fmt.Errorf("queue: send batch: %w", cerr)
			}
			continue
		}
		for _, f := range out.Failed {
			if i, perr := strconv.Atoi(aws.ToString(f.Id)); perr == nil && i < len(chunk) {
				failed = append(failed, chunk[i])
			}
		}
	}
	return failed, err
}
