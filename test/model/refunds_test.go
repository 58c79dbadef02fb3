package model_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// refundActions are what a history's clients do with refunds of its
// charges, and the faults that strike them.
var refundActions = []action{
	{"refund", 2, (*history).refund},
	{"refundRetried", 1, (*history).refundRetried},
	{"refundDuplicates", 1, (*history).refundDuplicates},
	{"refundsRace", 1, (*history).refundsRace},
	{"refundRefused", 1, (*history).refundRefused},
	{"refundProviderFault", 1, (*history).refundProviderFault},
	{"refundConnectionDrops", 1, (*history).refundConnectionDrops},
	{"refundRecordLost", 1, (*history).refundRecordLost},
	{"refundCrashAfterClaim", 1, (*history).refundCrashAfterClaim},
	{"reconcileRefund", 1, (*history).reconcileRefund},
	{"refundsSwept", 1, (*history).refundsSwept},
}

// refundInvariant is what must hold of refunds.
var refundInvariant = invariant{soFar: (*history).refundedAtMostOnce, final: (*history).refundsSettled}

// refundStats count what refunds' clients were told, and the refunds
// that ended failed, for the run's log.
type refundStats struct {
	made, toldNothing, pending, failed atomic.Int64
}

// refundBook is what a history's refund clients saw.
type refundBook struct {
	keys map[idem.Key]*refundState
	// made are the refunds answered 201, by id: each must be readable at
	// the end, as it was answered.
	made map[string]madeRefund
	// refused counts the requests sent under a fresh key to be refused.
	refused int
}

type madeRefund struct{ tenant, charge, body string }

func newRefundBook() *refundBook {
	return &refundBook{keys: map[idem.Key]*refundState{}, made: map[string]madeRefund{}}
}

// refundState is what the clients of one refund key have seen, and every
// command the key has named.
type refundState struct {
	key    idem.Key
	target chargeTarget // the charge the current intent refunds
	req    refundReq    // the current intent's request
	// terminal is the first final answer of the current intent: a 201 or
	// a stored 409. firsts counts those that were not replays.
	terminal *seenRefund
	firsts   int
	gens     map[time.Time]*idem.Record
	// told is the reference of the command whose client was last told
	// nothing was refunded, until the client sends again: the provider
	// must never refund it.
	told string
}

type seenRefund struct {
	status int
	body   string
	req    refundReq
}

// refundReq is a refund request; amount 0 asks for all that remains.
type refundReq struct {
	amount int64
	reason string
}

// body writes the request as a client would: compact, or spaced with its
// fields reversed. All that remains, without a reason, is {} or empty.
func (q refundReq) body(spaced bool) string {
	sep := ":"
	if spaced {
		sep = " : "
	}
	var fields []string
	if q.amount != 0 {
		fields = append(fields, `"amount"`+sep+strconv.FormatInt(q.amount, 10))
	}
	if q.reason != "" {
		fields = append(fields, `"reason"`+sep+`"`+q.reason+`"`)
	}
	if !spaced {
		return "{" + strings.Join(fields, ",") + "}"
	}
	if len(fields) == 0 {
		return ""
	}
	slices.Reverse(fields)
	return "{\n  " + strings.Join(fields, ",\n  ") + "\n}\n"
}

// chargeTarget is a charge of the history a refund, a capture or a
// cancel may name. authorized is what an authorization held (zero for a
// charge captured at once); amount is what the charge took: for an
// authorization, what its capture took, zero until one did. source is
// its card, where the intent keeps it.
type chargeTarget struct {
	tenant, id, reference, source string
	amount, authorized            int64
}

var refundClientKeys = []string{"refund-1", "refund-2", "refund-3", "refund-4"} // per tenant

