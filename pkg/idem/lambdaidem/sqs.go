package lambdaidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// SQSFunc processes one message under its lease and says what became of
// its effect (see idem.Outcome). A Succeeded outcome's business writes
// commit with the message's record, in one transaction.
type SQSFunc func(ctx context.Context, msg events.SQSMessage, l *idem.Lease) (idem.Outcome, error)

// SQSOptions configure SQS. Zero fields take the defaults.
type SQSOptions struct {
	// Key gives a message's idempotency key. Default KeyFromMessageID,
	// which a producer's resend does not keep: KeyFromAttribute and
	// KeyFromJSONField read the producer's own id.
	Key func(msg events.SQSMessage) (string, error)
	// Tenant scopes the keys. Default: the queue's name, from the
	// message's event source ARN.
	Tenant func(msg events.SQSMessage) (string, error)
	// Fingerprint identifies a message's content, so a key reused for
	// another message is refused. Its error fails the message. Default:
	// the canonical JSON body's, or the raw body's when it is not JSON.
	// FingerprintMessageFields takes a subset, so a resend with a new
	// timestamp is the same message.
	Fingerprint func(msg events.SQSMessage) (idem.Fingerprint, error)
	// Intent gives the bytes stored as the command's Intent, for a
	// Resolver. Its error fails the message. Default: the body as sent,
	// without the message attributes. A message whose intent is over 190
	// KiB is reported, with nothing stored, on every delivery. It ends in
	// the dead-letter queue.
	Intent func(msg events.SQSMessage) ([]byte, error)
	// Wait, Reserve and OnWait are passed to idem.Do (see
	// idem.DoOptions). OnWait may cap the requests waiting on one key.
	Wait, Reserve time.Duration
	OnWait        func(ctx context.Context, key idem.Key) bool
	// Visibility, if set, holds back the redelivery of a message whose key
	// a live lease holds. It is delivered again once that lease ends: one
	// delivery, not one per visibility timeout. Wire it to an SQS client's
	// ChangeMessageVisibility, as the package doc shows. The function then
	// needs sqs:ChangeMessageVisibility on the queue. Default nil.
	Visibility func(ctx context.Context, c VisibilityChange) error
	// OnError sees every message reported for another delivery, with why.
	// It sees every failure to hold one back.
	OnError func(ctx context.Context, msg events.SQSMessage, err error)
}

// VisibilityChange asks SQS to deliver a message again VisibilityTimeout
// seconds from now. Its fields are a ChangeMessageVisibility request's.
// This package does not import the SQS SDK, so an HTTP-only user does not
// download it.
type VisibilityChange struct {
	QueueURL, ReceiptHandle string
	VisibilityTimeout       int32 // seconds, at most 12 hours
}

// KeyFromMessageID keys a message by its SQS message id: redeliveries of
// one message are one intent.
func KeyFromMessageID(msg events.SQSMessage) (string, error) { return msg.MessageId, nil }

// KeyFromAttribute keys a message by its string message attribute name.
// That is the producer's own id, the same for every copy it sends.
func KeyFromAttribute(name string) func(events.SQSMessage) (string, error) {
	return func(msg events.SQSMessage) (string, error) {
		a, ok := msg.MessageAttributes[name]
		if !ok || a.StringValue == nil || *a.StringValue == "" {
			return "", fmt.Errorf("lambdaidem: message %s has no string attribute %q", msg.MessageId, name)
		}
		return *a.StringValue, nil
	}
}

// KeyFromJSONField keys a message by a top-level string field of its JSON
// body.
func KeyFromJSONField(field string) func(events.SQSMessage) (string, error) {
	return func(msg events.SQSMessage) (string, error) {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(msg.Body), &fields); err != nil {
			return "", fmt.Errorf("lambdaidem: message %s: body: %w", msg.MessageId, err)
		}
		var key string
		if err := json.Unmarshal(fields[field], &key); err != nil || key == "" {
			return "", fmt.Errorf("lambdaidem: message %s has no string field %q", msg.MessageId, field)
		}
		return key, nil
	}
}

