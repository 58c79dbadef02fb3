package regions_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// design is the multi-Region design a world runs.
type design string

const (
	// chosen is docs/regions.md's: home Regions under a fence, and the
	// ledger of claims.
	chosen design = "chosen"
	// naive is today's service in every Region: each takes any tenant's
	// writes, with references from the key and the claim's time.
	naive design = "naive"
)

var (
	designFlag  = flag.String("regions.design", string(chosen), "the design TestRegions runs: chosen or naive")
	regionsFlag = flag.String("regions.n", "2,3", "the worlds TestRegions runs, by their number of Regions")
)

const (
	maxSteps     = 14
	retention    = 24 * time.Hour
	settleWindow = 2 * time.Minute
	retryBase    = time.Minute
	retryCap     = 4 * time.Minute
	leaseExpiry  = 31 * time.Second
)

// TestRegions runs random histories of two Regions, and of three, with
// failures, failovers, returns and drains, and checks the invariants
// after every step and once everything has settled.
func TestRegions(t *testing.T) {
	d := design(*designFlag)
	if d != chosen && d != naive {
		t.Fatalf("-regions.design=%s: want chosen or naive", d)
	}
	for n := range strings.SplitSeq(*regionsFlag, ",") {
		t.Run(n+" Regions", func(t *testing.T) {
			count, err := strconv.Atoi(n)
			if err != nil || count < 2 {
				t.Fatalf("-regions.n=%s: want numbers of Regions, each 2 or more", *regionsFlag)
			}
			runRegions(t, newWorld(t, count, d))
		})
	}
}

func runRegions(t *testing.T, w *world) {
	var st stats
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		h := newHistory(t, rt, w, &st)
		for range rapid.IntRange(1, maxSteps).Draw(rt, "steps") {
			name := rapid.SampledFrom(actionNames).Draw(rt, "action")
			actions[name](h, rt)
			h.checkSoFar(rt)
		}
		h.settle(rt)
		h.checkFinal(rt)
		h.readEverything(rt)
		if lost := w.conflicts.Load() - h.conflicts; w.design == chosen && lost > 0 {
			rt.Fatalf("%d writes lost to a later write in another Region: two Regions wrote one item before it replicated", lost)
		}
		st.histories.Add(1)
	})
	t.Logf("design %s: %d histories in %s; %d Region failures (%d in the middle of a request, %d answers lost), %d failovers, %d returns, %d drains; "+
		"%d items replicated, %d copies lost to a later write; %d charges made, %d refunds, %d captures or cancels answered 200; "+
		"%d answers said nothing was charged or refunded; %d outcome-pending during a failover, %d wrong-region; "+
		"%d reads, %d of them refused for now, %d behind the provider, %d checked fresh; %d keys swept, %d reconcile messages handled, %d left to redeliver",
		w.design, st.histories.Load(), time.Since(start).Round(time.Millisecond), st.failures.Load(), st.midRequest.Load(), st.lost.Load(),
		st.failovers.Load(), st.returns.Load(), st.drains.Load(), w.replications.Load(), w.conflicts.Load(),
		st.charges.Load(), st.refunds.Load(), st.moves.Load(), st.toldNothing.Load(), st.failoverPending.Load(), st.wrongRegion.Load(),
		st.reads.Load(), st.readsPending.Load(), st.staleReads.Load(), st.freshReads.Load(), st.queued.Load(), st.delivered.Load(), st.redelivered.Load())
}

// stats are the counts a run reports.
type stats struct {
	histories, failures, midRequest, lost, failovers, returns, drains  atomic.Int64
	charges, refunds, moves, toldNothing, failoverPending, wrongRegion atomic.Int64
	reads, readsPending, staleReads, freshReads                        atomic.Int64
	queued, delivered, redelivered                                     atomic.Int64
}

// history is one run: its tenants, what their clients saw, and each
// Region's functions.
type history struct {
	t       *testing.T
	w       *world
	st      *stats
	id      string
	tenants []string
	homes   map[string]string // tenant -> home Region
	// dns is where each home Region's endpoint points: its Region, or the
	// one it failed over to.
	dns    map[string]string
	force  string // the Region every request goes to first, if any
	stacks map[string]*stack
	keys   map[string]*intent // by the scoped key's String
	// conflicts is the world's count of copies lost to a later write when
	// the history began.
	conflicts int64
	order     []string // keys in the order first used
}

// intent is one command's key and what its clients saw.
type intent struct {
	key  idem.Key
	kind string // charge, refund
	body string
	// charge of a refund, and the authorized amount of a charge held to
	// capture later.
	charge     string
	authorized int64
	amount     int64
	final      *events.APIGatewayV2HTTPResponse // the first 201 or 402, nil until one
	firsts     int                              // final answers that were not replays
	// toldNothing: the last answer said nothing was charged (refunded),
	// and the client has not sent again since.
	toldNothing bool
	chargeID    string // a 201's charge id
	// moved is the status a capture's or cancel's 200 gave the charge.
	moved string
}

