package lambdaidem_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

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
	resp, _ := handler(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage("m1", "", `{"order_id":"o-1","items":["a"],"sent_at":"2026-01-01T00:00:00Z"}`),
		sqsMessage("m2", "", `{"order_id":"o-1","items":["a"],"sent_at":"2026-01-01T00:05:00Z"}`), // resent
		sqsMessage("m3", "", `{"order_id":"o-1","items":["b"],"sent_at":"2026-01-01T00:06:00Z"}`), // the key reused
		sqsMessage("m4", "", `["not an object"]`),
	}})
	if failures(resp) != "m3,m4" || runs.Load() != 1 {
		t.Fatalf("failures %q, %d runs; want m3,m4 and one run", failures(resp), runs.Load())
	}
	resp, _ = handler(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage("m5", "", `{"sent_at":"2026-01-02T00:00:00Z","items":["a"],"order_id":"o-1"}`), // a day later
	}})
	if failures(resp) != "" || runs.Load() != 1 {
		t.Fatalf("a later resend: failures %q, %d runs; want a no-op", failures(resp), runs.Load())
	}
}

// visibility records the visibility changes it is given.
type visibility struct {
	mu    sync.Mutex
	calls []lambdaidem.VisibilityChange
	err   error
}

func (v *visibility) change(_ context.Context, c lambdaidem.VisibilityChange) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, c)
	return v.err
}

// taken returns the calls so far, and forgets them.
func (v *visibility) taken() []lambdaidem.VisibilityChange {
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
		o.Visibility = vis.change
		o.OnError = func(_ context.Context, _ events.SQSMessage, err error) { errs = append(errs, err) }
	})
	p := idemtest.UniqueKey(t, "x").ClientKey()
	held, _ := idem.NewKey("orders", "fulfil", p+"-held")
	clock.Advance(10 * time.Second)
	if _, err := s.Begin(t.Context(), held, idem.FingerprintOf([]byte(`{}`)), nil); err != nil { // in flight elsewhere, until +40s
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
	resp, _ := handler(t.Context(), batch)
	if failures(resp) != "m1,m2,m3,m4,m5" {
		t.Fatalf("failures %q", failures(resp))
	}
	want := []string{"rh-m1 10", "rh-m2 30", "rh-m5 10"} // the other's lease has 10s left, this one's 30s
	got := vis.taken()
	var calls []string
	for _, c := range got {
		if c.QueueURL != "https://sqs.eu-west-1.amazonaws.com/123456789012/orders" {
			t.Errorf("queue URL %s", c.QueueURL)
		}
		calls = append(calls, c.ReceiptHandle+" "+strconv.Itoa(int(c.VisibilityTimeout)))
	}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Fatalf("visibility changes %v, want %v", calls, want)
	}

	clock.Advance(15 * time.Second) // the other's lease has ended, unresolved
	if resp, _ := handler(t.Context(), events.SQSEvent{Records: batch.Records[:1]}); failures(resp) != "m1" || len(vis.taken()) != 0 {
		t.Fatalf("a key whose lease ended: failures %q; want it reported, its visibility left to the queue", failures(resp))
	}

	vis.err = errors.New("access denied")
	errs = nil
	other, _ := idem.NewKey("orders", "fulfil", p+"-other")
	if _, err := s.Begin(t.Context(), other, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
		t.Fatal(err)
	}
	if resp, _ := handler(t.Context(), events.SQSEvent{Records: []events.SQSMessage{msg("m6", p+"-other", `{}`)}}); failures(resp) != "m6" ||
		len(errs) != 2 || !strings.Contains(errs[1].Error(), "access denied") {
		t.Fatalf("a visibility change refused: failures %q, errors %v; want m6 reported, and the refusal seen", failures(resp), errs)
	}
}