// FingerprintMessageFields fingerprints only the named top-level members
// of a JSON object body. FingerprintFields does the same for a request. A
// producer's resend that differs only in the others, a new sent_at, is the
// same message. It is a no-op once the first was processed.
func FingerprintMessageFields(fields ...string) func(events.SQSMessage) (idem.Fingerprint, error) {
	return func(msg events.SQSMessage) (idem.Fingerprint, error) {
		subset, err := fieldsOf([]byte(msg.Body), fields)
		if err != nil {
			return idem.Fingerprint{}, fmt.Errorf("lambdaidem: message %s: body: %w", msg.MessageId, err)
		}
		return idem.FingerprintOf(subset), nil
	}
}

// queueName is the last part of the message's event source ARN.
func queueName(msg events.SQSMessage) (string, error) {
	i := strings.LastIndexByte(msg.EventSourceARN, ':')
	if i < 0 || i == len(msg.EventSourceARN)-1 {
		return "", fmt.Errorf("lambdaidem: message %s: no queue in event source %q", msg.MessageId, msg.EventSourceARN)
	}
	return msg.EventSourceARN[i+1:], nil
}

// errRedeliver: the message is held elsewhere, or was not processed.
var errRedeliver = errors.New("lambdaidem: not processed; redeliver")

// heldError is the failure of a message whose key a lease holds until
// until. A delivery before then would find it held again.
type heldError struct {
	until time.Time
	err   error
}

func (e *heldError) Error() string { return e.err.Error() }
func (e *heldError) Unwrap() error { return e.err }

// heldUntil is when the lease that holds a failed message's key ends, if
// one does.
func heldUntil(err error) (time.Time, bool) {
	var (
		inflight *idem.InFlightError
		held     *heldError
	)
	switch {
	case errors.As(err, &inflight):
		return inflight.LeaseExpiresAt, true
	case errors.As(err, &held):
		return held.until, true
	}
	return time.Time{}, false
}