// stack is one Region's functions for a history: the charge function,
// the sweeper and the reconcile function, on the Region's reconcile queue.
type stack struct {
	handler interface {
		Handle(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
	}
	sweeper   *sweeper.Sweeper
	reconcile *reconcile.Handler
}

var historyIDs atomic.Int64

// fataler is a *testing.T or a *rapid.T.
type fataler interface {
	Fatal(args ...any)
}

func newHistory(t *testing.T, rt fataler, w *world, st *stats) *history {
	ctx := context.Background()
	h := &history{t: t, w: w, st: st, id: "h" + strconv.FormatInt(historyIDs.Add(1), 10) + testkit.UniqueName(""),
		homes: map[string]string{}, dns: map[string]string{}, stacks: map[string]*stack{}, keys: map[string]*intent{}}
	for _, r := range w.regions {
		r.link.down.Store(false)
		r.link.budget.Store(-1)
		h.dns[r.name] = r.name
		if _, err := w.raw.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(w.routesTable), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "home#" + r.name}},
		}); err != nil {
			rt.Fatal(err)
		}
		tenant := h.id + "-" + r.name
		h.tenants = append(h.tenants, tenant)
		h.homes[tenant] = r.name
	}
	if err := w.drainAll(ctx); err != nil {
		rt.Fatal(err)
	}
	h.conflicts = w.conflicts.Load()
	for _, r := range w.regions {
		h.stacks[r.name] = h.stack(rt, r)
	}
	return h
}

// stack builds r's charge function, sweeper and reconcile function as
// deployed, on r's links, the shared provider and clock; in the chosen
// design, with the routes and the ledger.
func (h *history) stack(rt fataler, r *region) *stack {
	w := h.w
	var rg app.Regions
	if w.design == chosen {
		rg = app.Regions{Region: r.name, Home: w.regions[0].name, Homes: h.homes, RoutesTable: w.routesTable, LedgerTable: w.ledgerTable}
	}
	wire := func(wi *testkit.Wiring) {
		wi.Deps.Clients.DynamoDB, wi.Deps.Clients.SQS, wi.Deps.Clock = r.db, r.sqs, w.clock.Now
		wi.Deps.ProviderOptions = []func(*provider.Options){provider.WithTimeout(5 * time.Second)}
		wi.Charge.ProviderURL, wi.Reconcile.ProviderURL = w.simURL, w.simURL
		wi.Charge.InflightWait, wi.Charge.Retention, wi.Reconcile.Retention = 100*time.Millisecond, retention, retention
		wi.Reconcile.SettleWindow, wi.Reconcile.RetryBase, wi.Reconcile.RetryCap = settleWindow, retryBase, retryCap
		wi.Charge.Regions, wi.Reconcile.Regions = rg, rg
	}
	wi := testkit.Wiring{Reconcile: r.d.Reconcile(), Deps: app.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}}
	wire(&wi)
	sc := r.d.Sweeper()
	sc.Regions = rg
	s := &stack{handler: r.d.ChargeHandler(h.t, wire)}
	var err error
	if s.sweeper, err = app.SweeperHandler(sc, wi.Deps); err != nil {
		rt.Fatal(err)
	}
	if s.reconcile, err = app.ReconcileHandler(wi.Reconcile, wi.Deps); err != nil {
		rt.Fatal(err)
	}
	return s
}

// actions are what a history's steps draw from.
var actions = map[string]func(*history, *rapid.T){
	"charge":              (*history).charge,
	"chargeAgain":         (*history).chargeAgain,
	"refund":              (*history).refund,
	"read":                (*history).read,
	"move":                (*history).move,
	"replicate":           (*history).replicate,
	"regionFails":         (*history).regionFails,
	"regionFailsMidway":   (*history).regionFailsMidway,
	"failover":            (*history).failover,
	"regionReturns":       (*history).regionReturns,
	"drain":               (*history).drain,
	"advanceClock":        (*history).advanceClock,
	"sweepAndReconcile":   (*history).sweepAndReconcile,
	"reconcileQueued":     (*history).reconcileQueued,
	"providerLands":       func(h *history, _ *rapid.T) { h.w.sim.Land() },
	"replicateEverything": func(h *history, rt *rapid.T) { h.replicateAll(rt) },
	"failoverRound":       (*history).failoverRound,
}

// actionNames are the actions' names; the clients', the failures' and
// the operators' more often.
var actionNames = func() []string {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range actions {
			if !yield(n) {
				return
			}
		}
	})
	return append(names, "charge", "chargeAgain", "chargeAgain", "refund", "move", "read", "read", "replicate",
		"regionFails", "regionFailsMidway", "regionFailsMidway", "failover", "regionReturns", "drain", "failoverRound", "failoverRound")
}()

// ---- clients ----

// sources are the cards charged. A timeout charges and loses the answer:
// the charge function queues the key for its Region's reconciler.
var sources = []string{providersim.SourceVisa, providersim.SourceVisa, providersim.SourceDecline, providersim.SourceUnavailableOnce, providersim.SourceTimeoutOnce}

