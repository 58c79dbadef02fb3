package lambdaidem_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestSQSFingerprintFields: a producer's resend, under a new message id
// and with a new sent_at, is the same message.
func TestSQSFingerprintFields(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs atomic.Int32
	handler := lambdaidem.SQS(s, "fulfil", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{}), nil
	}, func(o *lambdaidem.SQSOptions) {
		o.Key = lambdaidem.KeyFromJSONField("order_id")
		o.Fingerprint = lambdaidem.FingerprintMessageFields("order_id", "items")
	})
	resp, _ := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage("m1", "", `{"order_id":"o-1","items":["a"],"sent_at":"2026-01-01T00:00:00Z"}`),
		sqsMessage("m2", "", `{"order_id":"o-1","items":["a"],"sent_at":"2026-01-01T00:05:00Z"}`), // resent
		sqsMessage("m3", "", `{"order_id":"o-1","items":["b"],"sent_at":"2026-01-01T00:06:00Z"}`), // the key reused
		sqsMessage("m4", "", `["not an object"]`),
	}})
	if failures(resp) != "m3,m4" || runs.Load() != 1 {
		t.Fatalf("failures %q, %d runs; want m3,m4 and one run", failures(resp), runs.Load())
	}
	resp, _ = handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage("m5", "", `{"sent_at":"2026-01-02T00:00:00Z","items":["a"],"order_id":"o-1"}`), // a day later
	}})
	if failures(resp) != "" || runs.Load() != 1 {
		t.Fatalf("a later resend: failures %q, %d runs; want a no-op", failures(resp), runs.Load())
	}
}

// visibility records the ChangeMessageVisibility calls it is given.
type visibility struct {
	mu    sync.Mutex
	calls []sqs.ChangeMessageVisibilityInput
	err   error
}

func (v *visibility) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, *in)
	return &sqs.ChangeMessageVisibilityOutput{}, v.err
}

// taken returns the calls so far, and forgets them.
func (v *visibility) taken() []sqs.ChangeMessageVisibilityInput {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.calls
	v.calls = nil
	return c
}

// TestSQSVisibility: a message whose key is held under a live lease comes
// back when the lease ends, not before; any other failure is left to the
// queue's visibility timeout.
func TestSQSVisibility(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now }) // leases of 30s, without a deadline
	vis := &visibility{}
	var errs []error
	handler := lambdaidem.SQS(s, "fulfil", func(_ context.Context, msg events.SQSMessage, _ *idem.Lease) (idem.Outcome, error) {
		switch msg.Body {
		case `"timeout"`:
			return idem.Unknown(idem.Response{}), nil
		case `"later"`:
			return idem.NotApplied(idem.Response{}), nil
		}
		return idem.Succeeded(idem.Response{}), nil
	}, func(o *lambdaidem.SQSOptions) {
		o.Key = lambdaidem.KeyFromAttribute("order-id")
		o.Visibility = vis
		o.OnError = func(_ context.Context, _ events.SQSMessage, err error) { errs = append(errs, err) }
	})
	p := idemtest.UniqueKey(t, "x").ClientKey()
	held, _ := idem.NewKey("orders", "fulfil", p+"-held")
	clock.Advance(10 * time.Second)
	if _, err := s.Begin(context.Background(), held, idem.FingerprintOf([]byte(`{}`)), nil); err != nil { // in flight elsewhere, until +40s
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second)
	msg := func(id, key, body string) events.SQSMessage {
		m := sqsMessage(id, key, body)
		m.ReceiptHandle = "rh-" + id
		return m
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		msg("m1", p+"-held", `{}`),
		msg("m2", p+"-t", `"timeout"`),
		msg("m3", p+"-l", `"later"`),
		msg("m4", "", `{}`),
		msg("m5", p+"-held", `{}`), // a copy of m1
	}}
	resp, _ := handler(context.Background(), batch)
	if failures(resp) != "m1,m2,m3,m4,m5" {
		t.Fatalf("failures %q", failures(resp))
	}
	want := []string{"rh-m1 10", "rh-m2 30", "rh-m5 10"} // the other's lease has 10s left, this one's 30s
	got := vis.taken()
	var calls []string
	for _, c := range got {
		if aws.ToString(c.QueueUrl) != "https://sqs.eu-west-1.amazonaws.com/123456789012/orders" {
			t.Errorf("queue URL %s", aws.ToString(c.QueueUrl))
		}
		calls = append(calls, aws.ToString(c.ReceiptHandle)+" "+strconv.Itoa(int(c.VisibilityTimeout)))
	}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Fatalf("visibility changes %v, want %v", calls, want)
	}

	clock.Advance(15 * time.Second) // the other's lease has ended, unresolved
	if resp, _ := handler(context.Background(), events.SQSEvent{Records: batch.Records[:1]}); failures(resp) != "m1" || len(vis.taken()) != 0 {
		t.Fatalf("a key whose lease ended: failures %q; want it reported, its visibility left to the queue", failures(resp))
	}

	vis.err = errors.New("access denied")
	errs = nil
	other, _ := idem.NewKey("orders", "fulfil", p+"-other")
	if _, err := s.Begin(context.Background(), other, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
		t.Fatal(err)
	}
	if resp, _ := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg("m6", p+"-other", `{}`)}}); failures(resp) != "m6" ||
		len(errs) != 2 || !strings.Contains(errs[1].Error(), "access denied") {
		t.Fatalf("a visibility change refused: failures %q, errors %v; want m6 reported, and the refusal seen", failures(resp), errs)
	}
}

