package charge_test

// A refund that failed after it succeeded, recorded whatever else writes the charge meanwhile.

import (
	"bytes"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// refundFailedLater delivers the provider's "refund failed" (Stripe's
// refund.failed) for the refund made under client key, as its own event.
func refundFailedLater(t *testing.T, svc *charge.Service, h *harness, client, event string) charge.Result {
	t.Helper()
	key := refundKey(t, "acme", client)
	rec, err := h.store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Notify(t.Context(), charge.Notification{
		Provider: "stripe", EventID: event, Command: key,
		Reference: charge.RefundReference(key, rec.CreatedAt),
		Result:    provider.Result{Status: provider.StatusDeclined, ChargeID: "re_failedlater", DeclineCode: "expired_or_canceled_card"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// transactionCanceled is DynamoDB's answer to a TransactWriteItems that
// another request's write on one of its items cancelled: reasons per
// item, here [None, TransactionConflict]. Nothing was written.
func transactionCanceled(req *http.Request) *http.Response {
	return dynamoAnswer(req, http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",`+
		`"CancellationReasons":[{"Code":"None"},{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"}],`+
		`"Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [None, TransactionConflict]"}`)
}

// dynamoAnswer is DynamoDB's answer to req with status and body.
func dynamoAnswer(req *http.Request, status int, body string) *http.Response {
	return &http.Response{
		Status: http.StatusText(status), StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":     {"application/x-amz-json-1.0"},
			"X-Amzn-Requestid": {"injected"},
			"Content-Length":   {strconv.Itoa(len(body))},
			"X-Amz-Crc32":      {strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10)},
		},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// TestRefundFailedLaterIsNotLostToATransactionConflict: a refund that
// fails after it succeeded is recorded: "its amount returns to the
// charge, and the refund reads failed" (failedLater). Rows.failRefund
// takes every TransactionCanceledException for "failed already", but
// DynamoDB also cancels the transaction when another write on the
// charge's row (a new refund's hold, a settlement) conflicts with it.
// The event is then committed as processed, the provider's redelivery is
// a replay, and the refund reads succeeded for ever: amount_refunded
// counts money the customer never got, and it can never be refunded.
func TestRefundFailedLaterIsNotLostToATransactionConflict(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	client := newKey()
	wantStatus(t, h.do(postRefund("acme", client, id, `{"amount":1000}`)), http.StatusCreated)
	var armed atomic.Bool
	armed.Store(true)
	hook := func(req *http.Request, body []byte) *http.Response {
		if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") && bytes.Contains(body, []byte(`":failed"`)) &&
			armed.CompareAndSwap(true, false) {
			return transactionCanceled(req) // a new refund's hold raced it on the charge's row
		}
		return nil
	}
	h.db.Store(&hook)
	event := "evt_" + strings.ReplaceAll(newKey(), "-", "")
	hooked := h.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Deps.Clock = h.clock.Now
		w.Deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: dbHook{h}} })
	})
	first := refundFailedLater(t, hooked, h.harness, client, event)
	h.db.Store(nil)
	again := refundFailedLater(t, hooked, h.harness, client, event) // the provider's redelivery
	t.Logf("hook fired %v; Notify %q, redelivery %q", !armed.Load(), first.Outcome, again.Outcome)
	c := h.readCharge(t, "acme", id)
	if c.AmountRefunded != 0 {
		t.Fatalf("refund.failed met a transaction conflict (Notify %q, redelivery %q): the charge still reads %d refunded; a refund of the 1000 the customer never got is refused",
			first.Outcome, again.Outcome, c.AmountRefunded)
	}
}