// charge sends a new charge of a drawn tenant.
func (h *history) charge(rt *rapid.T) {
	tenant := rapid.SampledFrom(h.tenants).Draw(rt, "tenant")
	key, err := idem.NewKey(tenant, charge.ChargeOperation, "k"+strconv.Itoa(len(h.keys)+1))
	if err != nil {
		rt.Fatal(err)
	}
	in := &intent{key: key, kind: "charge", amount: int64(rapid.IntRange(charge.MinAmount, 10_000).Draw(rt, "amount"))}
	body := map[string]any{"amount": in.amount, "currency": "EUR", "source": rapid.SampledFrom(sources).Draw(rt, "source")}
	if rapid.IntRange(0, 2).Draw(rt, "authorizeOnly") == 0 {
		body["capture"], in.authorized = false, in.amount
	}
	b, _ := json.Marshal(body)
	in.body = string(b)
	h.keys[key.String()] = in
	h.order = append(h.order, key.String())
	h.sendCharge(rt, in, in.body)
}

// chargeAgain retries a charge a client sent, as it was, or with another
// amount (a client's mistake, answered 422 while the key lives).
func (h *history) chargeAgain(rt *rapid.T) {
	in := h.pick(rt, "charge")
	if in == nil {
		h.charge(rt)
		return
	}
	body := in.body
	if rapid.IntRange(0, 5).Draw(rt, "changedAmount") == 0 {
		body = strings.Replace(body, `"amount":`+strconv.FormatInt(in.amount, 10), `"amount":`+strconv.FormatInt(in.amount+1, 10), 1)
	}
	h.sendCharge(rt, in, body)
}

// sendCharge sends body under in's key. A changed body answered first is
// the intent's from then on: the earlier request never claimed the key,
// as a crash before its record may leave it.
func (h *history) sendCharge(rt *rapid.T, in *intent, body string) {
	resp, ok := h.send(rt, in.key.Tenant(), func(s *stack) (events.APIGatewayV2HTTPResponse, error) {
		return s.handler.Handle(context.Background(), testkit.PostCharge(in.key.Tenant(), in.key.ClientKey(), body))
	})
	in.toldNothing = false
	if !ok {
		return
	}
	h.observe(rt, in, body == in.body, resp)
	if body != in.body && in.final != nil && in.firsts == 1 && in.final.Body == resp.Body {
		var b struct{ Amount int64 }
		_ = json.Unmarshal([]byte(body), &b)
		in.body, in.amount = body, b.Amount
		if in.authorized > 0 {
			in.authorized = b.Amount
		}
	}
}

// pick draws a key of kind the clients have sent, nil if none.
func (h *history) pick(rt *rapid.T, kind string) *intent {
	var of []string
	for _, k := range h.order {
		if h.keys[k].kind == kind {
			of = append(of, k)
		}
	}
	if len(of) == 0 {
		return nil
	}
	return h.keys[rapid.SampledFrom(of).Draw(rt, kind)]
}

// charged draws a charge whose client was answered 201, nil if none.
func (h *history) charged(rt *rapid.T, authorized bool) *intent {
	var of []string
	for _, k := range h.order {
		if in := h.keys[k]; in.kind == "charge" && in.chargeID != "" && (in.authorized > 0) == authorized {
			of = append(of, k)
		}
	}
	if len(of) == 0 {
		return nil
	}
	return h.keys[rapid.SampledFrom(of).Draw(rt, "chargeSeen")]
}

// refund refunds a charge its client saw made, under a new key or a
// refund key sent before.
func (h *history) refund(rt *rapid.T) {
	in := h.pick(rt, "refund")
	if in == nil || rapid.Bool().Draw(rt, "newRefund") {
		c := h.charged(rt, false)
		if c == nil {
			return
		}
		key, _ := idem.NewKey(c.key.Tenant(), charge.RefundOperation, "r"+strconv.Itoa(len(h.keys)+1))
		in = &intent{key: key, kind: "refund", charge: c.chargeID, body: "{}"}
		if amount := int64(rapid.IntRange(0, int(c.amount)).Draw(rt, "refundAmount")); amount > 0 {
			in.amount, in.body = amount, `{"amount":`+strconv.FormatInt(amount, 10)+`}`
		}
		h.keys[key.String()] = in
		h.order = append(h.order, key.String())
	}
	resp, ok := h.send(rt, in.key.Tenant(), func(s *stack) (events.APIGatewayV2HTTPResponse, error) {
		return s.handler.Handle(context.Background(), testkit.PostRefund(in.key.Tenant(), in.key.ClientKey(), in.charge, in.body))
	})
	in.toldNothing = false
	if ok {
		h.observe(rt, in, true, resp)
	}
}

