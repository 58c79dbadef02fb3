package model_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// captureActions are what a history's clients do with authorizations:
// capture and cancel them, again and at once, while answers get lost
// and holds expire.
var captureActions = []action{
	{"authorize", 1, (*history).authorize},
	{"move", 2, (*history).moveOnce},
	{"moveRetried", 1, (*history).moveRetried},
	{"moveDuplicates", 1, (*history).moveDuplicates},
	{"captureRacesCancel", 1, (*history).captureRacesCancel},
	{"moveProviderFault", 1, (*history).moveProviderFault},
	{"moveConnectionDrops", 1, (*history).moveConnectionDrops},
	{"authorizationExpires", 1, (*history).authorizationExpires},
	{"reconcileMove", 1, (*history).reconcileMove},
	{"movesSwept", 1, (*history).movesSwept},
}

// captureInvariant is what must hold of captures and cancels.
var captureInvariant = invariant{soFar: (*history).capturedAtMostOnce, final: (*history).movesSettled}

// moveStats count what captures' and cancels' clients were told, for the
// run's log.
type moveStats struct {
	captured, canceled, conflicts, pending atomic.Int64
}

// moveReq is a capture (amount 0: all, as an empty body or {}) or a
// cancel.
type moveReq struct {
	verb   string // "capture" or "cancel"
	amount int64
	body   string
}

// claim is what one answer said of a charge: the status it named, and a
// 200 capture's amount.
type claim struct {
	id, status string
	amount     int64
	answer     string
}

// authorizations are the history's charges created to capture later.
func (r *history) authorizations(rt *rapid.T) []chargeTarget {
	return slices.DeleteFunc(r.targets(rt), func(t chargeTarget) bool { return t.authorized == 0 })
}

// authorize sends a charge request that authorizes only, under a key
// with no record: it names a new intent.
func (r *history) authorize(rt *rapid.T) {
	r.requestNew(rt, func(b *body) { b.AuthorizeOnly = true })
}

// moveTarget draws an authorization, authorizing one first if the
// history has none.
func (r *history) moveTarget(rt *rapid.T) (chargeTarget, bool) {
	ts := r.authorizations(rt)
	if len(ts) == 0 {
		r.authorize(rt)
		r.note(rt)
		ts = r.authorizations(rt)
	}
	if len(ts) == 0 {
		return chargeTarget{}, false
	}
	return rapid.SampledFrom(ts).Draw(rt, "authorization"), true
}

// drawMove draws a capture of all, in part or above the authorization,
// or a cancel.
func drawMove(rt *rapid.T, t chargeTarget, verb string) moveReq {
	if verb == "" {
		verb = rapid.SampledFrom([]string{"capture", "capture", "cancel"}).Draw(rt, "verb")
	}
	if verb == "cancel" {
		return moveReq{verb: verb}
	}
	q := moveReq{verb: verb, amount: rapid.SampledFrom([]int64{0, 0, t.authorized, max(t.authorized/2, 1), t.authorized + 1}).Draw(rt, "captureAmount")}
	switch {
	case q.amount != 0:
		q.body = `{"amount":` + strconv.FormatInt(q.amount, 10) + `}`
	case rapid.Bool().Draw(rt, "emptyObject"):
		q.body = "{}"
	}
	return q
}

func (r *history) sendMove(t chargeTarget, q moveReq) (events.APIGatewayV2HTTPResponse, error) {
	r.moved = true
	return r.env.handler.Handle(context.Background(), postMove(t.tenant, t.id, q.verb, q.body))
}

// postMove is POST /charges/{id}/capture or /cancel, with body if any.
func postMove(tenant, id, verb, body string) events.APIGatewayV2HTTPRequest {
	req := testkit.PostCharge(tenant, "", body)
	req.RouteKey = map[string]string{"capture": httpapi.RouteCapture, "cancel": httpapi.RouteCancel}[verb]
	req.RawPath = "/charges/" + id + "/" + verb
	req.PathParameters = map[string]string{"id": id}
	req.RequestContext.HTTP.Path = req.RawPath
	if body == "" {
		req.Headers = map[string]string{}
	}
	return req
}

