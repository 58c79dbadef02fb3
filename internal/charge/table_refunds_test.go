package charge_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// maxRefunds lowers a charge's limit of refunds, so a test reaches it fast.
func maxRefunds(n int) func(*app.ChargeConfig) {
	return func(c *app.ChargeConfig) { c.MaxRefunds = n }
}

// TestRefundBeyondTheLimitIsRefusedForGood: a charge's settled refunds
// at the limit refuse one more, whatever its amount. Settled refunds
// never go away, so the refusal is final: stored for its key, and a new
// key meets it too. The provider is never asked.
func TestRefundBeyondTheLimitIsRefusedForGood(t *testing.T) {
	t.Parallel()
	h := newHarness(t, maxRefunds(2))
	id := h.charged(t, "acme", 1000)
	h.refunded(t, "acme", id, 2)
	key := newKey()
	first := h.do(postRefund("acme", key, id, `{"amount":100}`))
	if first.StatusCode != http.StatusConflict || problemType(t, first) != "refund-limit-reached" || first.Headers["Retry-After"] != "" {
		t.Fatalf("a third refund of a charge limited to 2: %d %v %s, want a final 409 refund-limit-reached", first.StatusCode, first.Headers, first.Body)
	}
	if again := h.do(postRefund("acme", key, id, `{"amount":100}`)); again.Body != first.Body || again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("retry %d %v %s, want the 409 replayed", again.StatusCode, again.Headers, again.Body)
	}
	if other := h.do(postRefund("acme", newKey(), id, "")); other.StatusCode != http.StatusConflict || problemType(t, other) != "refund-limit-reached" {
		t.Fatalf("a new key: %d %s, want 409 refund-limit-reached", other.StatusCode, other.Body)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 2 || n != 2 {
		t.Fatalf("provider refunded %d in %d, want 2 in 2", got, n)
	}
}

// TestRefundLimitHeldByOneInFlightIsNotFinal: when a refund in flight
// fills the last place, one more is refused with Retry-After and nothing
// stored. Once that refund is proven not made, its place is free, and
// the same key succeeds.
func TestRefundLimitHeldByOneInFlightIsNotFinal(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t, maxRefunds(2))
	id := h.charged(t, "acme", 1000)
	h.refunded(t, "acme", id, 1)
	lost := newKey()
	h.faultOn("/refunds", edge502) // never forwarded, but the service cannot know
	if pending := h.do(postRefund("acme", lost, id, `{"amount":100}`)); pending.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("refund behind a 502: %d %s, want 503", pending.StatusCode, pending.Body)
	}
	h.faultOn("", "")
	key := newKey()
	held := h.do(postRefund("acme", key, id, `{"amount":100}`))
	if held.StatusCode != http.StatusConflict || problemType(t, held) != "refund-limit-reached" || held.Headers["Retry-After"] == "" {
		t.Fatalf("a refund while one in flight fills the limit: %d %v %s, want 409 refund-limit-reached with Retry-After", held.StatusCode, held.Headers, held.Body)
	}
	h.clock.Advance(10 * time.Minute)
	if out, err := h.recon.Reconcile(t.Context(), refundKey(t, "acme", lost)); err != nil || out != charge.OutcomeReleased {
		t.Fatalf("reconcile: %s, %v; want %s", out, err, charge.OutcomeReleased)
	}
	again := h.do(postRefund("acme", key, id, `{"amount":100}`))
	wantStatus(t, again, http.StatusCreated)
	if again.Headers["Idempotent-Replayed"] != "" {
		t.Fatalf("the retry replayed %s, want a new answer", again.Body)
	}
	if got, n := h.providerRefunded(t, "acme", id); got != 101 || n != 2 {
		t.Fatalf("provider refunded %d in %d, want 101 in 2", got, n)
	}
}

// TestRefundNotMadeGivesBackItsPlace: a refund the provider could not be
// asked frees its place under the limit with its hold.
func TestRefundNotMadeGivesBackItsPlace(t *testing.T) {
	t.Parallel()
	h := newRefundRig(t, maxRefunds(1))
	id := h.charged(t, "acme", 1000)
	h.faultOn("/refunds", providersim.FaultUnavailable)
	if down := h.do(postRefund("acme", newKey(), id, `{"amount":100}`)); down.StatusCode != http.StatusServiceUnavailable || problemType(t, down) != "provider-unavailable" {
		t.Fatalf("provider down: %d %s, want 503 provider-unavailable", down.StatusCode, down.Body)
	}
	h.faultOn("", "")
	wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":100}`)), http.StatusCreated)
}

// TestChargeListsItsRefundsOldestFirst: api/openapi.yaml, Charge
// .refunds: "The charge's refunds, oldest first." GetWithRefunds returns
// them in the order of their row ids, "<charge id>#re_<hash>", which is a
// hash's order, not their creation's.
func TestChargeListsItsRefundsOldestFirst(t *testing.T) {
	t.Parallel()
	h := newHookRig(t)
	id := h.charged(t, "acme", 1000)
	for range 8 {
		h.clock.Advance(3 * time.Second)
		wantStatus(t, h.do(postRefund("acme", newKey(), id, `{"amount":100}`)), http.StatusCreated)
	}
	resp := h.do(get("acme", id))
	wantStatus(t, resp, http.StatusOK)
	var c struct {
		Refunds []struct {
			ID        string
			CreatedAt string `json:"created_at"`
		}
	}
	if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Refunds) != 8 {
		t.Fatalf("refunds %d, want 8: %s", len(c.Refunds), resp.Body)
	}
	if !sort.SliceIsSorted(c.Refunds, func(i, j int) bool { return c.Refunds[i].CreatedAt < c.Refunds[j].CreatedAt }) {
		t.Fatalf("GET /charges/%s lists its refunds out of creation order: %+v", id, c.Refunds)
	}
}

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

// TestGetWithRefundsReadsTheChargeAndItsRefundsAlone: a row whose id
// extends the charge's, without the "#" of a refund's, is another row.
// Reading the charge with its refunds never returns it.
func TestGetWithRefundsReadsTheChargeAndItsRefundsAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.charged(t, "acme", 1000)
	h.refunded(t, "acme", id, 1)
	other := h.charged(t, "acme", 700)
	db := testkit.Clients(t).DynamoDB
	key := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{charge.AttrTenant: &types.AttributeValueMemberS{Value: "acme"}, charge.AttrID: &types.AttributeValueMemberS{Value: id}}
	}
	out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(h.d.ChargesTable), Key: key(other)})
	if err != nil || out.Item == nil {
		t.Fatalf("the other charge's row: %v", err)
	}
	out.Item[charge.AttrID] = &types.AttributeValueMemberS{Value: id + "0"}
	if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(h.d.ChargesTable), Item: out.Item}); err != nil {
		t.Fatal(err)
	}
	c, found, err := h.rows(t).GetWithRefunds(t.Context(), "acme", id)
	if err != nil || !found || c.ID != id || c.Money.Amount != 1000 || len(c.Refunds) != 1 || c.Refunds[0].ChargeID != id {
		t.Errorf("charge %s with its refunds: %+v %v %v", id, c, found, err)
	}
}