// SQS wraps next as an SQS batch handler. Report batch item failures must
// be on for the event source mapping. Each message is processed at most
// once per key. A message already processed is a no-op, and so is a
// duplicate of one earlier in the batch.
//
// A message is reported in BatchItemFailures, for another delivery, when:
//   - its key or fingerprint cannot be read;
//   - its key is in flight elsewhere, or was used for another body;
//   - its processing did not happen (NotApplied);
//   - its outcome is unknown. A record left IN_FLIGHT is resolved by taking
//     it over, not by redelivery.
//
// A Failed outcome is final: the message is not redelivered. On a FIFO
// queue, the messages after a reported one are reported too, to keep
// their order.
//
// A reported message comes back when its visibility timeout ends. Each
// receive counts toward the redrive policy's maxReceiveCount. One whose
// key a live lease still holds is then reported again. SQSOptions.Visibility
// avoids that: it moves the next delivery to the lease's end.
// pkg/idem's docs/middleware.md says when that happens.
func SQS(b idem.Backend, operation string, next SQSFunc, optFns ...func(*SQSOptions)) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	var o SQSOptions
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Key == nil {
		o.Key = KeyFromMessageID
	}
	if o.Tenant == nil {
		o.Tenant = queueName
	}
	if o.Fingerprint == nil {
		o.Fingerprint = fingerprint
	}
	if o.Intent == nil {
		o.Intent = func(msg events.SQSMessage) ([]byte, error) { return []byte(msg.Body), nil }
	}
	if o.OnError == nil {
		o.OnError = func(context.Context, events.SQSMessage, error) {}
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var out events.SQSEventResponse
		// Within this batch: why each (key, body) was not processed, nil
		// for one that was.
		type intent struct {
			key idem.Key
			fp  idem.Fingerprint
		}
		done := map[intent]error{}
		failed := false
		for _, msg := range ev.Records {
			if failed && strings.HasSuffix(msg.EventSourceARN, ".fifo") {
				out.BatchItemFailures = append(out.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
				continue
			}
			var in intent
			key, err := o.key(msg, operation)
			if err == nil {
				in.key = key
				in.fp, err = o.Fingerprint(msg)
			}
			if err == nil {
				prev, seen := done[in]
				switch {
				case seen && prev != nil:
					err = fmt.Errorf("%w: a duplicate of a message in this batch that was not processed: %w", errRedeliver, prev)
				case !seen:
					err = o.process(ctx, b, in.key, in.fp, msg, next)
					done[in] = err
				}
			}
			if err != nil {
				failed = true
				o.OnError(ctx, msg, err)
				o.holdBack(ctx, b.Now(), msg, err)
				out.BatchItemFailures = append(out.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
			}
		}
		return out, nil
	}
}

func (o *SQSOptions) key(msg events.SQSMessage, operation string) (idem.Key, error) {
	tenant, err := o.Tenant(msg)
	if err != nil {
		return idem.Key{}, err
	}
	client, err := o.Key(msg)
	if err != nil {
		return idem.Key{}, err
	}
	key, err := idem.NewKey(tenant, operation, client)
	if err != nil {
		return idem.Key{}, fmt.Errorf("lambdaidem: message %s: %w", msg.MessageId, err)
	}
	return key, nil
}

// fingerprint is the canonical JSON body's, or the raw body's when it is
// not JSON.
func fingerprint(msg events.SQSMessage) (idem.Fingerprint, error) {
	if fp, err := idem.FingerprintJSON([]byte(msg.Body)); err == nil {
		return fp, nil
	}
	return idem.FingerprintOf([]byte(msg.Body)), nil
}

// process runs one message through idem.Do; nil means it needs no other
// delivery.
func (o *SQSOptions) process(ctx context.Context, b idem.Backend, key idem.Key, fp idem.Fingerprint, msg events.SQSMessage, next SQSFunc) error {
	intent, err := o.Intent(msg)
	if err != nil {
		return fmt.Errorf("lambdaidem: message %s: intent: %w", msg.MessageId, err)
	}
	res, err := idem.Do(ctx, b, key, fp, intent, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		return next(ctx, msg, l)
	}, func(d *idem.DoOptions) {
		d.Wait, d.OnWait = o.Wait, o.OnWait
		if o.Reserve > 0 {
			d.Reserve = o.Reserve
		}
	})
	if err != nil {
		err = fmt.Errorf("lambdaidem: message %s: %w", msg.MessageId, err)
	}
	switch {
	case res.Status == idem.StatusInFlight && res.Lease != nil: // it ran here, and its outcome is unknown
		if err == nil {
			err = fmt.Errorf("%w: message %s left %s", errRedeliver, msg.MessageId, res.Status)
		}
		return &heldError{until: res.Lease.ExpiresAt, err: err}
	case err != nil:
		return err
	case res.Status == idem.StatusReleased:
		return fmt.Errorf("%w: message %s left %s", errRedeliver, msg.MessageId, res.Status)
	}
	return nil
}

// maxVisibility is the longest visibility timeout SQS takes: 12 hours.
const maxVisibility = 12 * 60 * 60

// holdBack moves a failed message's next delivery to the end of the lease
// that holds its key. It does when there is such a lease and a Visibility
// client.
func (o *SQSOptions) holdBack(ctx context.Context, now time.Time, msg events.SQSMessage, err error) {
	until, ok := heldUntil(err)
	left := until.Sub(now)
	if o.Visibility == nil || !ok || left <= 0 {
		return
	}
	url, err := queueURL(msg.EventSourceARN)
	if err == nil {
		err = o.Visibility(ctx, VisibilityChange{
			QueueURL: url, ReceiptHandle: msg.ReceiptHandle,
			VisibilityTimeout: int32(min(math.Ceil(left.Seconds()), maxVisibility)),
		})
	}
	if err != nil {
		o.OnError(ctx, msg, fmt.Errorf("lambdaidem: message %s: hold back until its key's lease ends: %w", msg.MessageId, err))
	}
}

// queueURL is the URL of the queue an event source ARN names
// (arn:aws:sqs:region:account:name).
func queueURL(arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return "", fmt.Errorf("lambdaidem: event source %q is not a queue's ARN", arn)
	}
	domain := "amazonaws.com"
	if parts[1] == "aws-cn" {
		domain = "amazonaws.com.cn"
	}
	return "https://sqs." + parts[3] + "." + domain + "/" + parts[4] + "/" + parts[5], nil
}