// moveOnce sends one capture or cancel of a drawn authorization.
func (r *history) moveOnce(rt *rapid.T) {
	if t, ok := r.moveTarget(rt); ok {
		q := drawMove(rt, t, "")
		resp, err := r.sendMove(t, q)
		r.observeMove(rt, t, q, resp, err, true)
	}
}

// moveRetried sends one capture or cancel two or three times in a row.
func (r *history) moveRetried(rt *rapid.T) {
	t, ok := r.moveTarget(rt)
	if !ok {
		return
	}
	q := drawMove(rt, t, "")
	for range rapid.IntRange(2, 3).Draw(rt, "retries") {
		resp, err := r.sendMove(t, q)
		r.observeMove(rt, t, q, resp, err, true)
	}
}

// moveDuplicates sends one capture or cancel 2 to 4 times at once.
func (r *history) moveDuplicates(rt *rapid.T) {
	if t, ok := r.moveTarget(rt); ok {
		q := drawMove(rt, t, "")
		r.movesAtOnce(rt, t, slices.Repeat([]moveReq{q}, rapid.IntRange(2, 4).Draw(rt, "duplicates")))
	}
}

// captureRacesCancel sends a capture and a cancel of one authorization
// at once, sometimes each twice.
func (r *history) captureRacesCancel(rt *rapid.T) {
	t, ok := r.moveTarget(rt)
	if !ok {
		return
	}
	qs := []moveReq{drawMove(rt, t, "capture"), drawMove(rt, t, "cancel")}
	if rapid.Bool().Draw(rt, "twice") {
		qs = append(qs, qs...)
	}
	r.movesAtOnce(rt, t, qs)
}

func (r *history) movesAtOnce(rt *rapid.T, t chargeTarget, qs []moveReq) {
	resps, errs := make([]events.APIGatewayV2HTTPResponse, len(qs)), make([]error, len(qs))
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i, q := range qs {
		wg.Go(func() {
			<-release
			resps[i], errs[i] = r.sendMove(t, q)
		})
	}
	close(release)
	wg.Wait()
	for i, q := range qs {
		r.observeMove(rt, t, q, resps[i], errs[i], false)
	}
}

// moveProviderFault is a capture or cancel whose provider call fails as
// providersim's Sim-Fault says: unavailable (nothing done), timeout (done,
// the answer lost) or slow.
func (r *history) moveProviderFault(rt *rapid.T) {
	t, ok := r.moveTarget(rt)
	if !ok {
		return
	}
	q := drawMove(rt, t, "")
	r.withSimFault(rt, "/"+q.verb, func() {
		resp, err := r.sendMove(t, q)
		r.observeMove(rt, t, q, resp, err, true)
	})
}

// moveConnectionDrops is a capture or cancel whose connection to the
// provider drops after the provider made it.
func (r *history) moveConnectionDrops(rt *rapid.T) {
	t, ok := r.moveTarget(rt)
	if !ok {
		return
	}
	q := drawMove(rt, t, "")
	r.dropping(rt, func() {
		resp, err := r.sendMove(t, q)
		r.observeMove(rt, t, q, resp, err, true)
	})
}

// authorizationExpires ends a hold at the provider, authorizing one first
// if the history has none. The simulator ends one at once. In Stripe mode
// the clock passes Stripe's seven days, and every settled command's
// retention with them: Stripe's payment_intent.canceled settles the row.
func (r *history) authorizationExpires(rt *rapid.T) {
	t, ok := r.moveTarget(rt)
	sim, isSim := r.env.sim.(simBackend)
	if !isSim {
		r.advance(rt, stripesim.AuthorizationWindow)
		r.retentionPassed(rt, true)
		return
	}
	if ok && sim.Expire(sim.entries()[t.reference].id) {
		r.expired[t.id] = true
	}
}