// move captures or cancels an authorization its client saw made.
func (h *history) move(rt *rapid.T) {
	c := h.charged(rt, true)
	if c == nil {
		return
	}
	verb := rapid.SampledFrom([]string{"capture", "capture", "cancel"}).Draw(rt, "verb")
	resp, ok := h.send(rt, c.key.Tenant(), func(s *stack) (events.APIGatewayV2HTTPResponse, error) {
		return s.handler.Handle(context.Background(), testkit.PostMove(c.key.Tenant(), c.chargeID, verb, ""))
	})
	if !ok {
		return
	}
	switch resp.StatusCode {
	case http.StatusOK:
		h.st.moves.Add(1)
		var got struct{ Status string }
		_ = json.Unmarshal([]byte(resp.Body), &got)
		c.moved = got.Status
	case http.StatusConflict, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusNotFound:
	default:
		rt.Fatalf("%s of %s: %d %s", verb, c.chargeID, resp.StatusCode, resp.Body)
	}
	h.counted(resp)
}

var servedBy = regexp.MustCompile(`the Region (\S+) serves`)

// send is a client's request, as a real one fails over: to its
// endpoint's Region (the naive design's clients to any), then to the
// next when that one does not answer, and where a 421 names. ok is false
// when no Region answered.
func (h *history) send(rt *rapid.T, tenant string, do func(*stack) (events.APIGatewayV2HTTPResponse, error)) (events.APIGatewayV2HTTPResponse, bool) {
	// Requests come at different times: no two claims share a millisecond
	// by the frozen clock's chance.
	h.w.clock.Advance(time.Duration(rapid.IntRange(1, 1500).Draw(rt, "msBefore")) * time.Millisecond)
	target := h.dns[h.homes[tenant]]
	switch {
	case h.force != "":
		target = h.force
	case h.w.design == naive || rapid.IntRange(0, 4).Draw(rt, "staleEndpoint") == 0:
		target = rapid.SampledFrom(h.regionNames()).Draw(rt, "region")
	}
	for range 4 {
		r := h.w.byName[target]
		if r.link.down.Load() {
			target = h.next(target)
			continue
		}
		resp, err := do(h.stacks[target])
		if r.link.down.Load() {
			// It died answering: the client hears nothing.
			h.st.lost.Add(1)
			target = h.next(target)
			continue
		}
		if err != nil {
			rt.Fatalf("the handler of %s returned an error: %v", target, err)
		}
		if resp.StatusCode == http.StatusMisdirectedRequest {
			h.st.wrongRegion.Add(1)
			m := servedBy.FindStringSubmatch(resp.Body)
			if m == nil || h.w.byName[m[1]] == nil {
				rt.Fatalf("421 naming no Region: %s", resp.Body)
			}
			target = m[1]
			continue
		}
		return resp, true
	}
	return events.APIGatewayV2HTTPResponse{}, false
}

func (h *history) regionNames() []string { return names(h.w.regions) }

func names(rs []*region) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

// next is the Region after name, the first after the last.
func (h *history) next(name string) string {
	i := slices.Index(h.regionNames(), name)
	return h.w.regions[(i+1)%len(h.w.regions)].name
}

// slug is a problem answer's type, after the base.
func slug(body string) string {
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(body), &p)
	return strings.TrimPrefix(p.Type, httpapi.ProblemBase)
}

// nothingDone are the answers that say nothing was charged (refunded).
var nothingDone = map[string][]string{
	"charge": {httpapi.ProblemUnavailable.Slug, httpapi.ProblemProviderRejected.Slug},
	"refund": {httpapi.ProblemUnavailable.Slug, httpapi.ProblemProviderRejected.Slug, httpapi.ProblemRefundExceeds.Slug, httpapi.ProblemStateConflict.Slug},
}

// observe checks an answer against what the key's clients saw: one first
// final answer, replayed byte for byte; and notes what it claims.
func (h *history) observe(rt *rapid.T, in *intent, sameBody bool, resp events.APIGatewayV2HTTPResponse) {
	h.counted(resp)
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusPaymentRequired:
	case http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusNotFound:
		if slices.Contains(nothingDone[in.kind], slug(resp.Body)) {
			in.toldNothing = true
			h.st.toldNothing.Add(1)
		}
		return
	default:
		rt.Fatalf("%s: %d %s", in.key, resp.StatusCode, resp.Body)
	}
	if !sameBody && in.final != nil {
		rt.Fatalf("%s: a changed body got %d %s after a final answer, want 422", in.key, resp.StatusCode, resp.Body)
	}
	replayed := resp.Headers[httpapi.HeaderReplayed] == "true"
	if in.final != nil && (resp.Body != in.final.Body || !replayed) {
		h.checkSoFar(rt) // the provider's word first: did it act twice?
	}
	if in.final != nil {
		if resp.StatusCode != in.final.StatusCode || resp.Body != in.final.Body || !replayed {
			rt.Fatalf("%s: got %d %s (replayed %t), first answered %d %s", in.key, resp.StatusCode, resp.Body, replayed, in.final.StatusCode, in.final.Body)
		}
		return
	}
	in.final = &resp
	if !replayed {
		in.firsts++
	}
	if in.firsts > 1 {
		rt.Fatalf("%s: two first final answers", in.key)
	}
	if resp.StatusCode == http.StatusCreated {
		var made struct{ ID string }
		_ = json.Unmarshal([]byte(resp.Body), &made)
		in.chargeID = made.ID
		if in.kind == "refund" {
			h.st.refunds.Add(1)
		} else {
			h.st.charges.Add(1)
		}
	}
}

