package eventsource_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/local/eventsource"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// visibility is the test queues' visibility timeout: short, so redelivery
// is quick to observe.
const visibility = 1 * time.Second

type testQueue struct {
	client      *sqs.Client
	url, dlq    string
	arn, dlqARN string
}

// newQueue creates a queue with a one-second visibility timeout whose
// redrive policy moves a message to its DLQ after maxReceive deliveries.
func newQueue(t *testing.T, maxReceive int) testQueue {
	t.Helper()
	ctx := t.Context()
	c := testkit.Clients(t).SQS
	name := testkit.UniqueName("es")
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	if err != nil {
		t.Fatal(err)
	}
	dlqARN := queueARN(t, c, aws.ToString(dlq.QueueUrl))
	redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlqARN, "maxReceiveCount": maxReceive})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout): "1",
		string(types.QueueAttributeNameRedrivePolicy):     string(redrive),
	}})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(q.QueueUrl)
	t.Cleanup(func() { deleteQueues(c, url, aws.ToString(dlq.QueueUrl)) })
	return testQueue{client: c, url: url, dlq: aws.ToString(dlq.QueueUrl), arn: queueARN(t, c, url), dlqARN: dlqARN}
}

func deleteQueues(c *sqs.Client, urls ...string) {
	for _, u := range urls {
		_, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	}
}

func queueARN(t *testing.T, c *sqs.Client, url string) string {
	t.Helper()
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// send sends bodies and returns their message ids in order.
func (q testQueue) send(t *testing.T, bodies ...string) []string {
	t.Helper()
	ids := make([]string, len(bodies))
	for i, b := range bodies {
		out, err := q.client.SendMessage(t.Context(), &sqs.SendMessageInput{
			QueueUrl: aws.String(q.url), MessageBody: aws.String(b),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"origin": {DataType: aws.String("String"), StringValue: aws.String("test")},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = aws.ToString(out.MessageId)
	}
	return ids
}

// visibleAfterTimeout waits out the visibility timeout and returns the ids
// of the messages visible on url again (receiving them).
func (q testQueue) visibleAfterTimeout(t *testing.T, url string) []string {
	t.Helper()
	time.Sleep(visibility + 300*time.Millisecond)
	out, err := q.client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range out.Messages {
		ids = append(ids, aws.ToString(m.MessageId))
	}
	slices.Sort(ids)
	return ids
}

// recorder is a handler answering with answer (success when nil), keeping
// every event and context.
type recorder struct {
	mu     sync.Mutex
	events []events.SQSEvent
	ctxs   []context.Context
	answer func(events.SQSEvent) (events.SQSEventResponse, error)
}

func (r *recorder) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
	if r.answer == nil {
		return events.SQSEventResponse{}, nil
	}
	return r.answer(ev)
}

func newPoller(t *testing.T, q testQueue, h eventsource.Handler, tune ...func(*eventsource.Options)) *eventsource.Poller {
	t.Helper()
	opts := append([]func(*eventsource.Options){func(o *eventsource.Options) { o.WaitTime = time.Second }}, tune...)
	p, err := eventsource.New(t.Context(), q.client, q.url, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pollAll polls until want messages were received (moto may hand out a
// batch in more than one receive).
func pollAll(t *testing.T, p *eventsource.Poller, want int) eventsource.Batch {
	t.Helper()
	var total eventsource.Batch
	for range 10 {
		b, err := p.Poll(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		total.Received += b.Received
		total.Deleted += b.Deleted
		total.Retried += b.Retried
		if total.Received >= want {
			return total
		}
	}
	t.Fatalf("received %d messages, want %d", total.Received, want)
	return total
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

func TestReportedFailuresReappearThenGoToTheDLQ(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 2)
	ids := q.send(t, "one", "two", "three")
	rec := &recorder{answer: func(ev events.SQSEvent) (events.SQSEventResponse, error) {
		var res events.SQSEventResponse
		for _, m := range ev.Records {
			if m.Body == "two" {
				res.BatchItemFailures = append(res.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return res, nil
	}}
	p := newPoller(t, q, rec.handle, func(o *eventsource.Options) { o.Timeout = 3 * time.Second })

	start := time.Now()
	if b := pollAll(t, p, 3); b != (eventsource.Batch{Received: 3, Deleted: 2, Retried: 1}) {
		t.Fatalf("first delivery: %+v", b)
	}
	m := rec.events[0].Records[0]
	if m.EventSource != "aws:sqs" || m.EventSourceARN != q.arn || m.AWSRegion == "" || m.ReceiptHandle == "" || m.Md5OfBody == "" {
		t.Errorf("record %+v", m)
	}
	if m.Attributes["ApproximateReceiveCount"] != "1" || m.Attributes["SentTimestamp"] == "" || m.Attributes["ApproximateFirstReceiveTimestamp"] == "" {
		t.Errorf("attributes %v", m.Attributes)
	}
	if a := m.MessageAttributes["origin"]; aws.ToString(a.StringValue) != "test" || a.DataType != "String" || m.Md5OfMessageAttributes == "" {
		t.Errorf("message attributes %+v, md5 %q", m.MessageAttributes, m.Md5OfMessageAttributes)
	}
	lc, ok := lambdacontext.FromContext(rec.ctxs[0])
	deadline, hasDeadline := rec.ctxs[0].Deadline()
	if !ok || lc.AwsRequestID == "" || !hasDeadline || deadline.Sub(start) > 4*time.Second {
		t.Errorf("invocation context: lambda %+v %v, deadline %v %v", lc, ok, deadline, hasDeadline)
	}

	// After the visibility timeout only the reported message is delivered
	// again: the others were deleted.
	time.Sleep(visibility + 300*time.Millisecond)
	if b := pollAll(t, p, 1); b != (eventsource.Batch{Received: 1, Retried: 1}) {
		t.Fatalf("second delivery: %+v", b)
	}
	if again := rec.events[len(rec.events)-1].Records; len(again) != 1 || again[0].MessageId != ids[1] || again[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("second delivery: %+v", again)
	}
	time.Sleep(visibility + 300*time.Millisecond)
	if b, err := p.Poll(t.Context()); err != nil || b.Received != 0 {
		t.Fatalf("after maxReceiveCount: %+v %v, want nothing delivered", b, err)
	}
	if got := q.visibleAfterTimeout(t, q.dlq); !slices.Equal(got, ids[1:2]) {
		t.Errorf("dead-letter queue holds %v, want %v", got, ids[1:2])
	}
}

func TestFailedInvocationRetriesTheWholeBatch(t *testing.T) {
	t.Parallel()
	tests := map[string]eventsource.Handler{
		"error": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{}, errors.New("boom")
		},
		"panic": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			panic("boom")
		},
		"timeout": func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
			<-ctx.Done()
			return events.SQSEventResponse{}, nil
		},
		"unknown item": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "not-a-message"}}}, nil
		},
		"empty item": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{}}}, nil
		},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, 5)
			ids := q.send(t, "a", "b")
			p := newPoller(t, q, h, func(o *eventsource.Options) { o.Timeout = 200 * time.Millisecond })
			if b := pollAll(t, p, 2); b.Deleted != 0 || b.Retried != 2 {
				t.Fatalf("batch %+v, want nothing deleted", b)
			}
			if got := q.visibleAfterTimeout(t, q.url); !slices.Equal(got, sorted(ids...)) {
				t.Errorf("visible after the timeout: %v, want %v", got, sorted(ids...))
			}
		})
	}
}

