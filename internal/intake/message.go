package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Member names of a message.
const (
	FieldTenant    = "tenant"
	FieldCommandID = "command_id"
	FieldRequest   = "request"
	// FieldOperation is charge.ChargeOperation (the default) or
	// charge.RefundOperation, whose message names the charge in
	// FieldChargeID.
	FieldOperation = "operation"
	FieldChargeID  = "charge_id"
)

var messageFields = []string{FieldTenant, FieldCommandID, FieldRequest, FieldOperation, FieldChargeID}

// Command is a valid charge-requests message.
type Command struct {
	Key         idem.Key // tenant + operation + command id
	Fingerprint idem.Fingerprint
	// Request is a charge's; ChargeID and Refund a refund's.
	Request  charge.Request
	ChargeID string
	Refund   charge.RefundRequest
}

// MalformedError says why a message can never be processed. Field is the
// member at fault, empty for the message as a whole. Reason names the rule
// it breaks and never quotes the message. KeyHash is the command's key's
// LogHash once tenant and command id are known to be valid.
type MalformedError struct {
	Field, Reason, KeyHash string
}

func (e *MalformedError) Error() string {
	if e.Field == "" {
		return "intake: malformed message: " + e.Reason
	}
	return "intake: malformed message: " + e.Field + ": " + e.Reason
}

// ParseMessage validates a message body completely, as POST /charges
// validates a body. It checks its members, its tenant and command id, and
// its request. Every refusal is a *MalformedError.
func ParseMessage(body string) (Command, error) {
	malformed := func(field, reason string) (Command, error) {
		return Command{}, &MalformedError{Field: field, Reason: reason}
	}
	if _, err := idem.CanonicalJSON([]byte(body)); err != nil {
		return malformed("", "not a single JSON value of UTF-8 text without duplicate keys")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		return malformed("", "not a JSON object")
	}
	for name, value := range fields {
		if !slices.Contains(messageFields, name) {
			return malformed("", "unknown member (want tenant, command_id and request, and for a refund operation and charge_id)")
		}
		if string(value) == "null" {
			return malformed(name, "null")
		}
	}
	tenant, id, operation, chargeID := "", "", charge.ChargeOperation, ""
	for _, m := range []struct {
		name     string
		to       *string
		optional bool
	}{{FieldTenant, &tenant, false}, {FieldCommandID, &id, false}, {FieldOperation, &operation, true}, {FieldChargeID, &chargeID, true}} {
		raw, ok := fields[m.name]
		if !ok && m.optional {
			continue
		}
		if !ok {
			return malformed(m.name, "missing")
		}
		if err := json.Unmarshal(raw, m.to); err != nil {
			return malformed(m.name, "not a string")
		}
	}
	switch _, named := fields[FieldChargeID]; {
	case operation != charge.ChargeOperation && operation != charge.RefundOperation:
		return malformed(FieldOperation, "must be "+charge.ChargeOperation+" or "+charge.RefundOperation)
	case operation == charge.RefundOperation && !named:
		return malformed(FieldChargeID, "missing")
	case operation == charge.RefundOperation && !charge.IsChargeID(chargeID):
		return malformed(FieldChargeID, "not a charge id")
	case operation == charge.ChargeOperation && named:
		return malformed(FieldChargeID, "only a refund names a charge")
	}
	if err := idem.CheckTenant(tenant); err != nil {
		return malformed(FieldTenant, "not a tenant identifier (letters, digits and . _ - : @, at most 128)")
	}
	cid, err := charge.ParseCommandID(id)
	if err != nil || strings.TrimSpace(id) != id {
		// HTTP drops a header value's outer spaces: such an id could never
		// be retried over the API.
		return malformed(FieldCommandID, "must be 1 to 255 printable ASCII characters, not starting or ending with a space")
	}
	key, _ := idem.NewKey(tenant, operation, string(cid)) // all checked
	raw, ok := fields[FieldRequest]
	if !ok {
		return Command{}, &MalformedError{Field: FieldRequest, Reason: "missing", KeyHash: key.LogHash()}
	}
	cmd := Command{Key: key, ChargeID: chargeID}
	if operation == charge.RefundOperation {
		cmd.Refund, cmd.Fingerprint, err = charge.ParseRefundBody(chargeID, raw)
	} else {
		cmd.Request, cmd.Fingerprint, err = charge.ParseBody(raw)
	}
	var (
		be *charge.BodyError
		ie *charge.InvalidError
	)
	switch {
	case errors.As(err, &be):
		return Command{}, &MalformedError{Field: FieldRequest, Reason: be.Reason, KeyHash: key.LogHash()}
	case errors.As(err, &ie):
		return Command{}, &MalformedError{Field: FieldRequest, Reason: ie.Field + ": " + ie.Reason, KeyHash: key.LogHash()}
	case err != nil:
		return Command{}, fmt.Errorf("intake: %w", err)
	}
	return cmd, nil
}

