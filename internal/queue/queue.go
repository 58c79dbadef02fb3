// Package queue provides the queues' definition: main queue, dead-letter
// queue, redrive policy, timeouts. It is the one place tests, the local
// stack and the SAM template check take it from. The reconcile queue and
// the charge-requests queue share it (package intake has its messages). It
// also sends the reconcile messages of the charge function and the
// sweeper: one a key while one is in flight (marks.go).
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// QueuedUntil is the mark its sender set, in epoch milliseconds;
	// absent if it set none.
	QueuedUntil int64 `json:"queued_until,omitempty"`
}

// Message is what a reconcile message carries.
type Message struct {
	Key idem.Key
	// QueuedUntil is the mark its sender set on the key's record
	// (Marker): its handler removes it. Zero if the sender set none.
	QueuedUntil time.Time
}

func encode(m Message) string {
	body := message{Key: m.Key.String()}
	if !m.QueuedUntil.IsZero() {
		body.QueuedUntil = m.QueuedUntil.UnixMilli()
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// ParseMessage reads a reconcile message's body.
func ParseMessage(body string) (Message, error) {
	var m message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return Message{}, fmt.Errorf("queue: message: %w", err)
	}
	k, err := idem.ParseKey(m.Key)
	if err != nil {
		return Message{}, err
	}
	msg := Message{Key: k}
	if m.QueuedUntil > 0 {
		msg.QueuedUntil = time.UnixMilli(m.QueuedUntil)
	}
	return msg, nil
}

// SenderOptions configure a Sender. Zero fields take the defaults.
type SenderOptions struct {
	// Marks, if set, marks each key's record before its message is
	// sent. A key already marked gets no second message.
	Marks Marker
	// Clock dates the marks. Default time.Now.
	Clock func() time.Time
	// Logger receives a warning for each mark of an unsent message that
	// could not be removed. Default: discard.
	Logger *slog.Logger
}

// Sender sends reconcile messages to one queue.
type Sender struct {
	client API
	url    string
	opt    SenderOptions
}

// NewSender returns a Sender for the queue at url.
func NewSender(client API, url string, optFns ...func(*SenderOptions)) (*Sender, error) {
	if client == nil || url == "" {
		return nil, errors.New("queue: sender needs a client and a queue URL")
	}
	var o SenderOptions
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sender{client: client, url: url, opt: o}, nil
}

// EnqueueReconcile asks for key to be reconciled after delay: when its
// lease will have run out. The delay is rounded up to whole seconds, at
// most MaxDelay. It sends nothing while a message for key is in flight,
// or when its record needs none (Marks). A mark not written is an error,
// and sends nothing either. The message carries ctx's trace context, if
// any (tracing.MessageAttributes).
func (s *Sender) EnqueueReconcile(ctx context.Context, key idem.Key, delay time.Duration) error {
	secs := int32(math.Ceil(min(max(delay, 0), MaxDelay).Seconds()))
	m, send, err := s.mark(ctx, key, time.Duration(secs)*time.Second)
	if err != nil {
		return fmt.Errorf("queue: mark: %w", err)
	}
	if !send {
		return nil
	}
	// The send leaves time to remove the mark if it fails.
	sctx, cancel := half(ctx)
	defer cancel()
	_, err = s.client.SendMessage(sctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(s.url), MessageBody: aws.String(encode(m)), DelaySeconds: secs,
		MessageAttributes: tracing.MessageAttributes(ctx),
	})
	if err != nil {
		if unsent(err) {
			s.unmark(ctx, m)
		}
		return fmt.Errorf("queue: send: %w", err)
	}
	return nil
}

// Batch is what SendBatch did with its keys.
type Batch struct {
	// Failed are the keys whose messages, or marks, were not sent: the
	// next sweep finds them again.
	Failed []idem.Key
	// AlreadyQueued counts the keys not sent as a message for them was
	// in flight, or their record needed none (Marks).
	AlreadyQueued int
}

// SendBatch sends one message per key, SendBatchMax to a SendMessageBatch
// call, but for keys with a message in flight (Marks). It returns what it
// did, and the first call error, if any. Every message carries ctx's trace
// context, if any.
func (s *Sender) SendBatch(ctx context.Context, keys []idem.Key) (Batch, error) {
	attrs := tracing.MessageAttributes(ctx)
	var (
		b   Batch
		err error
	)
	for start := 0; start < len(keys); start += SendBatchMax {
		chunk, unmarked, merr := s.markAll(ctx, keys[start:min(start+SendBatchMax, len(keys))])
		b.Failed = append(b.Failed, unmarked...)
		b.AlreadyQueued += min(len(keys)-start, SendBatchMax) - len(chunk) - len(unmarked)
		if merr != nil && err == nil {
			err = fmt.Errorf("queue: mark: %w", merr)
		}
		if len(chunk) == 0 {
			continue
		}
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(encode(m)), MessageAttributes: attrs,
			}
		}
		out, cerr := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
		var failed []Message
		switch {
		case cerr != nil:
			b.Failed = append(b.Failed, keysOf(chunk)...)
			if unsent(cerr) {
				failed = chunk
			}
			if err == nil {
				err = fmt.Errorf("queue: send batch: %w", cerr)
			}
		default:
			for _, f := range out.Failed {
				if i, perr := strconv.Atoi(aws.ToString(f.Id)); perr == nil && i < len(chunk) {
					failed = append(failed, chunk[i])
				}
			}
		}
		for _, m := range failed {
			s.unmark(ctx, m)
		}
		if cerr == nil {
			b.Failed = append(b.Failed, keysOf(failed)...)
		}
	}
	return b, err
}
