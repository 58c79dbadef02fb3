package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// sqsAPI is the part of *sqs.Client the dlq commands use.
type sqsAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// How the dlq commands read the dead-letter queue. Each message received
// is hidden for holdFor, long enough to read them all. Then it is made
// visible again at once, unless it was moved. An empty receive after
// waitFor ends the reading.
const (
	holdFor     = 60 * time.Second
	waitFor     = time.Second
	maxRedrive  = 10000
	sqsBatchMax = 10
)

// letterOutput is one dead letter as the dlq commands print it.
type letterOutput struct {
	MessageID string    `json:"message_id"`
	SentAt    time.Time `json:"sent_at,omitzero"`
	Receives  int       `json:"receives"`
	Tenant    string    `json:"tenant,omitempty"`
	Key       string    `json:"key,omitempty"`
	Operation string    `json:"operation,omitempty"`
	// Error says why the body names no key.
	Error string `json:"error,omitempty"`
}

// letter describes m, and returns the key it names.
func letter(m types.Message) (letterOutput, idem.Key, error) {
	out := letterOutput{MessageID: aws.ToString(m.MessageId)}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		out.SentAt = time.UnixMilli(ms).UTC()
	}
	out.Receives, _ = strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	msg, err := queue.ParseMessage(aws.ToString(m.Body))
	if err != nil {
		out.Error = err.Error()
		return out, idem.Key{}, err
	}
	key := msg.Key
	out.Tenant, out.Key, out.Operation = key.Tenant(), key.ClientKey(), key.Operation()
	return out, key, nil
}

// receiveAll receives up to limit messages from url, each hidden for
// holdFor, until a receive finds none.
func receiveAll(ctx context.Context, q sqsAPI, url string, limit int) ([]types.Message, error) {
	var msgs []types.Message
	seen := map[string]bool{}
	for len(msgs) < limit {
		out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         int32(min(sqsBatchMax, limit-len(msgs))),
			VisibilityTimeout:           int32(holdFor.Seconds()),
			WaitTimeSeconds:             int32(waitFor.Seconds()),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return msgs, fmt.Errorf("receive from %s: %w", url, err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			if !seen[aws.ToString(m.MessageId)] {
				seen[aws.ToString(m.MessageId)] = true
				msgs = append(msgs, m)
			}
		}
	}
	return msgs, nil
}