// targets are the history's charges that succeeded, authorizations
// included, in a fixed order.
func (r *history) targets(rt *rapid.T) []chargeTarget {
	var out []chargeTarget
	var ledger map[string]entry // read once, if there is an authorization
	for _, k := range r.sortedKeys() {
		gens := r.keys[k].gens
		for _, created := range slices.SortedFunc(maps.Keys(gens), time.Time.Compare) {
			rec := gens[created]
			if rec.Status != idem.StatusSucceeded {
				continue
			}
			c := parseCharge(rt, string(rec.Response.Body))
			var in struct{ Source string }
			if err := json.Unmarshal(rec.Intent, &in); err != nil {
				rt.Fatalf("%s@%s: intent %s: %v", k, created, rec.Intent, err)
			}
			t := chargeTarget{
				tenant: k.Tenant(), id: charge.ChargeID(k, created), reference: charge.ProviderReference(k, created), source: in.Source,
				amount: c.Amount, authorized: c.AmountAuthorized,
			}
			if t.authorized > 0 {
				if ledger == nil {
					ledger = r.env.sim.entries()
				}
				t.amount = ledger[t.reference].captured
			}
			out = append(out, t)
		}
	}
	return out
}

// refundTarget draws a charge to refund. A history without one first
// sends a charge request.
func (r *history) refundTarget(rt *rapid.T) (chargeTarget, bool) {
	ts := r.targets(rt)
	if len(ts) == 0 {
		r.request(rt)
		r.note(rt)
		ts = r.targets(rt)
	}
	if len(ts) == 0 {
		return chargeTarget{}, false
	}
	return rapid.SampledFrom(ts).Draw(rt, "charge"), true
}

// pickRefund draws a refund key of a charge's tenant, or nil if the
// history has no charge to refund.
func (r *history) pickRefund(rt *rapid.T) *refundState {
	t, ok := r.refundTarget(rt)
	if !ok {
		return nil
	}
	return r.refundKey(rt, t, rapid.SampledFrom(refundClientKeys).Draw(rt, "refundKey"))
}

// refundKey is the state of t's tenant's refund key client. A key without
// a record names a new intent: a refund of t.
func (r *history) refundKey(rt *rapid.T, t chargeTarget, client string) *refundState {
	key, err := idem.NewKey(t.tenant, charge.RefundOperation, client)
	if err != nil {
		rt.Fatal(err)
	}
	rs := r.refunds.keys[key]
	if rs == nil {
		rs = &refundState{key: key, gens: map[time.Time]*idem.Record{}}
		r.refunds.keys[key] = rs
	}
	switch _, err := r.env.reader.Get(context.Background(), key); {
	case err == nil:
		return rs
	case !errors.Is(err, idem.ErrNotFound):
		rt.Fatal(err)
	}
	rs.target, rs.terminal, rs.firsts = t, nil, 0
	rs.req = refundReq{
		amount: rapid.SampledFrom([]int64{0, max(t.amount/4, 1), max(t.amount/2, 1), t.amount, t.amount + 1}).Draw(rt, "refundAmount"),
		reason: rapid.SampledFrom([]string{"", "requested_by_customer"}).Draw(rt, "reason"),
	}
	return rs
}

// variant draws the request a client sends: usually its key's own, in
// either layout, sometimes with a changed amount.
func (rs *refundState) variant(rt *rapid.T) (refundReq, string) {
	q := rs.req
	if rapid.IntRange(0, 4).Draw(rt, "changedRefund") == 0 {
		q.amount++
	}
	return q, q.body(rapid.Bool().Draw(rt, "spaced"))
}

func (r *history) sendRefund(rs *refundState, payload string) (events.APIGatewayV2HTTPResponse, error) {
	rs.told = ""
	r.touched[rs.key] = true
	return r.env.handler.Handle(context.Background(), testkit.PostRefund(rs.key.Tenant(), rs.key.ClientKey(), rs.target.id, payload))
}

// refundOnce sends one request under rs's key and checks its answer.
func (r *history) refundOnce(rt *rapid.T, rs *refundState) {
	q, payload := rs.variant(rt)
	resp, err := r.sendRefund(rs, payload)
	r.observeRefund(rt, rs, q, resp, err, true)
}

func (r *history) refund(rt *rapid.T) {
	if rs := r.pickRefund(rt); rs != nil {
		r.refundOnce(rt, rs)
	}
}

// refundRetried sends one key's refund two or three times in a row, as
// a client retrying after each answer.
func (r *history) refundRetried(rt *rapid.T) {
	rs := r.pickRefund(rt)
	if rs == nil {
		return
	}
	for range rapid.IntRange(2, 3).Draw(rt, "retries") {
		r.refundOnce(rt, rs)
	}
}