// moveKeys are the reconciler's keys of the history's authorizations:
// tenant#settle-charge#<id>.
func (r *history) moveKeys(rt *rapid.T) []idem.Key {
	var keys []idem.Key
	for _, t := range r.authorizations(rt) {
		k, err := idem.NewKey(t.tenant, charge.TransitionOperation, t.id)
		if err != nil {
			rt.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// reconcileMove delivers a reconcile message for one authorization's
// move, possibly duplicated and concurrently.
func (r *history) reconcileMove(rt *rapid.T) {
	if keys := r.moveKeys(rt); len(keys) > 0 {
		r.deliver(rt, rapid.SampledFrom(keys).Draw(rt, "moveKey"), rapid.IntRange(1, 3).Draw(rt, "deliveries"))
	}
}

// movesSwept moves the clock past a move's attempt deadline, and maybe
// past the provider's settle window, then sweeps.
func (r *history) movesSwept(rt *rapid.T) {
	if rapid.Bool().Draw(rt, "pastSettleWindow") {
		r.advance(rt, leaseExpiry+r.env.settleWindow)
	} else {
		r.advance(rt, leaseExpiry)
	}
	r.forgetExpired(rt)
	r.sweep(rt)
}

// chargeStatusOf is the status an answer names: a charge's, or a 409's
// charge_status.
func chargeStatusOf(body string) string {
	var c struct {
		Status       any
		ChargeStatus string `json:"charge_status"`
	}
	_ = json.Unmarshal([]byte(body), &c)
	if s, ok := c.Status.(string); ok {
		return s
	}
	return c.ChargeStatus
}

// observeMove checks one answer to q on t, and notes what it claims for
// the end. alone: no other request for t ran at once, so an answer that
// says nothing was done must be true now.
func (r *history) observeMove(rt *rapid.T, t chargeTarget, q moveReq, resp events.APIGatewayV2HTTPResponse, err error, alone bool) {
	rt.Helper()
	if err != nil {
		rt.Fatalf("%s %s: handler returned an error: %v", q.verb, t.id, err)
	}
	status, slug := resp.StatusCode, slugOf(resp.Body)
	what := func() string {
		return q.verb + " " + q.body + " of " + t.id + ": " + strconv.Itoa(status) + " " + resp.Body
	}
	switch {
	case status == http.StatusOK:
		var c parsedCharge
		st := chargeStatusOf(resp.Body)
		if json.Unmarshal([]byte(resp.Body), &c) != nil || c.ID != t.id || st != map[string]string{"capture": charge.StatusSucceeded, "cancel": charge.StatusCanceled}[q.verb] ||
			q.verb == "capture" && (c.Amount < 1 || c.Amount > t.authorized || q.amount != 0 && c.Amount != q.amount) {
			rt.Fatalf("%s: not this request's answer", what())
		}
		r.claims = append(r.claims, claim{id: t.id, status: st, amount: c.Amount, answer: what()})
		map[string]*atomic.Int64{"capture": &r.env.moveStats.captured, "cancel": &r.env.moveStats.canceled}[q.verb].Add(1)
	case slug == httpapi.ProblemStateConflict.Slug:
		r.env.moveStats.conflicts.Add(1)
		// A move conflicts only with a settled state, which it names.
		st := chargeStatusOf(resp.Body)
		if st != charge.StatusSucceeded && st != charge.StatusCanceled {
			rt.Fatalf("%s: a conflict with a state that is not settled", what())
		}
		r.claims = append(r.claims, claim{id: t.id, status: st, answer: what()})
		// The state this request sets, with the same amount or none, is
		// a 200: a 409 naming it needs another amount.
		if st == charge.StatusCanceled && q.verb == "cancel" || st == charge.StatusSucceeded && q.verb == "capture" && q.amount == 0 {
			rt.Fatalf("%s: a repeat of a settled move is a conflict", what())
		}
	case slug == httpapi.ProblemInvalidRequest.Slug:
		if q.amount <= t.authorized {
			rt.Fatalf("%s: refused, but within the authorization of %d", what(), t.authorized)
		}
	case slug == httpapi.ProblemInProgress.Slug:
		if resp.Headers[httpapi.HeaderRetryAfter] == "" {
			rt.Fatalf("%s: in progress without Retry-After", what())
		}
	case slug == httpapi.ProblemOutcomePending.Slug:
		r.env.moveStats.pending.Add(1)
		if strings.Contains(resp.Body, "Nothing was") {
			rt.Fatalf("%s: outcome-pending claims something", what())
		}
	case slug == httpapi.ProblemUnavailable.Slug:
		// A cancel is not checked: the ledger does not tell it from an
		// expiry.
		if e := r.env.sim.entries()[t.reference]; alone && q.verb == "capture" && e.captures > 0 {
			rt.Fatalf("%s: told nothing was captured, but the provider has %+v", what(), e)
		}
	case slug == httpapi.ProblemServiceUnavailable.Slug:
		if !r.faulty {
			rt.Fatalf("%s: without DynamoDB faults", what())
		}
	default:
		// Not found, rejected or a key's problems: the model captures
		// and cancels only its own authorizations, within their amount.
		rt.Fatalf("%s: unexpected", what())
	}
}

// capturedAtMostOnce runs between steps of a history that sent a move:
// the provider never captures an authorization twice, nor beyond what it
// held, and never both captures and cancels one.
func (r *history) capturedAtMostOnce(rt *rapid.T) {
	if !r.moved {
		return
	}
	ledger := r.env.sim.entries()
	for _, t := range r.authorizations(rt) {
		if e := ledger[t.reference]; e.captures > 1 || e.captured > t.authorized || e.captures > 0 && e.canceled {
			rt.Fatalf("%s of %d: the provider has %+v", t.id, t.authorized, e)
		}
	}
}

// movesSettled checks every authorization once the history has settled,
// against the provider's ledger: at most one capture, within what it
// held, and never both captured and canceled. The charge reads what the
// provider holds, never capturing or canceling: succeeded with the amount
// captured, canceled, or requires_capture with the amount held. Only
// without webhooks may a hold the simulator expired untouched still read
// requires_capture. Every 200 and every 409 that named a settled state
// agrees with it.
func (r *history) movesSettled(rt *rapid.T) {
	ledger := r.env.sim.entries()
	for _, t := range r.authorizations(rt) {
		e := ledger[t.reference]
		want, amount := charge.StatusRequiresCapture, t.authorized
		switch {
		case e.captures > 1 || e.captured > t.authorized || e.captures > 0 && e.canceled:
			rt.Fatalf("%s of %d: the provider has %+v", t.id, t.authorized, e)
		case e.captures == 1:
			want, amount = charge.StatusSucceeded, e.captured
		case e.canceled:
			want = charge.StatusCanceled
		}
		resp, err := r.env.handler.Handle(context.Background(), testkit.GetCharge(t.tenant, t.id))
		var c parsedCharge
		read := chargeStatusOf(resp.Body)
		// The simulator sends no webhooks: a hold it expired untouched is
		// news to the service until a capture or cancel asks.
		untold := r.env.hooks == nil && want == charge.StatusCanceled && read == charge.StatusRequiresCapture && r.expired[t.id]
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &c) != nil ||
			read != want && !untold || c.Amount != amount && want != charge.StatusCanceled {
			rt.Fatalf("%s reads %d %s (%v); the provider has %+v: want %s of %d", t.id, resp.StatusCode, resp.Body, err, e, want, amount)
		}
		for _, cl := range r.claims {
			if cl.id == t.id && (cl.status != want || cl.amount != 0 && cl.amount != amount) {
				rt.Fatalf("%s was answered %s; it ended %s of %d at the provider (%+v)", t.id, cl.answer, want, amount, e)
			}
		}
	}
}
