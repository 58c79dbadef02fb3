package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// nothingCharged are the problems that tell a client nothing was charged.
var nothingCharged = []string{
	httpapi.ProblemUnavailable.Slug, httpapi.ProblemServiceUnavailable.Slug, httpapi.ProblemProviderRejected.Slug,
}

// noteNothingCharged checks an answer of a request sent alone: one that
// says nothing was charged must be true now, and stay true until the
// client sends again. (Of duplicates sent at once, one may be told so
// while another charges.) service-unavailable says so of this request
// only: a command the key named before may have acted (README).
func (r *history) noteNothingCharged(rt *rapid.T, ks *keyState, resp events.APIGatewayV2HTTPResponse) {
	rt.Helper()
	if !slices.ContainsFunc(nothingCharged, func(slug string) bool { return strings.Contains(resp.Body, httpapi.ProblemBase+slug+`"`) }) {
		return
	}
	r.env.toldNothing.Add(1)
	rec, err := r.env.archive.Get(context.Background(), ks.key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return // nothing stored: no command to charge
	case err != nil:
		rt.Fatal(err)
	}
	if prev := ks.gens[rec.CreatedAt]; prev != nil && prev.Status != idem.StatusReleased &&
		strings.Contains(resp.Body, httpapi.ProblemBase+httpapi.ProblemServiceUnavailable.Slug+`"`) {
		// This request stored and charged nothing, and says only that. The
		// record is an earlier command's, which may have acted.
		return
	}
	ref := charge.ProviderReference(ks.key, rec.CreatedAt)
	if e := r.env.sim.entries()[ref]; e.made() || e.pending {
		rt.Fatalf("%s: told %d %s, but the provider has %+v for its reference", ks.key, resp.StatusCode, resp.Body, e)
	}
	ks.told = ref
}

func isFinal(status int) bool {
	return status == http.StatusCreated || status == http.StatusPaymentRequired
}

// observe checks one response against what the key's clients saw before.
func (r *history) observe(rt *rapid.T, ks *keyState, b body, resp events.APIGatewayV2HTTPResponse, err error) {
	rt.Helper()
	if err != nil {
		rt.Fatalf("%s: handler returned an error: %v", ks.key, err)
	}
	fp := b.fingerprint()
	status, replayed := resp.StatusCode, resp.Headers[httpapi.HeaderReplayed] == "true"
	switch status {
	case http.StatusCreated, http.StatusPaymentRequired, http.StatusConflict, http.StatusUnprocessableEntity,
		http.StatusServiceUnavailable, http.StatusBadGateway:
	case http.StatusInternalServerError:
		// A fault of the store is a 503: internal-error is a bug.
		if !r.faulty || slugOf(resp.Body) == httpapi.ProblemInternal.Slug {
			rt.Fatalf("%s: 500: %s", ks.key, resp.Body)
		}
		return
	default:
		rt.Fatalf("%s: unexpected %d %s", ks.key, status, resp.Body)
	}
	if strings.Contains(resp.Body, httpapi.ProblemBase+httpapi.ProblemServiceUnavailable.Slug) {
		// The store could not be asked: like a 500 before it, an answer
		// that tells nothing, and only DynamoDB faults explain it.
		if !r.faulty {
			rt.Fatalf("%s: service-unavailable without DynamoDB faults: %s", ks.key, resp.Body)
		}
		return
	}
	if r.faulty && strings.Contains(resp.Body, httpapi.ProblemBase+httpapi.ProblemOutcomePending.Slug) {
		// Under DynamoDB faults a claim's own answer may be lost, so even
		// a settled key's may be "not known yet": honest, and it tells
		// nothing; the retry replays.
		return
	}
	if status == http.StatusCreated {
		c := parseCharge(rt, resp.Body)
		if c.ID != charge.ChargeID(ks.key, c.created) || c.ProviderReference != charge.ProviderReference(ks.key, c.created) || c.Amount != b.Amount {
			rt.Fatalf("%s: 201 %s is not this tenant's charge of %d for the command created at %s", ks.key, resp.Body, b.Amount, c.created)
		}
	}
	if t := ks.terminal; t != nil {
		switch {
		case fp != t.fp && status != http.StatusUnprocessableEntity:
			rt.Fatalf("%s: a changed body after a final answer got %d %s, want 422", ks.key, status, resp.Body)
		case fp == t.fp && (status != t.status || resp.Body != t.body || !replayed):
			rt.Fatalf("%s: replay got %d %s (replayed=%t), want the first answer %d %s", ks.key, status, resp.Body, replayed, t.status, t.body)
		}
		return
	}
	if isFinal(status) {
		ks.terminal = &seen{status: status, body: resp.Body, fp: fp, req: b}
		if !replayed {
			ks.firsts++
		}
	}
	if ks.firsts > 1 {
		rt.Fatalf("%s: %d first (not replayed) final answers", ks.key, ks.firsts)
	}
}