// TestSQSVisibilityOnSQS: on the emulator's SQS, the queue URL made from
// the event source ARN is the queue's, and the message comes back when
// the lease that held its key ends, long before its visibility timeout.
func TestSQSVisibilityOnSQS(t *testing.T) {
	t.Parallel()
	client := newSQSClient(t)
	ctx := t.Context()
	var q struct{ QueueUrl string }
	client.call(t, "CreateQueue", map[string]any{"QueueName": dynamotest.UniqueName("lambdaidem")}, &q)
	t.Cleanup(func() {
		_ = client.send(context.Background(), "DeleteQueue", map[string]any{"QueueUrl": q.QueueUrl}, nil)
	})
	var attrs struct{ Attributes map[string]string }
	client.call(t, "GetQueueAttributes", map[string]any{"QueueUrl": q.QueueUrl, "AttributeNames": []string{"QueueArn"}}, &attrs)
	client.call(t, "SendMessage", map[string]any{"QueueUrl": q.QueueUrl, "MessageBody": `{}`}, nil)
	type message struct{ MessageId, ReceiptHandle, Body string }
	receive := func() []message {
		t.Helper()
		var out struct{ Messages []message }
		client.call(t, "ReceiveMessage", map[string]any{"QueueUrl": q.QueueUrl, "VisibilityTimeout": 120}, &out)
		return out.Messages
	}
	got := receive()
	if len(got) != 1 {
		t.Fatalf("received %d messages", len(got))
	}
	m := events.SQSMessage{MessageId: got[0].MessageId, ReceiptHandle: got[0].ReceiptHandle, Body: got[0].Body, EventSourceARN: attrs.Attributes["QueueArn"]}

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
		o.Visibility = func(ctx context.Context, c lambdaidem.VisibilityChange) error {
			return client.send(ctx, "ChangeMessageVisibility", map[string]any{"QueueUrl": c.QueueURL, "ReceiptHandle": c.ReceiptHandle, "VisibilityTimeout": c.VisibilityTimeout}, nil)
		}
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

// sqsClient calls SQS's JSON protocol at SQS_ENDPOINT, signed with
// Signature Version 4 as the SDK signs it. It is not the SQS SDK, which
// this module does not require, so that its users do not download it.
type sqsClient struct {
	endpoint, region string
	creds            aws.Credentials
}

func newSQSClient(t *testing.T) sqsClient {
	t.Helper()
	endpoint := os.Getenv("SQS_ENDPOINT")
	if endpoint == "" {
		t.Fatal("SQS_ENDPOINT is not set: run the tests with scripts/with-emulator.sh, or point it at an emulator or SQS on AWS")
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	return sqsClient{endpoint: endpoint, region: region, creds: aws.Credentials{
		AccessKeyID: cmp.Or(os.Getenv("AWS_ACCESS_KEY_ID"), "test"), SecretAccessKey: cmp.Or(os.Getenv("AWS_SECRET_ACCESS_KEY"), "test"), SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	}}
}

// call sends action, failing the test on an error.
func (c sqsClient) call(t *testing.T, action string, in, out any) {
	t.Helper()
	if err := c.send(t.Context(), action, in, out); err != nil {
		t.Fatal(err)
	}
}

// send sends action with the input in, and decodes its output into out
// unless out is nil.
func (c sqsClient) send(ctx context.Context, action string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, c.creds, req, hex.EncodeToString(sum[:]), "sqs", c.region, time.Now()); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("sqs %s: %s: %s", action, resp.Status, b)
	case out == nil:
		return nil
	}
	return json.Unmarshal(b, out)
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
		o.Visibility = vis.change
		o.OnError = func(_ context.Context, _ events.SQSMessage, err error) { errs = append(errs, err) }
	})
	p := idemtest.UniqueKey(t, "x").ClientKey()
	cn := events.SQSMessage{MessageId: p + "-cn", ReceiptHandle: "rh-cn", Body: `{}`, EventSourceARN: "arn:aws-cn:sqs:cn-north-1:123456789012:orders"}
	odd := events.SQSMessage{MessageId: p + "-odd", ReceiptHandle: "rh-odd", Body: `{}`, EventSourceARN: "orders"}
	if resp, _ := handler(t.Context(), events.SQSEvent{Records: []events.SQSMessage{cn, odd}}); failures(resp) != cn.MessageId+","+odd.MessageId {
		t.Fatalf("failures %q", failures(resp))
	}
	calls := vis.taken()
	if len(calls) != 1 || calls[0].QueueURL != "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders" {
		t.Fatalf("visibility changes %+v; want one, on the China queue's URL", calls)
	}
	if len(errs) != 3 || !strings.Contains(errs[2].Error(), "not a queue's ARN") {
		t.Fatalf("errors %v; want the odd event source reported", errs)
	}
}