func TestRunDeliversUntilCancelled(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 5)
	got := make(chan string, 10)
	p := newPoller(t, q, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		for _, m := range ev.Records {
			got <- m.Body
		}
		return events.SQSEventResponse{}, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	q.send(t, "hello")
	select {
	case body := <-got:
		if body != "hello" {
			t.Errorf("delivered %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
	if left := q.visibleAfterTimeout(t, q.url); len(left) != 0 {
		t.Errorf("delivered message not deleted: %v", left)
	}
}

func TestNewChecksItsArguments(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 5)
	h := (&recorder{}).handle
	bad := []func(*eventsource.Options){
		func(o *eventsource.Options) { o.BatchSize = 11 },
		func(o *eventsource.Options) { o.WaitTime = 21 * time.Second },
		func(o *eventsource.Options) { o.WaitTime = 0 },
		func(o *eventsource.Options) { o.Timeout = -time.Second },
	}
	for i, fn := range bad {
		if _, err := eventsource.New(t.Context(), q.client, q.url, h, fn); err == nil {
			t.Errorf("options %d accepted", i)
		}
	}
	if _, err := eventsource.New(t.Context(), q.client, q.url+"-missing", h); err == nil {
		t.Error("missing queue accepted")
	}
	if _, err := eventsource.New(t.Context(), q.client, q.url, nil); err == nil {
		t.Error("nil handler accepted")
	}
}
