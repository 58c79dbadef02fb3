package lambdaidem_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/pkg/idem"
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