// counted counts the answers a failover explains.
func (h *history) counted(resp events.APIGatewayV2HTTPResponse) {
	if resp.StatusCode == http.StatusServiceUnavailable && slug(resp.Body) == httpapi.ProblemOutcomePending.Slug && strings.Contains(resp.Body, "moved to this Region") {
		h.st.failoverPending.Add(1)
	}
}

// ---- Regions and operators ----

// replicate copies a drawn part of one Region's unreplicated writes.
func (h *history) replicate(rt *rapid.T) {
	r := h.w.byName[rapid.SampledFrom(h.regionNames()).Draw(rt, "from")]
	n := rapid.IntRange(1, 8).Draw(rt, "items")
	off := rapid.IntRange(0, 7).Draw(rt, "offset")
	if err := h.w.replicate(context.Background(), r, func(refs []itemRef) []itemRef {
		var out []itemRef
		for i := 0; i < n && i < len(refs); i++ {
			out = append(out, refs[(off+i)%len(refs)])
		}
		return out
	}); err != nil {
		rt.Fatal(err)
	}
}

func (h *history) replicateAll(rt *rapid.T) {
	all := func(refs []itemRef) []itemRef { return refs }
	for _, r := range h.w.regions {
		if err := h.w.replicate(context.Background(), r, all); err != nil {
			rt.Fatal(err)
		}
	}
}

// up are the Regions that are up.
func (h *history) up() []*region {
	return slices.DeleteFunc(slices.Clone(h.w.regions), func(r *region) bool { return r.link.down.Load() })
}

// regionFails takes a Region down, unless another is down already: its
// writes not replicated stay there.
func (h *history) regionFails(rt *rapid.T) {
	if up := h.up(); len(up) == len(h.w.regions) {
		h.w.byName[rapid.SampledFrom(names(up)).Draw(rt, "failing")].link.down.Store(true)
		h.st.failures.Add(1)
	}
}

// regionFailsMidway sends a charge, a refund or a move to a Region that
// dies after a drawn number of its DynamoDB calls: its record may hold a
// claim, its provider call may have charged, and its client hears nothing.
func (h *history) regionFailsMidway(rt *rapid.T) {
	up := h.up()
	if len(up) < len(h.w.regions) {
		return
	}
	h.failMidway(rt, h.w.byName[rapid.SampledFrom(names(up)).Draw(rt, "dying")])
}

// failMidway sends a charge, a refund or a move to r, which dies after a
// drawn number of its DynamoDB calls, unless the request ends first.
func (h *history) failMidway(rt *rapid.T, r *region) {
	r.link.applyLast.Store(rapid.Bool().Draw(rt, "lastCallApplied"))
	r.link.budget.Store(int64(rapid.IntRange(0, 6).Draw(rt, "callsBeforeDeath")))
	h.force = r.name
	defer func() { h.force = "" }()
	switch rapid.IntRange(0, 3).Draw(rt, "midwayRequest") {
	case 0, 1:
		h.charge(rt)
	case 2:
		h.refund(rt)
	default:
		h.move(rt)
	}
	if r.link.down.Load() {
		h.st.failures.Add(1)
		h.st.midRequest.Add(1)
	} else {
		r.link.budget.Store(-1)
	}
}

// failover moves a home's tenants to another Region, as an operator
// does once their Region fails (or to evacuate it): the route, after the
// fence, and the endpoint. The naive design has no routes: its clients
// just go elsewhere.
func (h *history) failover(rt *rapid.T) {
	h.failoverHome(rt, rapid.SampledFrom(h.regionNames()).Draw(rt, "home"))
}

// failoverHome moves home's tenants to a drawn Region that is up and
// not serving them: with three Regions, between any two.
func (h *history) failoverHome(rt *rapid.T, home string) {
	to := names(slices.DeleteFunc(h.up(), func(r *region) bool { return r.name == h.dns[home] }))
	if len(to) == 0 {
		return
	}
	h.dns[home] = to[0]
	if len(to) > 1 {
		h.dns[home] = rapid.SampledFrom(to).Draw(rt, "to")
	}
	h.st.failovers.Add(1)
	if h.w.design == naive {
		return
	}
	ctx := context.Background()
	rtRoute, err := h.w.routes.Route(ctx, home)
	if err != nil {
		rt.Fatal(err)
	}
	if _, err := h.w.routes.Move(ctx, rtRoute, h.dns[home], h.w.clock.Now(), regions.FenceDelay); err != nil {
		rt.Fatal(err)
	}
	if rapid.Bool().Draw(rt, "waitOutTheFence") {
		h.w.clock.Advance(regions.FenceDelay)
	}
}