// parsedCharge is a 201's body.
type parsedCharge struct {
	ID                string `json:"id"`
	Amount            int64  `json:"amount"`
	AmountAuthorized  int64  `json:"amount_authorized"` // only of an authorization
	ProviderReference string `json:"provider_reference"`
	CreatedAt         string `json:"created_at"`
	created           time.Time
}

func parseCharge(rt *rapid.T, body string) parsedCharge {
	rt.Helper()
	var c parsedCharge
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		rt.Fatalf("charge body %s: %v", body, err)
	}
	created, err := time.Parse("2006-01-02T15:04:05.000Z07:00", c.CreatedAt)
	if err != nil {
		rt.Fatalf("charge body %s: %v", body, err)
	}
	c.created = created
	return c
}

// allowed fails on an error that neither a DynamoDB fault nor a provider
// outage explains.
func (r *history) allowed(rt *rapid.T, err error) {
	rt.Helper()
	if err != nil && !r.faulty && !r.down {
		rt.Fatalf("error with DynamoDB and the provider healthy: %v", err)
	}
}

// chargeInvariant is what must hold of charges.
var chargeInvariant = invariant{soFar: (*history).chargedAtMostOnce, final: (*history).chargesSettled}

// checkInvariantsSoFar runs between steps: it notes the state of every key
// the step or the webhooks delivered so far touched, then checks each
// operation's invariants so far.
func (r *history) checkInvariantsSoFar(rt *rapid.T) {
	r.hooksNoted()
	r.note(rt)
	for _, inv := range r.invariants {
		if inv.soFar != nil {
			inv.soFar(r, rt)
		}
	}
}

// checkFinal checks each operation's invariants on the history's end state.
func (r *history) checkFinal(rt *rapid.T) {
	for _, inv := range r.invariants {
		if inv.final != nil {
			inv.final(r, rt)
		}
	}
}

// chargedAtMostOnce runs between steps: nothing the provider charged may
// be charged again, whatever the state of the records. It also notes when
// the provider accepted a charge that has not landed.
func (r *history) chargedAtMostOnce(rt *rapid.T) {
	if late := r.env.sim.lateSends(); len(late) > 0 {
		rt.Fatalf("references sent after the provider's dedup window less its margin: %v", late)
	}
	ledger := r.env.sim.entries()
	for _, ks := range r.keys {
		for created := range ks.gens {
			e := ledger[charge.ProviderReference(ks.key, created)]
			if e.results > 1 {
				rt.Fatalf("%s: charged %d times", ks.key, e.results)
			}
			if e.pending && r.pendingSince.IsZero() {
				r.pendingSince = r.env.clock.Now()
			}
		}
	}
}

// note reads the record of every key the step touched (without faults)
// and keeps its state as the latest seen of its command.
func (r *history) note(rt *rapid.T) {
	rt.Helper()
	for k := range r.touched {
		delete(r.touched, k)
		gens := r.gensOf(k)
		if gens == nil {
			continue // another history's key, swept by this one's sweep
		}
		rec, err := r.env.archive.Get(context.Background(), k)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			continue // absent: its last state was noted before
		case err != nil:
			rt.Fatal(err)
		}
		gens[rec.CreatedAt] = rec
	}
}

// noteAll notes the state of every key's record.
func (r *history) noteAll(rt *rapid.T) {
	for _, k := range r.commandKeys() {
		r.touched[k] = true
	}
	r.note(rt)
}

