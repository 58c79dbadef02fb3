package eventsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
)

// Handler is a Lambda handler for SQS events with ReportBatchItemFailures.
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// API is the part of *sqs.Client the poller uses.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Defaults of the Options.
const (
	DefaultBatchSize    = 10
	DefaultWaitTime     = 20 * time.Second
	DefaultTimeout      = 30 * time.Second
	DefaultErrorBackoff = time.Second
)

// Options configure a Poller. Zero fields take the defaults.
type Options struct {
	// BatchSize is the most messages one invocation gets, 1 to 10: the
	// event source mapping's BatchSize. Default DefaultBatchSize.
	BatchSize int
	// WaitTime is the long-poll wait of each ReceiveMessage, in whole
	// seconds from 1s to 20s. Default DefaultWaitTime.
	WaitTime time.Duration
	// Timeout is the function timeout: each invocation's context has this
	// deadline. Default DefaultTimeout.
	Timeout time.Duration
	// ErrorBackoff is the pause after a failed ReceiveMessage. Default
	// DefaultErrorBackoff.
	ErrorBackoff time.Duration
	// Logger receives one record per batch and every failure. Default:
	// discard.
	Logger *slog.Logger
}

// Poller feeds one queue to one handler. Run it once at a time.
type Poller struct {
	client API
	url    string
	arn    string
	region string
	h      Handler
	opt    Options
}

// New returns a Poller for the queue at queueURL, whose ARN it looks up
// for the events' EventSourceARN.
func New(ctx context.Context, client API, queueURL string, h Handler, optFns ...func(*Options)) (*Poller, error) {
	if client == nil || queueURL == "" || h == nil {
		return nil, errors.New("eventsource: poller needs a client, a queue URL and a handler")
	}
	o := Options{BatchSize: DefaultBatchSize, WaitTime: DefaultWaitTime, Timeout: DefaultTimeout, ErrorBackoff: DefaultErrorBackoff}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.BatchSize < 1 || o.BatchSize > 10 || o.WaitTime < time.Second || o.WaitTime > 20*time.Second || o.Timeout <= 0 || o.ErrorBackoff <= 0 {
		return nil, fmt.Errorf("eventsource: options out of range: %+v", o)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return nil, fmt.Errorf("eventsource: queue arn: %w", err)
	}
	arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]
	parts := strings.Split(arn, ":") // arn:partition:sqs:region:account:name
	if len(parts) != 6 {
		return nil, fmt.Errorf("eventsource: queue arn %q is malformed", arn)
	}
	return &Poller{client: client, url: queueURL, arn: arn, region: parts[3], h: h, opt: o}, nil
}

// Batch is what one poll did.
type Batch struct {
	// Received is how many messages the handler got.
	Received int
	// Deleted is how many of them were settled and deleted.
	Deleted int
	// Retried is how many were left to be delivered again.
	Retried int
}

// Run polls until ctx is done, then returns nil. A failed receive is
// logged and retried after ErrorBackoff.
func (p *Poller) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if _, err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.opt.Logger.WarnContext(ctx, "sqs poll failed", "queue_arn", p.arn, "error", err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(p.opt.ErrorBackoff):
			}
		}
	}
	return nil
}

// Poll receives one batch (waiting up to WaitTime for it), invokes the
// handler with it and settles it. It returns an error only if the receive
// failed; a failed invocation or delete shows as retried messages.
func (p *Poller) Poll(ctx context.Context) (Batch, error) {
	out, err := p.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(p.url),
		MaxNumberOfMessages:         int32(p.opt.BatchSize),
		WaitTimeSeconds:             int32(p.opt.WaitTime / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return Batch{}, fmt.Errorf("eventsource: receive: %w", err)
	}
	if len(out.Messages) == 0 {
		return Batch{}, nil
	}
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(out.Messages))}
	for i, m := range out.Messages {
		ev.Records[i] = p.record(m)
	}
	requestID := uuid.NewString()
	failed, err := p.invoke(ctx, requestID, ev)
	if err != nil {
		p.opt.Logger.ErrorContext(ctx, "sqs batch invocation failed; the whole batch is retried",
			"queue_arn", p.arn, "request_id", requestID, "messages", len(ev.Records), "error", err.Error())
		return Batch{Received: len(ev.Records), Retried: len(ev.Records)}, nil
	}
	var done []types.DeleteMessageBatchRequestEntry
	for i, m := range out.Messages {
		if !failed[aws.ToString(m.MessageId)] {
			done = append(done, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
	}
	deleted := p.delete(ctx, done)
	b := Batch{Received: len(ev.Records), Deleted: deleted, Retried: len(ev.Records) - deleted}
	p.opt.Logger.InfoContext(ctx, "sqs batch", "queue_arn", p.arn, "request_id", requestID,
		"received", b.Received, "deleted", b.Deleted, "retried", b.Retried)
	return b, nil
}

// record is m as Lambda puts it in an SQS event.
func (p *Poller) record(m types.Message) events.SQSMessage {
	r := events.SQSMessage{
		MessageId:              aws.ToString(m.MessageId),
		ReceiptHandle:          aws.ToString(m.ReceiptHandle),
		Body:                   aws.ToString(m.Body),
		Md5OfBody:              aws.ToString(m.MD5OfBody),
		Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
		Attributes:             m.Attributes,
		MessageAttributes:      make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes)),
		EventSourceARN:         p.arn,
		EventSource:            "aws:sqs",
		AWSRegion:              p.region,
	}
	for name, v := range m.MessageAttributes {
		r.MessageAttributes[name] = events.SQSMessageAttribute{
			StringValue:      v.StringValue,
			BinaryValue:      v.BinaryValue,
			StringListValues: v.StringListValues,
			BinaryListValues: v.BinaryListValues,
			DataType:         aws.ToString(v.DataType),
		}
	}
	return r
}

// invoke runs the handler as one Lambda invocation and returns the message
// ids it reported as failed. Any failure of the invocation as a whole is an
// error.
func (p *Poller) invoke(ctx context.Context, requestID string, ev events.SQSEvent) (failed map[string]bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opt.Timeout)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: requestID})
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("eventsource: handler panicked: %v", r)
		}
	}()
	res, err := p.h(ctx, ev)
	switch {
	case err != nil:
		return nil, fmt.Errorf("eventsource: handler: %w", err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("eventsource: task timed out after %s", p.opt.Timeout)
	}
	inBatch := make(map[string]bool, len(ev.Records))
	for _, r := range ev.Records {
		inBatch[r.MessageId] = true
	}
	failed = make(map[string]bool, len(res.BatchItemFailures))
	for _, f := range res.BatchItemFailures {
		if !inBatch[f.ItemIdentifier] {
			return nil, fmt.Errorf("eventsource: batch item failure %q names no message of the batch", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, nil
}

// delete deletes the settled messages and returns how many were deleted.
// It runs even if ctx was cancelled meanwhile: their work is done.
func (p *Poller) delete(ctx context.Context, entries []types.DeleteMessageBatchRequestEntry) int {
	if len(entries) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := p.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(p.url), Entries: entries})
	if err != nil {
		p.opt.Logger.WarnContext(ctx, "sqs delete failed; the messages will be delivered again",
			"queue_arn", p.arn, "messages", len(entries), "error", err.Error())
		return 0
	}
	for _, f := range out.Failed {
		p.opt.Logger.WarnContext(ctx, "sqs delete of one message failed; it will be delivered again",
			"queue_arn", p.arn, "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
	}
	return len(out.Successful)
}