// failoverRound is a whole failover as one step: the clients act; the
// Region serving a drawn home fails, at once or in a request; the home
// fails over; the clients read and act; the Region returns, a client
// reads, and it may be drained while they act on.
// Single steps seldom chain so far, and twice over (fail, return, drain,
// act, fail the other Region) is where a weak ledger or guard shows.
func (h *history) failoverRound(rt *rapid.T) {
	if len(h.up()) < len(h.w.regions) {
		return
	}
	// The failing Region holds the clients' latest writes, unreplicated;
	// the older ones may have reached the other Region.
	if rapid.Bool().Draw(rt, "roundReplicatesFirst") {
		h.replicateAll(rt)
	}
	h.act(rt)
	home := rapid.SampledFrom(h.regionNames()).Draw(rt, "roundHome")
	failing := h.w.byName[h.dns[home]]
	if rapid.Bool().Draw(rt, "roundMidway") {
		h.failMidway(rt, failing)
	}
	if !failing.link.down.Load() {
		failing.link.down.Store(true)
		h.st.failures.Add(1)
	}
	h.failoverHome(rt, home)
	h.read(rt)
	h.act(rt)
	failing.link.down.Store(false)
	failing.link.budget.Store(-1)
	h.st.returns.Add(1)
	h.read(rt) // back, not drained: its writes are not everywhere yet
	if rapid.Bool().Draw(rt, "roundDrains") {
		h.drain(rt)
		h.w.clock.Advance(regions.DefaultLease)
		h.act(rt)
	}
}

// act is a few of the clients' requests.
func (h *history) act(rt *rapid.T) {
	for range rapid.IntRange(1, 4).Draw(rt, "requests") {
		switch rapid.SampledFrom([]string{"charge", "chargeAgain", "chargeAgain", "refund", "move", "move", "read"}).Draw(rt, "request") {
		case "charge":
			h.charge(rt)
		case "chargeAgain":
			h.chargeAgain(rt)
		case "refund":
			h.refund(rt)
		case "read":
			h.read(rt)
		default:
			h.move(rt)
		}
	}
}

// regionReturns brings a Region back: its writes replicate from now on.
func (h *history) regionReturns(rt *rapid.T) {
	var down []*region
	for _, r := range h.w.regions {
		if r.link.down.Load() {
			down = append(down, r)
		}
	}
	if len(down) > 0 {
		r := h.w.byName[rapid.SampledFrom(names(down)).Draw(rt, "returning")]
		r.link.down.Store(false)
		r.link.budget.Store(-1)
		h.st.returns.Add(1)
	}
}

// drain is the operator's drain, once every Region is up: replication
// runs out, then each home's pending Regions are marked drained.
func (h *history) drain(rt *rapid.T) {
	if len(h.up()) < len(h.w.regions) {
		return
	}
	if err := h.w.drainAll(context.Background()); err != nil {
		rt.Fatal(err)
	}
	if h.w.design == naive {
		return
	}
	h.drainRoutes(rt)
}

// drainRoutes marks every pending Region drained.
func (h *history) drainRoutes(rt fataler) {
	ctx := context.Background()
	for _, home := range h.regionNames() {
		route, err := h.w.routes.Route(ctx, home)
		if err != nil {
			rt.Fatal(err)
		}
		for _, p := range slices.Clone(route.Pending) {
			next, err := h.w.routes.Drained(ctx, route, p)
			if err != nil {
				rt.Fatal(err)
			}
			route = next
			h.st.drains.Add(1)
		}
	}
}

func (h *history) advanceClock(rt *rapid.T) {
	h.w.clock.Advance(rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, leaseExpiry, 2 * time.Minute, 5 * time.Minute}).Draw(rt, "advance"))
}

// sweepAndReconcile runs a Region's sweeper, then its reconcile function
// on what its queue holds.
func (h *history) sweepAndReconcile(rt *rapid.T) {
	r := h.w.byName[rapid.SampledFrom(h.regionNames()).Draw(rt, "sweeping")]
	h.sweep(rt, r)
}

// reconcileQueued runs a Region's reconcile function on what its queue
// holds: what its charge function and sweeper sent, in any Region's
// tenants' names.
func (h *history) reconcileQueued(rt *rapid.T) {
	h.deliver(rt, h.w.byName[rapid.SampledFrom(h.regionNames()).Draw(rt, "receiving")])
}

func (h *history) sweep(rt *rapid.T, r *region) {
	if r.link.down.Load() {
		return
	}
	sum, _ := h.stacks[r.name].sweeper.Run(context.Background())
	h.st.queued.Add(int64(sum.Queued))
	h.deliver(rt, r)
}

// deliver is r's event source mapping: each message its queue holds is
// handed to its reconcile function alone, and deleted once handled. One
// to redeliver is visible again at once: the clock, not SQS's, says when
// a lease ended. A Region that is down receives nothing.
func (h *history) deliver(rt *rapid.T, r *region) {
	ctx := context.Background()
	for range 3 {
		if r.link.down.Load() {
			return
		}
		out, err := r.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(r.d.Queues.URL), MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil || len(out.Messages) == 0 {
			return
		}
		for _, m := range out.Messages {
			resp, _ := h.stacks[r.name].reconcile.Handle(ctx, testkit.SQSEvent(m))
			h.st.delivered.Add(1)
			if len(resp.BatchItemFailures) > 0 {
				h.st.redelivered.Add(1)
				_, _ = r.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(r.d.Queues.URL), ReceiptHandle: m.ReceiptHandle})
				continue
			}
			_, _ = r.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.d.Queues.URL), ReceiptHandle: m.ReceiptHandle})
		}
	}
}