// TestSQSVisibilityOnSQS: on the emulator's SQS, the queue URL made from
// the event source ARN is the queue's, and the message comes back when
// the lease that held its key ends, long before its visibility timeout.
func TestSQSVisibilityOnSQS(t *testing.T) {
	t.Parallel()
	endpoint := os.Getenv("SQS_ENDPOINT")
	if endpoint == "" {
		t.Fatal("SQS_ENDPOINT is not set: run the tests with scripts/with-emulator.sh, or point it at an emulator or SQS on AWS")
	}
	ctx := context.Background()
	client := sqs.New(sqs.Options{BaseEndpoint: aws.String(endpoint), Region: "us-east-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
	})})
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dynamotest.UniqueName("lambdaidem"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(`{}`)}); err != nil {
		t.Fatal(err)
	}
	receive := func() []sqstypes.Message {
		t.Helper()
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, VisibilityTimeout: 120})
		if err != nil {
			t.Fatal(err)
		}
		return out.Messages
	}
	got := receive()
	if len(got) != 1 {
		t.Fatalf("received %d messages", len(got))
	}
	m := events.SQSMessage{MessageId: aws.ToString(got[0].MessageId), ReceiptHandle: aws.ToString(got[0].ReceiptHandle), Body: aws.ToString(got[0].Body),
		EventSourceARN: attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]}

	s := memstore.New(func(o *memstore.Options) { o.DefaultLease, o.LeaseMargin = 2*time.Second, time.Second })
	queue := m.EventSourceARN[strings.LastIndexByte(m.EventSourceARN, ':')+1:]
	key, err := idem.NewKey(queue, "fulfil", m.MessageId)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, key, idem.FingerprintOf([]byte(`{}`)), nil); err != nil { // held elsewhere for 2s
		t.Fatal(err)
	}
	handler := lambdaidem.SQS(s, "fulfil", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		return idem.Succeeded(idem.Response{}), nil
	}, func(o *lambdaidem.SQSOptions) {
		o.Visibility = client
		o.OnError = func(_ context.Context, _ events.SQSMessage, err error) { t.Log(err) }
	})
	if resp, _ := handler(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); failures(resp) != m.MessageId {
		t.Fatalf("failures %q, want the held message", failures(resp))
	}
	if len(receive()) != 0 {
		t.Fatal("the message came back while its key was held")
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(receive()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the message did not come back within 20s of its key's lease ending; its visibility timeout was 120s")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestSQSVisibilityQueueURL: the queue URL is made from the event source
// ARN, in China's partition too, and an ARN that names no queue is
// reported rather than guessed at.
func TestSQSVisibilityQueueURL(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	vis := &visibility{}
	var errs []error
	handler := lambdaidem.SQS(s, "fulfil", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		return idem.Unknown(idem.Response{}), nil // held by this attempt's lease
	}, func(o *lambdaidem.SQSOptions) {
		o.Tenant = func(events.SQSMessage) (string, error) { return "orders", nil }
		o.Visibility = vis
		o.OnError = func(_ context.Context, _ events.SQSMessage, err error) { errs = append(errs, err) }
	})
	p := idemtest.UniqueKey(t, "x").ClientKey()
	cn := events.SQSMessage{MessageId: p + "-cn", ReceiptHandle: "rh-cn", Body: `{}`, EventSourceARN: "arn:aws-cn:sqs:cn-north-1:123456789012:orders"}
	odd := events.SQSMessage{MessageId: p + "-odd", ReceiptHandle: "rh-odd", Body: `{}`, EventSourceARN: "orders"}
	if resp, _ := handler(context.Background(), events.SQSEvent{Records: []events.SQSMessage{cn, odd}}); failures(resp) != cn.MessageId+","+odd.MessageId {
		t.Fatalf("failures %q", failures(resp))
	}
	calls := vis.taken()
	if len(calls) != 1 || aws.ToString(calls[0].QueueUrl) != "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders" {
		t.Fatalf("visibility changes %+v; want one, on the China queue's URL", calls)
	}
	if len(errs) != 3 || !strings.Contains(errs[2].Error(), "not a queue's ARN") {
		t.Fatalf("errors %v; want the odd event source reported", errs)
	}
}