// refundDuplicates sends one key's refund 2 to 4 times at once.
func (r *history) refundDuplicates(rt *rapid.T) {
	rs := r.pickRefund(rt)
	if rs == nil {
		return
	}
	q, _ := rs.variant(rt)
	sends := make([]refundSend, rapid.IntRange(2, 4).Draw(rt, "duplicates"))
	for i := range sends {
		sends[i] = refundSend{rs, q.body(rapid.Bool().Draw(rt, "spaced"))}
	}
	resps, err := r.sendRefunds(sends)
	// As for charges: the first final answer came before its replays, and
	// an answer that is not final is judged by what was known before.
	slices.SortStableFunc(resps, func(a, b events.APIGatewayV2HTTPResponse) int {
		return cmp.Compare(a.Headers[httpapi.HeaderReplayed], b.Headers[httpapi.HeaderReplayed])
	})
	before := rs.terminal
	for _, resp := range resps {
		if finalRefund(resp) {
			r.observeRefund(rt, rs, q, resp, err, false)
			continue
		}
		after := rs.terminal
		rs.terminal = before
		r.observeRefund(rt, rs, q, resp, err, false)
		rs.terminal = after
	}
}

// refundsRace sends refunds of one charge under 2 to 4 distinct keys at
// once, as two clerks refunding one order would: together they may ask
// for more than the charge.
func (r *history) refundsRace(rt *rapid.T) {
	t, ok := r.refundTarget(rt)
	if !ok {
		return
	}
	var sends []refundSend
	for _, client := range refundClientKeys {
		if rs := r.refundKey(rt, t, client); rs.target.id == t.id {
			sends = append(sends, refundSend{rs, rs.req.body(false)})
		}
	}
	sends = sends[:min(rapid.IntRange(2, len(refundClientKeys)).Draw(rt, "racing"), len(sends))]
	resps, err := r.sendRefunds(sends)
	for i, resp := range resps {
		r.observeRefund(rt, sends[i].rs, sends[i].rs.req, resp, err, true)
	}
}

type refundSend struct {
	rs      *refundState
	payload string
}

// sendRefunds sends every request at once.
func (r *history) sendRefunds(sends []refundSend) ([]events.APIGatewayV2HTTPResponse, error) {
	resps := make([]events.APIGatewayV2HTTPResponse, len(sends))
	errs := make([]error, len(sends))
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i, s := range sends {
		s.rs.told = ""
		r.touched[s.rs.key] = true
		wg.Go(func() {
			<-release
			resps[i], errs[i] = r.env.handler.Handle(context.Background(), testkit.PostRefund(s.rs.key.Tenant(), s.rs.key.ClientKey(), s.rs.target.id, s.payload))
		})
	}
	close(release)
	wg.Wait()
	return resps, errors.Join(errs...)
}