// TestNoSQSSDK: an HTTP-only user of this package downloads no SQS SDK,
// so neither the package nor its tests import it.
func TestNoSQSSDK(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-test", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2/service/sqs") {
			t.Fatalf("lambdaidem imports %s, directly or through its tests", pkg)
		}
	}
}

// TestSQSStoresTheMessageBodyAsIntent: a resolver of a message whose
// processing died reads the message body from the record, and no message
// attribute. A body too large to store is reported, and nothing stored.
func TestSQSStoresTheMessageBodyAsIntent(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs atomic.Int32
	h := lambdaidem.SQS(s, "fulfil", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Outcome{}, errors.New("crashed") // the record stays IN_FLIGHT
	})
	small := sqsMessage(idemtest.UniqueKey(t, "x").ClientKey(), "", `{"order": "o-1", "qty": 2}`)
	small.MessageAttributes = map[string]events.SQSMessageAttribute{"token": {DataType: "String", StringValue: aws.String("secret-token")}}
	large := sqsMessage(idemtest.UniqueKey(t, "x").ClientKey(), "", `{"note":"`+strings.Repeat("a", 200<<10)+`"}`)
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{small, large}})
	if err != nil || len(resp.BatchItemFailures) != 2 || runs.Load() != 1 {
		t.Fatalf("failures %q, %v, %d runs; want both reported, one run", failures(resp), err, runs.Load())
	}
	k, _ := idem.NewKey("orders", "fulfil", small.MessageId)
	rec, err := s.Get(t.Context(), k)
	if err != nil || string(rec.Intent) != small.Body {
		t.Fatalf("intent %q (%v), want the message body %q", rec.Intent, err, small.Body)
	}
	k, _ = idem.NewKey("orders", "fulfil", large.MessageId)
	if _, err := s.Get(t.Context(), k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a body too large to store: record %v, want none", err)
	}
}

// TestSQSOnWaitCanTellWhichKeyItIsAskedFor (review waitcap): SQSOptions
// says "OnWait may cap the requests waiting on one key". A cap per key
// needs to know the key. One batch carries two messages, each of its own
// key in progress. OnWait must be told each message's key.
func TestSQSOnWaitCanTellWhichKeyItIsAskedFor(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var (
		mu    sync.Mutex
		asked []idem.Key
	)
	onWait := func(_ context.Context, key idem.Key) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, key)
		return false
	}
	handler := lambdaidem.SQS(s, "fulfil", func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		return idem.Outcome{}, errors.New("crashed") // the record stays IN_FLIGHT
	}, func(o *lambdaidem.SQSOptions) { o.Wait, o.OnWait = 5*time.Second, onWait })
	keys := []string{idemtest.UniqueKey(t, "x").ClientKey(), idemtest.UniqueKey(t, "x").ClientKey()}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage(keys[0], "", `{"order":"o-1"}`),
		sqsMessage(keys[1], "", `{"order":"o-2"}`),
	}}
	if _, err := handler(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if _, err := handler(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	told := map[string]bool{}
	for _, k := range asked {
		told[k.ClientKey()] = true
	}
	if len(asked) != 2 || !told[keys[0]] || !told[keys[1]] {
		t.Fatalf("two messages of two keys in progress: OnWait told %d keys, %v; want each message's key once, %v", len(asked), told, keys)
	}
}