// chargesSettled checks the charges' end state. For every command (a
// key's intent, named by its record's creation):
//   - the provider charged its reference at most once;
//   - it is SUCCEEDED exactly when the provider charged or authorized it,
//     and then it has exactly one charge row, and the row, the stored 201
//     and the provider agree on the amount (the row's is what a capture
//     took); a charge captured at once reads succeeded; FAILED_PERMANENT
//     exactly when the provider declined it, or on Stripe when an
//     authorization ended before it was recorded; RELEASED (or never
//     claimed) when the provider has no charge for it; never left
//     IN_FLIGHT, unless it is parked: older than the provider's dedup
//     window, with no charge at the provider;
//
// and for the history as a whole: provider charges = charge rows =
// SUCCEEDED commands, other tenants never read a charge, and every client
// of the current intent is replayed what the first was told.
func (r *history) chargesSettled(rt *rapid.T) {
	ctx := context.Background()
	ledger := r.env.sim.entries()
	rows := map[string]row{}
	for _, tenant := range r.tenants {
		for _, w := range r.rows(rt, tenant) {
			if w.ChargeID == "" { // refunds_test.go checks refunds' rows
				rows[w.ID] = w
			}
		}
	}
	var charged, succeeded int
	for _, k := range r.sortedKeys() {
		ks := r.keys[k]
		for created, rec := range ks.gens {
			ref, id := charge.ProviderReference(k, created), charge.ChargeID(k, created)
			e := ledger[ref]
			w, hasRow := rows[id]
			if e.results > 1 || e.pending {
				rt.Fatalf("%s@%s: provider ledger %+v", k, created, e)
			}
			if e.made() {
				charged++
			}
			switch rec.Status {
			case idem.StatusSucceeded:
				succeeded++
				c := parseCharge(rt, string(rec.Response.Body))
				// captures_test.go checks an authorization's status.
				if !e.made() || !hasRow || w.Amount != e.rowAmount() || c.Amount != e.amount || c.ID != id || w.ProviderReference != ref ||
					c.AmountAuthorized == 0 && w.Status != charge.StatusSucceeded {
					rt.Fatalf("%s@%s: SUCCEEDED with %s, but the provider says %+v and the row is %+v (%t)", k, created, rec.Response.Body, e, w, hasRow)
				}
			case idem.StatusFailedPermanent:
				// An authorization that ended before the reconciler found
				// it reads as a decline on Stripe (the adapter's doc).
				ended := e.status == provider.StatusAuthorized && e.canceled && e.captures == 0
				if e.status != provider.StatusDeclined && !ended || hasRow {
					rt.Fatalf("%s@%s: FAILED_PERMANENT, but the provider says %+v and a row exists: %t", k, created, e, hasRow)
				}
				if ended {
					charged-- // counted above, and with no row
				}
			case idem.StatusReleased:
				if e.results != 0 || hasRow {
					rt.Fatalf("%s@%s: RELEASED, but the provider says %+v and a row exists: %t", k, created, e, hasRow)
				}
			case idem.StatusInFlight:
				// Parked: past the dedup window, no charge, and never a
				// request the provider refused outright, which proves
				// nothing was or will be charged.
				if r.env.dedupWindow == 0 || r.env.clock.Now().Before(created.Add(r.env.dedupWindow)) || e.results != 0 || hasRow || r.env.sim.refused(ref) {
					rt.Fatalf("%s@%s: left IN_FLIGHT after the final sweep and reconcile, the provider says %+v (refused outright: %t), a row exists: %t",
						k, created, e, r.env.sim.refused(ref), hasRow)
				}
				r.env.parked.Add(1)
			default:
				rt.Fatalf("%s@%s: left %s after the final sweep and reconcile", k, created, rec.Status)
			}
			for _, other := range r.tenants {
				if other == k.Tenant() {
					continue
				}
				if resp, _ := r.env.handler.Handle(ctx, testkit.GetCharge(other, id)); resp.StatusCode != http.StatusNotFound {
					rt.Fatalf("%s: tenant %s reads the charge with %d %s", k, other, resp.StatusCode, resp.Body)
				}
			}
		}
		if ks.told != "" && ledger[ks.told].made() {
			rt.Fatalf("%s: its client was told nothing was charged, and the provider charged %s", k, ks.told)
		}
		rec, err := r.env.reader.Get(ctx, k)
		if err != nil {
			if ks.terminal != nil || !errors.Is(err, idem.ErrNotFound) {
				rt.Fatalf("%s: no record (%v), but a client saw %+v", k, err, ks.terminal)
			}
			continue
		}
		if t := ks.terminal; t != nil {
			if rec.Response == nil || rec.Response.Status != t.status || string(rec.Response.Body) != t.body {
				rt.Fatalf("%s: stored %+v, clients saw %d %s", k, rec.Response, t.status, t.body)
			}
			resp, err := r.send(ks, t.req.spaced())
			r.observe(rt, ks, t.req, resp, err)
		}
	}
	if charged != len(rows) || len(rows) != succeeded {
		rt.Fatalf("provider charges %d, charge rows %d, SUCCEEDED commands %d", charged, len(rows), succeeded)
	}
}