// refundRefused sends, under a fresh key, a refund of another tenant's
// charge, of an unknown or malformed charge id, or with a bad body. It is
// refused (404 or 400), nothing is stored, and the provider refunds
// nothing.
func (r *history) refundRefused(rt *rapid.T) {
	tenant := rapid.SampledFrom(r.tenants).Draw(rt, "tenant")
	r.refunds.refused++
	key, err := idem.NewKey(tenant, charge.RefundOperation, fmt.Sprintf("refused-%d", r.refunds.refused))
	if err != nil {
		rt.Fatal(err)
	}
	var own, foreign []chargeTarget
	for _, t := range r.targets(rt) {
		if t.tenant == tenant {
			own = append(own, t)
		} else {
			foreign = append(foreign, t)
		}
	}
	id, body, want := charge.ChargeID(key, r.env.clock.Now()), "", http.StatusNotFound // unknown
	var target *chargeTarget
	switch kind := rapid.SampledFrom([]string{"foreign", "unknown", "malformed", "badBody"}).Draw(rt, "refused"); {
	case kind == "foreign" && len(foreign) > 0:
		t := rapid.SampledFrom(foreign).Draw(rt, "charge")
		id, target = t.id, &t
	case kind == "malformed":
		id = "ch_x"
	case kind == "badBody" && len(own) > 0:
		t := rapid.SampledFrom(own).Draw(rt, "charge")
		id, target, want = t.id, &t, http.StatusBadRequest
		body = rapid.SampledFrom([]string{`{"amount":0}`, `{"amount":-5}`, `{"amount":1.5}`, `{"amount":"5"}`,
			`{"reason":"because"}`, `{"amount":5,"extra":1}`, `[]`, `null`, `{"amount":null}`}).Draw(rt, "badBody")
	}
	var before int64
	if target != nil {
		before = r.env.sim.entries()[target.reference].refunded
	}
	resp, err := r.env.handler.Handle(context.Background(), testkit.PostRefund(tenant, key.ClientKey(), id, body))
	switch {
	case err != nil:
		rt.Fatalf("%s: handler returned an error: %v", key, err)
	case resp.StatusCode == want:
		r.env.refundStats.toldNothing.Add(1)
	case r.faulty && want == http.StatusNotFound && slugOf(resp.Body) == httpapi.ProblemServiceUnavailable.Slug:
	default:
		rt.Fatalf("%s: a refund of %s with %q got %d %s, want %d", key, id, body, resp.StatusCode, resp.Body, want)
	}
	if _, err := r.env.reader.Get(context.Background(), key); !errors.Is(err, idem.ErrNotFound) {
		rt.Fatalf("%s: a refused refund (%d) left a record: %v", key, resp.StatusCode, err)
	}
	if target != nil {
		if after := r.env.sim.entries()[target.reference].refunded; after != before {
			rt.Fatalf("%s: a refused refund (%d) of %s: the provider's refunds of it went from %d to %d", key, resp.StatusCode, id, before, after)
		}
	}
}

// refundProviderFault is a refund whose provider call fails as
// providersim's Sim-Fault says: unavailable (nothing done), timeout
// (refunded, the connection closed unanswered) or slow.
func (r *history) refundProviderFault(rt *rapid.T) {
	if rs := r.pickRefund(rt); rs != nil {
		r.withSimFault(rt, "/v1/refunds", func() { r.refundOnce(rt, rs) })
	}
}

// refundConnectionDrops is a refund whose connection to the provider
// drops after the provider made it, and whose re-send fails to dial.
func (r *history) refundConnectionDrops(rt *rapid.T) {
	rs := r.pickRefund(rt)
	if rs != nil {
		r.dropping(rt, func() { r.refundOnce(rt, rs) })
	}
}

// refundRecordLost is a refund whose function dies between the
// provider's answer and its record: DynamoDB refuses every transaction,
// the refund's among them.
func (r *history) refundRecordLost(rt *rapid.T) {
	rs := r.pickRefund(rt)
	if rs == nil {
		return
	}
	faulty := r.faulty
	r.faulty = true
	r.env.faults.transactions.Store(true)
	defer func() {
		r.env.faults.transactions.Store(false)
		r.faulty = faulty
	}()
	r.refundOnce(rt, rs)
}

// refundCrashAfterClaim is a refund function that dies right after its
// claim, before it holds the amount. Its lease may come back late.
func (r *history) refundCrashAfterClaim(rt *rapid.T) {
	rs := r.pickRefund(rt)
	if rs == nil {
		return
	}
	q, payload := rs.variant(rt)
	_, fp, err := charge.ParseRefundBody(rs.target.id, []byte(payload))
	if err != nil {
		rt.Fatalf("%s: %q: %v", rs.key, payload, err)
	}
	rows := r.rows(rt, rs.key.Tenant())
	i := slices.IndexFunc(rows, func(w row) bool { return w.ID == rs.target.id })
	if i < 0 {
		rt.Fatalf("%s: no row for the charge %s", rs.key, rs.target.id)
	}
	c := rows[i]
	if q.amount == 0 {
		q.amount = max(c.Amount-c.Claimed, 0)
	}
	// As the refund function keeps it.
	intent, _ := json.Marshal(struct {
		Charge         string `json:"charge"`
		ProviderCharge string `json:"provider_charge"`
		Amount         int64  `json:"amount"`
		Currency       string `json:"currency"`
		Reason         string `json:"reason,omitempty"`
	}{rs.target.id, c.ProviderChargeID, q.amount, c.Currency, q.reason})
	rs.told = "" // a request, if one that crashes
	r.touched[rs.key] = true
	begun, err := r.env.store.Begin(context.Background(), rs.key, fp, intent)
	if err == nil && begun.Lease != nil {
		r.zombies = append(r.zombies, begun.Lease)
	}
}