// ---- invariants ----

// refs are every provider reference any Region derived for in's command.
func (h *history) refs(in *intent) []string {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	var out []string
	for ms := range h.w.claims[in.key.String()] {
		if in.kind == "refund" {
			out = append(out, charge.RefundReference(in.key, time.UnixMilli(ms)))
		} else {
			out = append(out, charge.ProviderReference(in.key, time.UnixMilli(ms)))
		}
	}
	slices.Sort(out)
	return out
}

// effects are the provider's effects for in's command: the references it
// charged (or authorized), or refunded.
func (h *history) effects(in *intent, l providersim.Ledger) []string {
	var made []string
	for _, ref := range h.refs(in) {
		switch {
		case in.kind == "refund" && l.Refunds[ref].Refunds > 0:
			made = append(made, ref)
		case in.kind == "charge" && (l.References[ref].Status == provider.StatusCharged || l.References[ref].Status == provider.StatusAuthorized):
			made = append(made, ref)
		}
	}
	return made
}

// checkSoFar: at most one effect per intent, over every reference any
// Region sent; and no client told nothing was done of one that was.
func (h *history) checkSoFar(rt *rapid.T) {
	l := h.w.sim.Ledger()
	for _, k := range h.order {
		in := h.keys[k]
		made := h.effects(in, l)
		if len(made) > 1 {
			rt.Fatalf("%s: the provider acted %d times, under references %v", in.key, len(made), made)
		}
		if in.toldNothing && len(made) > 0 {
			rt.Fatalf("%s: its client was told nothing was done, and the provider acted under %v", in.key, made)
		}
	}
}

// settle is the end of every history: every Region returns, replication
// runs out, every pending Region is drained, and the sweepers and
// reconcilers run until nothing is in flight.
func (h *history) settle(rt *rapid.T) {
	ctx := context.Background()
	for _, r := range h.w.regions {
		r.link.down.Store(false)
		r.link.budget.Store(-1)
	}
	if err := h.w.drainAll(ctx); err != nil {
		rt.Fatal(err)
	}
	if h.w.design == chosen {
		h.drainRoutes(rt)
	}
	h.w.clock.Advance(regions.FenceDelay)
	for range 6 {
		h.w.clock.Advance(retryCap + settleWindow + leaseExpiry)
		h.w.sim.Land()
		for _, r := range h.w.regions {
			h.sweep(rt, r)
		}
		if err := h.w.drainAll(ctx); err != nil {
			rt.Fatal(err)
		}
		if !h.inFlight(rt) {
			return
		}
	}
}

// inFlight reports whether a command of the history is IN_FLIGHT in any
// Region.
func (h *history) inFlight(rt *rapid.T) bool {
	for _, r := range h.w.regions {
		for _, k := range h.order {
			if rec := h.record(rt, r, h.keys[k].key); rec != nil && rec.Status == idem.StatusInFlight {
				return true
			}
		}
	}
	return false
}

// record reads k's record in r, nil if none (the emulator itself).
func (h *history) record(rt *rapid.T, r *region, k idem.Key) *idem.Record {
	st, err := dynamostore.New(h.w.raw, r.d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = h.w.clock.Now })
	if err != nil {
		rt.Fatal(err)
	}
	rec, err := st.Get(context.Background(), k)
	if errors.Is(err, idem.ErrNotFound) {
		return nil
	}
	if err != nil {
		rt.Fatal(err)
	}
	return rec
}

