package stripe_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
)

func refund(reference, paymentIntent string, amount int64) provider.RefundRequest {
	return provider.RefundRequest{Reference: reference, Charge: paymentIntent, Amount: amount, Currency: "EUR"}
}

// mustCharge charges 1500 with source and returns the PaymentIntent's id.
func mustCharge(t *testing.T, b *backend, reference, source string) string {
	t.Helper()
	res, err := b.adapter.Charge(t.Context(), charge(reference, source))
	if err != nil || res.Status != provider.StatusCharged {
		t.Fatalf("charge %s: %+v, %v", reference, res, err)
	}
	return res.ChargeID
}

// refundsOf lists the refunds of the PaymentIntent pi as Stripe shows them.
func refundsOf(t *testing.T, b *backend, pi string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+"/v1/refunds?payment_intent="+pi, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list.Data
}

// TestRefundSendsOneRefund: a Refund of the PaymentIntent for the amount,
// under the reference as its key, with the reference and the command as
// metadata, and its row.
func TestRefundSendsOneRefund(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := mustCharge(t, b, "co_refunded", stripesim.PMVisa)
	req := refund("co_refund_1", pi, 600)
	req.Command, req.Row = "acme#refund-charge#r-1", "ch_1#re_1"
	res, err := b.adapter.Refund(t.Context(), req)
	if err != nil || res.Status != provider.StatusRefunded || !strings.HasPrefix(res.ChargeID, "re_") || res.Reference != req.Reference {
		t.Fatalf("refund: %+v, %v", res, err)
	}
	refunds := refundsOf(t, b, pi)
	if len(refunds) != 1 {
		t.Fatalf("%d refunds of %s, want 1", len(refunds), pi)
	}
	rf := refunds[0]
	md, _ := rf["metadata"].(map[string]any)
	if rf["id"] != res.ChargeID || rf["amount"] != 600.0 || rf["currency"] != "eur" || rf["status"] != "succeeded" ||
		md[stripe.MetadataReference] != req.Reference || md[stripe.MetadataCommand] != req.Command || md[stripe.MetadataRow] != req.Row {
		t.Fatalf("Refund %+v", rf)
	}
	if n := b.sim.Refunded(req.Reference); n != 1 {
		t.Fatalf("%d refunds under the key %s, want 1", n, req.Reference)
	}
}

// TestRefundKeyReusedIsRejected: a reference Stripe holds for another
// refund (or a charge) refunds nothing more, and says why.
func TestRefundKeyReusedIsRejected(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := mustCharge(t, b, "co_reused", stripesim.PMVisa)
	if _, err := b.adapter.Refund(t.Context(), refund("co_refund_reused", pi, 500)); err != nil {
		t.Fatal(err)
	}
	for _, req := range []provider.RefundRequest{refund("co_refund_reused", pi, 700), refund("co_reused", pi, 500)} {
		_, err := b.adapter.Refund(t.Context(), req)
		if !errors.Is(err, provider.ErrRejected) || !errors.Is(err, stripe.ErrKeyReused) {
			t.Errorf("refund under %s with other parameters: %v, want ErrRejected wrapping ErrKeyReused", req.Reference, err)
		}
	}
	if got := b.sim.RefundedAmount(pi); got != 500 {
		t.Fatalf("refunded %d, want the first refund's 500 alone", got)
	}
}

// TestRefundRefusedBeforeSending: a refund the adapter can tell is wrong
// is not sent.
func TestRefundRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := mustCharge(t, b, "co_unsent", stripesim.PMVisa)
	before := b.sim.Requests()
	for name, req := range map[string]provider.RefundRequest{
		"no reference":       refund("", pi, 500),
		"our provider's id":  refund("co_unsent_1", "pc_0123456789abcdef", 500),
		"zero amount":        refund("co_unsent_2", pi, 0),
		"no currency":        {Reference: "co_unsent_3", Charge: pi, Amount: 500},
		"reference too long": refund(strings.Repeat("r", 256), pi, 500),
	} {
		if _, err := b.adapter.Refund(t.Context(), req); !errors.Is(err, provider.ErrRejected) {
			t.Errorf("%s: %v, want ErrRejected", name, err)
		}
	}
	if n := b.sim.Requests() - before; n != 0 {
		t.Fatalf("%d requests reached Stripe, want none", n)
	}
}