// reconcileRefund delivers a reconcile message for one refund key,
// possibly duplicated and concurrently.
func (r *history) reconcileRefund(rt *rapid.T) {
	keys := sorted(maps.Keys(r.refunds.keys))
	if len(keys) == 0 {
		return
	}
	r.deliver(rt, rapid.SampledFrom(keys).Draw(rt, "refundKey"), rapid.IntRange(1, 3).Draw(rt, "deliveries"))
}

// refundsSwept moves the clock past a lease and the provider's settle
// window, then sweeps: what a lost refund answer left in flight is
// resolved.
func (r *history) refundsSwept(rt *rapid.T) {
	r.advance(rt, leaseExpiry+r.env.settleWindow)
	r.forgetExpired(rt)
	r.sweep(rt)
}

// nothingRefunded are the problems that tell a client nothing was
// refunded.
var nothingRefunded = []string{
	httpapi.ProblemUnavailable.Slug, httpapi.ProblemProviderRejected.Slug, httpapi.ProblemRefundExceeds.Slug,
	httpapi.ProblemRefundDeclined.Slug,
}

// slugOf is the problem type of an answer's body, or "".
func slugOf(body string) string {
	var p struct{ Type string }
	if json.Unmarshal([]byte(body), &p) != nil || !strings.HasPrefix(p.Type, httpapi.ProblemBase) {
		return ""
	}
	return strings.TrimPrefix(p.Type, httpapi.ProblemBase)
}

// finalRefund reports whether an answer is stored for its key: a 201,
// a 409 refund-exceeds-charge without Retry-After, or a refund-declined.
func finalRefund(resp events.APIGatewayV2HTTPResponse) bool {
	slug := slugOf(resp.Body)
	return resp.StatusCode == http.StatusCreated || slug == httpapi.ProblemRefundDeclined.Slug ||
		resp.StatusCode == http.StatusConflict && slug == httpapi.ProblemRefundExceeds.Slug && resp.Headers[httpapi.HeaderRetryAfter] == ""
}