// rows are r's items of the history's tenants, by tenant and id.
func (h *history) rows(rt *rapid.T, r *region) map[string]map[string]types.AttributeValue {
	out := map[string]map[string]types.AttributeValue{}
	for _, tenant := range h.tenants {
		p := dynamodb.NewQueryPaginator(h.w.raw, &dynamodb.QueryInput{
			TableName:                 aws.String(r.d.ChargesTable),
			KeyConditionExpression:    aws.String("#t = :t"),
			ExpressionAttributeNames:  map[string]string{"#t": charge.AttrTenant},
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: tenant}},
			ConsistentRead:            aws.Bool(true),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(context.Background())
			if err != nil {
				rt.Fatal(err)
			}
			for _, item := range page.Items {
				out[tenant+"/"+attrS(item, charge.AttrID)] = item
			}
		}
	}
	return out
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func attrN(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

// checkFinal checks the settled history. Every Region holds the same
// records and rows. Every command is settled: SUCCEEDED exactly when the
// provider acted under its record's reference, and under no other; a row
// for each, agreeing with the provider; every final answer a client saw
// replays. Nothing is lost.
func (h *history) checkFinal(rt *rapid.T) {
	h.checkSoFar(rt)
	l := h.w.sim.Ledger()
	first := h.w.regions[0]
	rows := h.rows(rt, first)
	for _, r := range h.w.regions[1:] {
		if other := h.rows(rt, r); !sameItems(rows, other) {
			rt.Fatalf("the charges tables of %s and %s differ once replication ran out:\n%s\n%s", first.name, r.name, dump(rows), dump(other))
		}
	}
	wantRows := map[string]bool{}
	for _, k := range h.order {
		in := h.keys[k]
		rec := h.record(rt, first, in.key)
		for _, r := range h.w.regions[1:] {
			if o := h.record(rt, r, in.key); !sameRecord(rec, o) {
				rt.Fatalf("%s: the record in %s is %+v, in %s %+v", in.key, first.name, rec, r.name, o)
			}
		}
		made := h.effects(in, l)
		if rec == nil {
			if len(made) > 0 || in.final != nil {
				rt.Fatalf("%s: no record, but the provider acted under %v and a client saw %v", in.key, made, in.final)
			}
			continue
		}
		ref := charge.ProviderReference(in.key, rec.CreatedAt)
		id := charge.ChargeID(in.key, rec.CreatedAt)
		if in.kind == "refund" {
			ref, id = charge.RefundReference(in.key, rec.CreatedAt), in.charge+"#"+charge.RefundID(in.key, rec.CreatedAt)
		}
		switch rec.Status {
		case idem.StatusSucceeded:
			if len(made) != 1 || made[0] != ref {
				rt.Fatalf("%s: SUCCEEDED under %s, but the provider acted under %v", in.key, ref, made)
			}
			wantRows[in.key.Tenant()+"/"+id] = true
		case idem.StatusFailedPermanent:
			if len(made) != 0 && !(in.kind == "charge" && l.References[ref].Canceled) {
				rt.Fatalf("%s: FAILED_PERMANENT, but the provider acted under %v", in.key, made)
			}
		case idem.StatusReleased:
			if len(made) != 0 {
				rt.Fatalf("%s: RELEASED, but the provider acted under %v: lost", in.key, made)
			}
		default:
			rt.Fatalf("%s: left %s once everything settled", in.key, rec.Status)
		}
		if in.final != nil && (rec.Response == nil || rec.Response.Status != in.final.StatusCode || string(rec.Response.Body) != in.final.Body) {
			rt.Fatalf("%s: a client saw %d %s, the record holds %+v", in.key, in.final.StatusCode, in.final.Body, rec.Response)
		}
	}
	h.checkRows(rt, rows, wantRows, l)
}

// checkRows: a row for each succeeded command and none other, and each
// charge's row agrees with the provider and with its refunds' rows.
func (h *history) checkRows(rt *rapid.T, rows map[string]map[string]types.AttributeValue, want map[string]bool, l providersim.Ledger) {
	refunded := map[string]int64{}
	for id, item := range rows {
		if !want[id] {
			rt.Fatalf("row %s belongs to no succeeded command: %v", id, item)
		}
		if c := attrS(item, "charge_id"); c != "" {
			refunded[strings.SplitN(id, "/", 2)[0]+"/"+c] += attrN(item, "amount")
		}
	}
	for id := range want {
		if rows[id] == nil {
			rt.Fatalf("no row %s for its succeeded command: lost", id)
		}
	}
	for id, item := range rows {
		if attrS(item, "charge_id") != "" {
			continue
		}
		e := l.References[attrS(item, "provider_reference")]
		status, amount := attrS(item, "status"), attrN(item, "amount")
		switch {
		case attrN(item, "amount_refunded") != refunded[id] || e.Refunded != refunded[id]:
			rt.Fatalf("charge %s: amount_refunded %d, its refunds' rows %d, the provider %d", id, attrN(item, "amount_refunded"), refunded[id], e.Refunded)
		case e.Captures > 0 && (status != charge.StatusSucceeded || amount != e.Captured),
			e.Canceled && e.Captures == 0 && status != charge.StatusCanceled && status != charge.StatusRequiresCapture,
			status == charge.StatusCapturing || status == charge.StatusCanceling:
			rt.Fatalf("charge %s: row %s of %d, the provider %+v", id, status, amount, e)
		}
	}
}

// sameRecord reports whether two Regions hold the same record.
func sameRecord(a, b *idem.Record) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.CreatedAt.Equal(b.CreatedAt) && a.LeaseToken == b.LeaseToken &&
		(a.Response == nil) == (b.Response == nil) && (a.Response == nil || a.Response.Equal(*b.Response))
}

func sameItems(a, b map[string]map[string]types.AttributeValue) bool {
	return dump(a) == dump(b)
}

// dump renders items in a fixed order, to compare and to print.
func dump(items map[string]map[string]types.AttributeValue) string {
	var lines []string
	for id, item := range items {
		var attrs []string
		for name, v := range item {
			attrs = append(attrs, fmt.Sprintf("%s=%v", name, value(v)))
		}
		slices.Sort(attrs)
		lines = append(lines, id+" "+strings.Join(attrs, " "))
	}
	slices.SortFunc(lines, cmp.Compare)
	return strings.Join(lines, "\n")
}

func value(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return v.Value
	case *types.AttributeValueMemberM:
		return dump(map[string]map[string]types.AttributeValue{"": v.Value})
	}
	return fmt.Sprintf("%T", v)
}