// message is a charge-requests message as EncodeMessage writes it.
type message struct {
	Tenant    string          `json:"tenant"`
	CommandID string          `json:"command_id"`
	Request   json.RawMessage `json:"request"`
	Operation string          `json:"operation,omitempty"`
	ChargeID  string          `json:"charge_id,omitempty"`
}

// EncodeMessage writes the message submitting request (a POST /charges
// body) as the command id of tenant. It checks that request is JSON, not
// that it is a valid request: the intake does.
func EncodeMessage(tenant string, id charge.CommandID, request []byte) (string, error) {
	return encode(message{Tenant: tenant, CommandID: string(id), Request: request})
}

// EncodeRefund writes the message submitting request (a
// POST /charges/{id}/refunds body) for tenant's charge chargeID.
func EncodeRefund(tenant string, id charge.CommandID, chargeID string, request []byte) (string, error) {
	return encode(message{Tenant: tenant, CommandID: string(id), Request: request, Operation: charge.RefundOperation, ChargeID: chargeID})
}

func encode(m message) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("intake: encode message: %w", err)
	}
	return string(b), nil
}

// SendAPI is the part of *sqs.Client a Queue uses.
type SendAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ SendAPI = (*sqs.Client)(nil)

// Message attributes of a dead letter the handler sends.
const (
	AttrError           = "intake-error"
	AttrSourceMessageID = "intake-source-message-id"
)

// Queue sends messages to one queue. Submit sends charge requests to the
// charge-requests queue. DeadLetter sends malformed ones to its dead-letter
// queue.
type Queue struct {
	client SendAPI
	url    string
}

// NewQueue returns a Queue sending to the queue at url.
func NewQueue(client SendAPI, url string) (*Queue, error) {
	if client == nil || url == "" {
		return nil, errors.New("intake: queue needs a client and a queue URL")
	}
	return &Queue{client: client, url: url}, nil
}

// Submit sends the message submitting request as the command id of
// tenant and returns its SQS message id.
func (q *Queue) Submit(ctx context.Context, tenant string, id charge.CommandID, request []byte) (string, error) {
	body, err := EncodeMessage(tenant, id, request)
	if err != nil {
		return "", err
	}
	out, err := q.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(body)})
	if err != nil {
		return "", fmt.Errorf("intake: submit: %w", err)
	}
	return aws.ToString(out.MessageId), nil
}

// DeadLetter sends msg's body unchanged, with why it was refused and its
// message id as message attributes.
func (q *Queue) DeadLetter(ctx context.Context, msg events.SQSMessage, reason string) error {
	_, err := q.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.url), MessageBody: aws.String(msg.Body),
		MessageAttributes: map[string]types.MessageAttributeValue{
			AttrError:           {DataType: aws.String("String"), StringValue: aws.String(reason)},
			AttrSourceMessageID: {DataType: aws.String("String"), StringValue: aws.String(msg.MessageId)},
		},
	})
	if err != nil {
		return fmt.Errorf("intake: dead-letter: %w", err)
	}
	return nil
}