// observeRefund checks one answer to the request q under rs's key
// against what its clients saw before. alone: the request was the only
// one under its key, so an answer that says nothing was refunded must be
// true now, and stay true until the client sends again.
func (r *history) observeRefund(rt *rapid.T, rs *refundState, q refundReq, resp events.APIGatewayV2HTTPResponse, err error, alone bool) {
	rt.Helper()
	if err != nil {
		rt.Fatalf("%s: handler returned an error: %v", rs.key, err)
	}
	status, slug, replayed := resp.StatusCode, slugOf(resp.Body), resp.Headers[httpapi.HeaderReplayed] == "true"
	switch {
	case status == http.StatusCreated,
		status == http.StatusConflict && (slug == httpapi.ProblemRefundExceeds.Slug || slug == httpapi.ProblemInProgress.Slug),
		// Only a captured charge is refunded.
		slug == httpapi.ProblemStateConflict.Slug && rs.target.authorized > 0 && chargeStatusOf(resp.Body) != charge.StatusSucceeded,
		status == http.StatusUnprocessableEntity && slug == httpapi.ProblemKeyReused.Slug,
		status == http.StatusServiceUnavailable && (slug == httpapi.ProblemUnavailable.Slug || slug == httpapi.ProblemOutcomePending.Slug),
		// Stripe made the refund, and its card's issuer returned it.
		slug == httpapi.ProblemRefundDeclined.Slug && r.failedAtProvider(rt, rs):
	case slug == httpapi.ProblemServiceUnavailable.Slug:
		// Only DynamoDB faults explain it, and it tells nothing.
		if !r.faulty {
			rt.Fatalf("%s: %d without DynamoDB faults: %s", rs.key, status, resp.Body)
		}
		return
	case slug == httpapi.ProblemProviderRejected.Slug:
		// The model refunds only charges that succeeded, in their
		// currency: the provider refuses only more than the charge has
		// left, which the hold never lets the service ask.
		rt.Fatalf("%s: the provider refused the refund of %+v on %s: %d %s", rs.key, q, rs.target.id, status, resp.Body)
	default:
		rt.Fatalf("%s: refund of %+v on %s: unexpected %d %s", rs.key, q, rs.target.id, status, resp.Body)
	}
	if slug == httpapi.ProblemOutcomePending.Slug {
		r.env.refundStats.pending.Add(1)
		if strings.Contains(resp.Body, "Nothing was") {
			rt.Fatalf("%s: outcome-pending claims something: %s", rs.key, resp.Body)
		}
		if r.faulty {
			return // a settled key's claim may lose its answer too
		}
	}
	if status == http.StatusCreated {
		rf, most := parseRefund(rt, resp.Body), rs.target.amount
		if rs.target.authorized > 0 {
			most = r.env.sim.entries()[rs.target.reference].captured // 0 uncaptured
		}
		if rf.ID != charge.RefundID(rs.key, rf.created) || rf.ChargeID != rs.target.id || rf.ProviderReference != charge.RefundReference(rs.key, rf.created) ||
			rf.Amount < 1 || rf.Amount > most || q.amount != 0 && rf.Amount != q.amount {
			rt.Fatalf("%s: 201 %s is not this key's refund of %+v on %+v (captured: %d)", rs.key, resp.Body, q, rs.target, most)
		}
		if _, seen := r.refunds.made[rf.ID]; !seen {
			r.env.refundStats.made.Add(1)
			r.refunds.made[rf.ID] = madeRefund{tenant: rs.key.Tenant(), charge: rf.ChargeID, body: resp.Body}
		}
	}
	if alone && slices.Contains(nothingRefunded, slug) {
		r.toldNothingRefunded(rt, rs, resp)
	}
	if t := rs.terminal; t != nil {
		switch {
		case q != t.req && status != http.StatusUnprocessableEntity:
			rt.Fatalf("%s: a changed request %+v after a final answer got %d %s, want 422", rs.key, q, status, resp.Body)
		case q == t.req && (status != t.status || resp.Body != t.body || !replayed):
			rt.Fatalf("%s: replay got %d %s (replayed=%t), want the first answer %d %s", rs.key, status, resp.Body, replayed, t.status, t.body)
		}
		return
	}
	if finalRefund(resp) {
		rs.terminal = &seenRefund{status: status, body: resp.Body, req: q}
		if !replayed {
			rs.firsts++
		}
	}
	if rs.firsts > 1 {
		rt.Fatalf("%s: %d first (not replayed) final answers", rs.key, rs.firsts)
	}
}

// toldNothingRefunded checks an answer that says nothing was refunded:
// the provider has no refund under the command's reference, and must
// never make one until the client sends again.
func (r *history) toldNothingRefunded(rt *rapid.T, rs *refundState, resp events.APIGatewayV2HTTPResponse) {
	rt.Helper()
	r.env.refundStats.toldNothing.Add(1)
	rec, err := r.env.archive.Get(context.Background(), rs.key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return // nothing stored: no command to refund
	case err != nil:
		rt.Fatal(err)
	}
	ref := charge.RefundReference(rs.key, rec.CreatedAt)
	if c := r.env.sim.refunds([]string{ref})[ref]; c.kept() {
		rt.Fatalf("%s: told %d %s, but the provider made %+v refunds under its reference", rs.key, resp.StatusCode, resp.Body, c)
	}
	rs.told = ref
}

// failedAtProvider reports whether the provider made the refund of rs's
// current command, and it failed since.
func (r *history) failedAtProvider(rt *rapid.T, rs *refundState) bool {
	rec, err := r.env.archive.Get(context.Background(), rs.key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return false
	case err != nil:
		rt.Fatal(err)
	}
	ref := charge.RefundReference(rs.key, rec.CreatedAt)
	c := r.env.sim.refunds([]string{ref})[ref]
	return c.made > 0 && !c.kept()
}