// TestRefundThatFailsIsDeclined: a refund the issuer returns turns failed;
// the lookup answers it declined with Stripe's failure reason, and its
// amount may be refunded again under another reference.
func TestRefundThatFailsIsDeclined(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := mustCharge(t, b, "co_refund_fails", stripesim.PMRefundFail)
	req := refund("co_refund_fails_1", pi, 1500)
	first, err := b.adapter.Refund(t.Context(), req)
	if err != nil || first.Status != provider.StatusRefunded {
		t.Fatalf("refund: %+v, %v", first, err)
	}
	if n := b.sim.FailRefunds(); n != 1 {
		t.Fatalf("%d refunds failed, want 1", n)
	}
	want := provider.Result{Status: provider.StatusDeclined, Reference: req.Reference, ChargeID: first.ChargeID, DeclineCode: "expired_or_canceled_card"}
	if got, err := b.adapter.LookupRefund(t.Context(), req); err != nil || got != want {
		t.Fatalf("lookup of the failed refund: %+v, %v; want %+v", got, err, want)
	}
	if res, err := b.adapter.Refund(t.Context(), refund("co_refund_fails_2", pi, 1500)); err != nil || res.Status != provider.StatusRefunded {
		t.Fatalf("a new refund of the amount the failed one returned: %+v, %v", res, err)
	}
}

// TestLookupRefundReadsEveryPage: the refund looked up may be on any page
// of the PaymentIntent's refunds.
func TestLookupRefundReadsEveryPage(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := mustCharge(t, b, "co_many_refunds", stripesim.PMVisa)
	oldest := refund("co_many_refunds_0", pi, 1)
	first, err := b.adapter.Refund(t.Context(), oldest)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		if _, err := b.adapter.Refund(t.Context(), refund(fmt.Sprintf("co_many_refunds_%d", i), pi, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := b.adapter.LookupRefund(t.Context(), oldest); err != nil || got != first {
		t.Fatalf("lookup of the oldest of 101 refunds: %+v, %v; want %+v", got, err, first)
	}
}

// TestRefundOutcomes: a pending refund counts as refunded; one that needs
// the customer's action has no outcome yet, which is ambiguous for a
// refund and a reason to ask again for a lookup.
func TestRefundOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status  string
		want    provider.Status
		refund  error
		lookups error
	}{
		{"pending", provider.StatusRefunded, nil, nil},
		{"succeeded", provider.StatusRefunded, nil, nil},
		{"canceled", provider.StatusDeclined, nil, nil},
		{"requires_action", "", provider.ErrAmbiguous, provider.ErrUnavailable},
	} {
		refundJSON := fmt.Sprintf(`{"object":"refund","id":"re_1","status":%q,"payment_intent":"pi_1","metadata":{"chargeonce_reference":"co_r"}}`, c.status)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodGet {
				_, _ = fmt.Fprintf(w, `{"object":"list","url":"/v1/refunds","has_more":false,"data":[%s]}`, refundJSON)
				return
			}
			_, _ = w.Write([]byte(refundJSON))
		}))
		t.Cleanup(srv.Close)
		a := newAdapter(t, srv.URL, func(o *stripe.Options) { o.Timeout = time.Second })
		res, err := a.Refund(t.Context(), refund("co_r", "pi_1", 100))
		if !errors.Is(err, c.refund) || err == nil && res.Status != c.want {
			t.Errorf("refund %s: %+v, %v; want %s, %v", c.status, res, err, c.want, c.refund)
		}
		res, err = a.LookupRefund(t.Context(), refund("co_r", "pi_1", 100))
		if !errors.Is(err, c.lookups) || err == nil && res.Status != c.want {
			t.Errorf("lookup of a refund %s: %+v, %v; want %s, %v", c.status, res, err, c.want, c.lookups)
		}
	}
}

// TestResentRefundAnsweredByTheEdgeIsAmbiguous: as for a charge, an error
// answer to the transport's re-send of a refund Stripe executed says
// nothing of the first send; the lookup finds the refund.
func TestResentRefundAnsweredByTheEdgeIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	pi := mustCharge(t, b, "co_resent_refund", stripesim.PMVisa)
	req := refund("co_resent_refund_1", pi, 500)
	srv, _ := resendServer(t, b.sim, req.Reference, http.StatusTooManyRequests,
		`{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests hit the API too quickly."}}`)
	a := newAdapter(t, srv.URL, func(o *stripe.Options) { o.HTTPClient, o.Clock = srv.Client(), b.clock.Now })
	if _, err := a.Refund(t.Context(), refund("co_resent_refund_warm", pi, 100)); err != nil {
		t.Fatal(err) // a kept-alive connection for the next request
	}
	_, err := a.Refund(t.Context(), req)
	if b.sim.Refunded(req.Reference) != 1 {
		t.Fatalf("setup: refunded %d times", b.sim.Refunded(req.Reference))
	}
	if !errors.Is(err, provider.ErrAmbiguous) {
		t.Fatalf("refund executed by Stripe: %v, want ErrAmbiguous", err)
	}
	if got, err := a.LookupRefund(t.Context(), req); err != nil || got.Status != provider.StatusRefunded {
		t.Fatalf("lookup after the lost answer: %+v, %v", got, err)
	}
}