// release makes msgs visible on url again at once.
func release(ctx context.Context, q sqsAPI, url string, msgs []types.Message) error {
	var errs []error
	for chunk := range slices.Chunk(msgs, sqsBatchMax) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}
		}
		out, err := q.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
		switch {
		case err != nil:
			errs = append(errs, err)
		case len(out.Failed) > 0:
			errs = append(errs, fmt.Errorf("%d messages not made visible: %s", len(out.Failed), aws.ToString(out.Failed[0].Message)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("put messages back (they reappear within %s anyway): %w", holdFor, err)
	}
	return nil
}

func (a *admin) dlqList(ctx context.Context, limit int) error {
	msgs, err := receiveAll(ctx, a.clients.SQS, a.cfg.ReconcileDLQURL, limit)
	if rerr := release(ctx, a.clients.SQS, a.cfg.ReconcileDLQURL, msgs); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	out := make([]letterOutput, len(msgs))
	for i, m := range msgs {
		out[i], _, _ = letter(m)
	}
	if a.json {
		return a.printJSON(struct {
			Messages []letterOutput `json:"messages"`
		}{out})
	}
	if len(out) == 0 {
		fmt.Fprintln(a.stdout, "the dead-letter queue is empty")
		return nil
	}
	fmt.Fprintf(a.stdout, "%d messages in the dead-letter queue (left there; receives count this listing too):\n", len(out))
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FIRST SENT\tRECEIVES\tMESSAGE ID\tTENANT\tKEY")
	for _, l := range out {
		tenant, key := l.Tenant, l.Key
		if l.Error != "" {
			tenant, key = "-", "(malformed: "+l.Error+")"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", stamp(l.SentAt), l.Receives, l.MessageID, tenant, key)
	}
	return w.Flush()
}

// redriveOutput is what dlq redrive prints.
type redriveOutput struct {
	Moved []letterOutput `json:"moved"`
	// NotDeleted were sent to the reconcile queue but are still in the
	// dead-letter queue too: a duplicate, which the reconciler ignores.
	NotDeleted []letterOutput `json:"not_deleted,omitempty"`
	// Failed could not be sent; they stay in the dead-letter queue.
	Failed []letterOutput `json:"failed,omitempty"`
	// Malformed name no key: never moved.
	Malformed []letterOutput `json:"malformed,omitempty"`
	// Left counts the messages left in place because they name another
	// key than --key.
	Left int `json:"left"`
}

func (a *admin) dlqRedrive(ctx context.Context, args []string) (err error) {
	var only idem.Key
	if len(args) == 2 {
		if only, err = a.key(args); err != nil {
			return err
		}
	}
	q, dlq := a.clients.SQS, a.cfg.ReconcileDLQURL
	msgs, err := receiveAll(ctx, q, dlq, maxRedrive)
	var out redriveOutput
	var keep, move []types.Message
	var moving []letterOutput
	for _, m := range msgs {
		l, key, perr := letter(m)
		switch {
		case perr != nil:
			out.Malformed = append(out.Malformed, l)
			keep = append(keep, m)
		case only != (idem.Key{}) && key != only:
			out.Left++
			keep = append(keep, m)
		default:
			move = append(move, m)
			moving = append(moving, l)
		}
	}
	if err == nil {
		var failed []types.Message
		failed, err = a.move(ctx, move, moving, &out)
		keep = append(keep, failed...)
	} else {
		keep = append(keep, move...)
	}
	if rerr := release(ctx, q, dlq, keep); err == nil {
		err = rerr
	}
	// What moved is reported even when something failed.
	if a.json {
		if perr := a.printJSON(out); err == nil {
			err = perr
		}
	} else {
		a.printRedrive(out)
	}
	if err == nil && only != (idem.Key{}) && len(out.Moved) == 0 {
		err = fmt.Errorf("no message of %s in the dead-letter queue", keyText(only))
	}
	return err
}

// move sends msgs to the reconcile queue and deletes from the dead-letter
// queue the ones sent, noting each in out. It returns the messages not
// sent.
func (a *admin) move(ctx context.Context, msgs []types.Message, letters []letterOutput, out *redriveOutput) ([]types.Message, error) {
	var unsent []types.Message
	for start := 0; start < len(msgs); start += sqsBatchMax {
		chunk, ls := msgs[start:min(start+sqsBatchMax, len(msgs))], letters[start:min(start+sqsBatchMax, len(msgs))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: m.Body}
		}
		sent, err := a.clients.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(a.cfg.ReconcileQueueURL), Entries: entries})
		if err != nil {
			return append(unsent, msgs[start:]...), fmt.Errorf("send to %s: %w", a.cfg.ReconcileQueueURL, err)
		}
		failed := map[int]bool{}
		for _, f := range sent.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			failed[i] = true
		}
		var del []types.DeleteMessageBatchRequestEntry
		var deleting []letterOutput
		for i, m := range chunk {
			if failed[i] {
				unsent = append(unsent, m)
				out.Failed = append(out.Failed, ls[i])
				continue
			}
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(del))), ReceiptHandle: m.ReceiptHandle})
			deleting = append(deleting, ls[i])
		}
		if len(del) == 0 {
			continue
		}
		deleted, err := a.clients.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(a.cfg.ReconcileDLQURL), Entries: del})
		if err != nil {
			out.NotDeleted = append(out.NotDeleted, deleting...)
			continue
		}
		notDeleted := map[int]bool{}
		for _, f := range deleted.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			notDeleted[i] = true
		}
		for i, l := range deleting {
			if notDeleted[i] {
				out.NotDeleted = append(out.NotDeleted, l)
			} else {
				out.Moved = append(out.Moved, l)
			}
		}
	}
	return unsent, nil
}

func (a *admin) printRedrive(out redriveOutput) {
	fmt.Fprintf(a.stdout, "moved %d messages to the reconcile queue\n", len(out.Moved))
	for _, l := range out.Moved {
		fmt.Fprintf(a.stdout, "  %s / %s  (message %s)\n", l.Tenant, l.Key, l.MessageID)
	}
	for _, l := range out.NotDeleted {
		fmt.Fprintf(a.stdout, "sent, but still in the dead-letter queue (a harmless duplicate): %s / %s  (message %s)\n", l.Tenant, l.Key, l.MessageID)
	}
	for _, l := range out.Failed {
		fmt.Fprintf(a.stdout, "not sent, left in the dead-letter queue: %s / %s  (message %s)\n", l.Tenant, l.Key, l.MessageID)
	}
	for _, l := range out.Malformed {
		fmt.Fprintf(a.stdout, "malformed, left in the dead-letter queue: message %s (%s)\n", l.MessageID, l.Error)
	}
	if out.Left > 0 {
		fmt.Fprintf(a.stdout, "left %d messages of other keys in the dead-letter queue\n", out.Left)
	}
}