// parsedRefund is a refund's 201 body.
type parsedRefund struct {
	ID                string `json:"id"`
	ChargeID          string `json:"charge_id"`
	Amount            int64  `json:"amount"`
	ProviderReference string `json:"provider_reference"`
	CreatedAt         string `json:"created_at"`
	created           time.Time
}

func parseRefund(rt *rapid.T, body string) parsedRefund {
	rt.Helper()
	var rf parsedRefund
	if err := json.Unmarshal([]byte(body), &rf); err != nil {
		rt.Fatalf("refund body %s: %v", body, err)
	}
	created, err := time.Parse(charge.TimeLayout, rf.CreatedAt)
	if err != nil {
		rt.Fatalf("refund body %s: %v", body, err)
	}
	rf.created = created
	return rf
}

// refundReferences are the references of every refund command of the
// history, and those whose clients were told nothing was refunded.
func (r *history) refundReferences() []string {
	var refs []string
	for k, rs := range r.refunds.keys {
		for created := range rs.gens {
			refs = append(refs, charge.RefundReference(k, created))
		}
		if rs.told != "" {
			refs = append(refs, rs.told)
		}
	}
	return refs
}

// refundedAtMostOnce runs between steps: no refund command is refunded
// twice by the provider, whatever the state of the records.
func (r *history) refundedAtMostOnce(rt *rapid.T) {
	if len(r.refunds.keys) == 0 {
		return
	}
	for ref, c := range r.env.sim.refunds(r.refundReferences()) {
		if c.made > 1 {
			rt.Fatalf("refund reference %s: the provider refunded it %d times", ref, c.made)
		}
	}
}

