package regions_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/aws/aws-lambda-go/events"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// readCharge is what a read of a charge answers, as a client parses it.
type readCharge struct {
	ID                string       `json:"id"`
	Amount            int64        `json:"amount"`
	Status            string       `json:"status"`
	ProviderReference string       `json:"provider_reference"`
	AmountRefunded    int64        `json:"amount_refunded"`
	Refunds           []readRefund `json:"refunds"`
}

// readRefund is what a read of a refund answers.
type readRefund struct {
	ID                string `json:"id"`
	ChargeID          string `json:"charge_id"`
	Amount            int64  `json:"amount"`
	ProviderReference string `json:"provider_reference"`
}

// read is a client's GET of a charge it saw made, or of a refund it saw
// made, in whatever Region its request reaches.
func (h *history) read(rt *rapid.T) {
	if rf := h.pick(rt, "refund"); rf != nil && rf.chargeID != "" && rapid.Bool().Draw(rt, "readRefund") {
		h.readRefund(rt, rf)
		return
	}
	if c := h.charged(rt, rapid.Bool().Draw(rt, "readAuthorized")); c != nil {
		h.readCharge(rt, c, false)
	}
}

// readCharge reads c and checks the answer against the provider. exact:
// every Region is drained, so the read must be the provider's truth.
//
// docs/contract.md, "Reading a charge": a charge answered 201 is found;
// 404 is only for unknown ids and other tenants. "In two Regions": during
// a failover a read not found here is 503 outcome-pending. So a read
// never says a charge the provider made does not exist. A read found may
// lag a failover's unreplicated writes. It never claims what the provider
// did not do: a capture, a cancel of what it captured, or a refund.
func (h *history) readCharge(rt *rapid.T, c *intent, exact bool) {
	resp, ok := h.send(rt, c.key.Tenant(), func(s *stack) (events.APIGatewayV2HTTPResponse, error) {
		return s.handler.Handle(context.Background(), testkit.GetCharge(c.key.Tenant(), c.chargeID))
	})
	if !ok {
		return
	}
	if !exact {
		h.st.reads.Add(1)
	}
	if h.unread(rt, c, resp, exact) {
		return
	}
	var got readCharge
	if err := json.Unmarshal([]byte(resp.Body), &got); err != nil || got.ID != c.chargeID {
		rt.Fatalf("%s: a read of %s answered %s", c.key, c.chargeID, resp.Body)
	}
	l := h.w.sim.Ledger()
	e := l.References[got.ProviderReference]
	captured := e.Authorized == 0 || e.Captures > 0
	switch {
	case e.Status != provider.StatusCharged && e.Status != provider.StatusAuthorized:
		rt.Fatalf("%s: a read says %s exists, the provider has %+v under %s", c.key, got.ID, e, got.ProviderReference)
	case got.Status == charge.StatusCanceled && e.Captures > 0:
		rt.Fatalf("%s: a read says %s is canceled, the provider captured %d", c.key, got.ID, e.Captured)
	case got.Status == charge.StatusSucceeded && !captured:
		rt.Fatalf("%s: a read says %s succeeded, the provider only authorized it: %+v", c.key, got.ID, e)
	case got.Status == charge.StatusSucceeded && e.Captures > 0 && got.Amount != e.Captured:
		rt.Fatalf("%s: a read says %s took %d, the provider captured %d", c.key, got.ID, got.Amount, e.Captured)
	case got.AmountRefunded > e.Refunded:
		rt.Fatalf("%s: a read says %d of %s refunded, the provider refunded %d", c.key, got.AmountRefunded, got.ID, e.Refunded)
	}
	for _, rf := range got.Refunds {
		h.checkRefundRead(rt, c, rf, l)
	}
	if !exact {
		h.checkReadYourWrites(rt, c, got)
	}
	want := wantStatus(e)
	if got.Status == want && got.AmountRefunded == e.Refunded {
		return
	}
	h.st.staleReads.Add(1)
	if exact {
		rt.Fatalf("%s: every Region drained, a read says %s is %s with %d refunded; the provider: %s with %d refunded (%+v)",
			c.key, got.ID, got.Status, got.AmountRefunded, want, e.Refunded, e)
	}
}