// refundsSettled checks the refunds' end state, against the provider's
// own ledger. For every refund command (a key's intent):
//   - the provider refunded its reference at most once;
//   - it is SUCCEEDED exactly when the provider refunded it, and then its
//     row exists with the stored 201's amount, and reads failed exactly
//     when the refund failed at the provider; FAILED_PERMANENT or
//     RELEASED when the provider made no refund for it, or one that
//     failed; never left IN_FLIGHT, unless parked: past the dedup window,
//     with no refund;
//   - a client told nothing was refunded was told the truth;
//
// for every charge, the provider's refunds of it that did not fail are
// within its amount. They equal amount_refunded as GET /charges/{id}
// reads it, and the sum of its refund rows that did not fail. No hold
// outlives its refund, unless a parked refund holds it. Its refund count
// is its refund rows. Every 201 reads back as answered, or failed since at
// the provider. Every stored answer
// is replayed to its key.
func (r *history) refundsSettled(rt *rapid.T) {
	if len(r.refunds.keys) == 0 {
		return
	}
	ctx := context.Background()
	counts, ledger := r.env.sim.refunds(r.refundReferences()), r.env.sim.entries()
	charges, refunds := map[string]row{}, map[string]row{} // refunds by refund id
	for _, tenant := range r.tenants {
		for _, w := range r.rows(rt, tenant) {
			if w.ChargeID == "" {
				charges[w.ID] = w
			} else {
				_, id, _ := strings.Cut(w.ID, "#")
				refunds[id] = w
			}
		}
	}
	parkedOn := map[string]bool{} // charges a parked refund holds
	for _, k := range sorted(maps.Keys(r.refunds.keys)) {
		rs := r.refunds.keys[k]
		for created, rec := range rs.gens {
			ref, id := charge.RefundReference(k, created), charge.RefundID(k, created)
			c, w := counts[ref], refunds[id]
			_, hasRow := refunds[id]
			if c.made > 1 {
				rt.Fatalf("%s@%s: the provider refunded it %d times", k, created, c.made)
			}
			switch rec.Status {
			case idem.StatusSucceeded:
				rf := parseRefund(rt, string(rec.Response.Body))
				if c.made != 1 || !hasRow || w.Amount != rf.Amount || w.ChargeID != rf.ChargeID || w.ProviderReference != ref || rf.ID != id ||
					(w.Status == charge.RefundFailed) != (c.failed > 0) {
					rt.Fatalf("%s@%s: SUCCEEDED with %s, but the provider made %+v refunds under its reference and the row is %+v (%t)",
						k, created, rec.Response.Body, c, w, hasRow)
				}
			case idem.StatusFailedPermanent, idem.StatusReleased:
				if c.kept() || hasRow {
					rt.Fatalf("%s@%s: %s, but the provider made %+v refunds under its reference and a row exists: %t", k, created, rec.Status, c, hasRow)
				}
			case idem.StatusInFlight:
				if r.env.dedupWindow == 0 || r.env.clock.Now().Before(created.Add(r.env.dedupWindow)) || c.made != 0 || hasRow {
					rt.Fatalf("%s@%s: left IN_FLIGHT after the final sweep and reconcile, the provider made %+v refunds under its reference, a row exists: %t",
						k, created, c, hasRow)
				}
				var in struct{ Charge string }
				if err := json.Unmarshal(rec.Intent, &in); err != nil {
					rt.Fatalf("%s@%s: intent %s: %v", k, created, rec.Intent, err)
				}
				parkedOn[in.Charge] = true
				r.env.parked.Add(1)
			default:
				rt.Fatalf("%s@%s: left %s after the final sweep and reconcile", k, created, rec.Status)
			}
		}
		if rs.told != "" && counts[rs.told].kept() {
			rt.Fatalf("%s: its client was told nothing was refunded, and the provider refunded %s", k, rs.told)
		}
	}
	rowsRefunded, rowsCount := map[string]int64{}, map[string]int64{}
	for _, w := range refunds {
		rowsCount[w.ChargeID]++
		if w.Status == charge.RefundFailed {
			r.env.refundStats.failed.Add(1)
		} else {
			rowsRefunded[w.ChargeID] += w.Amount
		}
	}
	for _, t := range r.targets(rt) {
		e, w := ledger[t.reference], charges[t.id]
		resp, err := r.env.handler.Handle(ctx, testkit.GetCharge(t.tenant, t.id))
		var read struct {
			AmountRefunded int64 `json:"amount_refunded"`
		}
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &read) != nil {
			rt.Fatalf("%s: GET answered %d %s (%v)", t.id, resp.StatusCode, resp.Body, err)
		}
		if e.refunded > t.amount || read.AmountRefunded != e.refunded || rowsRefunded[t.id] != e.refunded || w.Refunded != e.refunded ||
			(w.Claimed != w.Refunded || w.Count != rowsCount[t.id]) && !parkedOn[t.id] {
			rt.Fatalf("%s of %d: the provider refunded %d; the API reads %d refunded, its %d refund rows sum to %d, its row says %d refunded, %d claimed, %d refunds",
				t.id, t.amount, e.refunded, read.AmountRefunded, rowsCount[t.id], rowsRefunded[t.id], w.Refunded, w.Claimed, w.Count)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.refunds.made)) {
		m, want := r.refunds.made[id], r.refunds.made[id].body
		if ref := parseRefund(rt, m.body).ProviderReference; r.env.sim.refunds([]string{ref})[ref].failed > 0 {
			want = strings.Replace(want, `"status":"`+charge.StatusSucceeded+`"`, `"status":"`+charge.RefundFailed+`"`, 1)
		}
		if resp, _ := r.env.handler.Handle(ctx, testkit.GetRefund(m.tenant, m.charge, id)); resp.StatusCode != http.StatusOK || resp.Body != want {
			rt.Fatalf("refund %s was answered %s; it reads %d %s, want %s", id, m.body, resp.StatusCode, resp.Body, want)
		}
	}
	for _, k := range sorted(maps.Keys(r.refunds.keys)) {
		rs := r.refunds.keys[k]
		t := rs.terminal
		if t == nil {
			continue
		}
		rec, err := r.env.reader.Get(ctx, k)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			continue // past its retention
		case err != nil:
			rt.Fatal(err)
		case rec.Response == nil || rec.Response.Status != t.status || string(rec.Response.Body) != t.body:
			rt.Fatalf("%s: stored %+v, clients saw %d %s", k, rec.Response, t.status, t.body)
		}
		resp, err := r.sendRefund(rs, t.req.body(true))
		r.observeRefund(rt, rs, t.req, resp, err, true)
	}
}