// checkReadYourWrites: once no Region the tenant's home left is pending,
// the Region serving it holds every write made for it. Its read is
// strongly consistent (docs/contract.md, "Reading a charge"). So it shows
// every capture, cancel and refund the client saw answered.
func (h *history) checkReadYourWrites(rt *rapid.T, c *intent, got readCharge) {
	if h.w.design != chosen {
		return
	}
	route, err := h.w.routes.Route(context.Background(), h.homes[c.key.Tenant()])
	if err != nil || len(route.Pending) > 0 {
		return
	}
	var refunded int64
	for _, k := range h.order {
		if rf := h.keys[k]; rf.kind == "refund" && rf.charge == c.chargeID && rf.chargeID != "" {
			var made readRefund
			_ = json.Unmarshal([]byte(rf.final.Body), &made)
			refunded += made.Amount
		}
	}
	if (c.moved != "" && got.Status != c.moved) || got.AmountRefunded < refunded {
		rt.Fatalf("%s: no Region pending, a read says %s is %s with %d refunded; its clients saw it %q with %d refunded",
			c.key, got.ID, got.Status, got.AmountRefunded, c.moved, refunded)
	}
	h.st.freshReads.Add(1)
}

// wantStatus is the status a charge reads once its row agrees with the
// provider. An expired authorization reads requires_capture: only the
// provider knows (docs/contract.md, "Expiry").
func wantStatus(e providersim.LedgerEntry) string {
	switch {
	case e.Authorized == 0 || e.Captures > 0:
		return charge.StatusSucceeded
	case e.Canceled:
		return charge.StatusCanceled
	}
	return charge.StatusRequiresCapture
}

// readRefund reads a refund its client saw made: never 404, and only
// what the provider refunded.
func (h *history) readRefund(rt *rapid.T, rf *intent) {
	resp, ok := h.send(rt, rf.key.Tenant(), func(s *stack) (events.APIGatewayV2HTTPResponse, error) {
		return s.handler.Handle(context.Background(), testkit.GetRefund(rf.key.Tenant(), rf.charge, rf.chargeID))
	})
	if !ok {
		return
	}
	h.st.reads.Add(1)
	if h.unread(rt, rf, resp, false) {
		return
	}
	var got readRefund
	if err := json.Unmarshal([]byte(resp.Body), &got); err != nil || got.ID != rf.chargeID || got.ChargeID != rf.charge {
		rt.Fatalf("%s: a read of refund %s answered %s", rf.key, rf.chargeID, resp.Body)
	}
	h.checkRefundRead(rt, rf, got, h.w.sim.Ledger())
}

// checkRefundRead: a refund read names one the provider made, for its
// amount.
func (h *history) checkRefundRead(rt *rapid.T, of *intent, got readRefund, l providersim.Ledger) {
	if p := l.Refunds[got.ProviderReference]; p.Refunds != 1 || p.Amount != got.Amount {
		rt.Fatalf("%s: a read shows refund %s of %d under %s, the provider has %+v", of.key, got.ID, got.Amount, got.ProviderReference, p)
	}
}

// unread checks an answer that is not the charge or refund itself, and
// reports whether resp is one. A read of what a client saw made is never
// 404. It may be refused for now: during a failover, or a busy store.
func (h *history) unread(rt *rapid.T, in *intent, resp events.APIGatewayV2HTTPResponse, exact bool) bool {
	switch {
	case resp.StatusCode == http.StatusOK:
		return false
	case resp.StatusCode == http.StatusNotFound:
		rt.Fatalf("%s: its client saw %s made, and a read answered 404 %s", in.key, in.chargeID, resp.Body)
	case !exact && resp.StatusCode == http.StatusServiceUnavailable &&
		slices.Contains([]string{httpapi.ProblemOutcomePending.Slug, httpapi.ProblemServiceUnavailable.Slug}, slug(resp.Body)):
		h.st.readsPending.Add(1)
		return true
	}
	rt.Fatalf("%s: a read of %s answered %d %s", in.key, in.chargeID, resp.StatusCode, resp.Body)
	return true
}

// readEverything reads every charge a client saw made, every Region
// drained: each read must be the provider's truth.
func (h *history) readEverything(rt *rapid.T) {
	for _, k := range h.order {
		if in := h.keys[k]; in.kind == "charge" && in.chargeID != "" {
			h.readCharge(rt, in, true)
		}
	}
}
