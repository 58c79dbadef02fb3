package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

var (
	roundTripsOut  = flag.String("roundtrips", "", "also write TestRoundTrips' table, as Markdown, to this file")
	roundTripsJSON = flag.String("roundtrips-json", "", "also write TestRoundTrips' figures, as JSON (see roundTripFile), to this file")
)

// Table roles in the figures: the meter's tableLayout.role.
const (
	roleIdempotency = "idempotency"
	roleCharges     = "charges"
	roleLimits      = "limits"
)

// roundTrip is what one outcome cost.
type roundTrip struct {
	id      string // stable, for the JSON figures
	outcome string
	status  string // the HTTP answer, or what the reconciler did
	calls   map[string]int
	used    usage
	// logBytes is what the charge function wrote to its log (the request
	// line at LOG_LEVEL=INFO and the metrics line); 0 where the outcome is
	// not the charge function's (the reconciler, the naive handler).
	logBytes int64
}

// want is what an outcome must cost.
type want struct {
	calls                      map[string]int
	written, wcu, indexWC, rcu int
}

// TestRoundTrips drives the charge handler and the reconciler through each
// outcome, one request at a time, and asserts the DynamoDB calls (counted
// by testkit.CallCounter), the items written and the capacity units each
// one costs, then prints them as a table. The handler holds its tenants
// to the default limits, as deployed; each measured request is a second
// after the one before, as a quiet tenant's are. They start halfway into a
// limits item: a busy tenant's first share of an item's first seconds
// reads the item before, measured on its own.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	now := time.Now().Unix()
	clock := testkit.NewClock(time.Unix(now-now%limit.SharedSpan+limit.SharedSpan/2, 0))
	counter := &testkit.CallCounter{}
	m := &meter{db: testkit.Clients(t).DynamoDB}
	s := newStack(t, clock.Now, 0, counter.Option(), m.Option())
	m.tables = map[string]tableLayout{
		s.cfg.IdempotencyTable: {role: roleIdempotency, key: []string{dynamostore.AttrPK}, index: []string{dynamostore.AttrLeaseShard, dynamostore.AttrLeaseExpiresAt}},
		s.cfg.ChargesTable:     {role: roleCharges, key: []string{charge.AttrTenant, charge.AttrID}, index: []string{charge.AttrTransitionShard, charge.AttrAttemptDeadline}},
		s.dep.LimitsTable:      {role: roleLimits, key: []string{limit.AttrPK, limit.AttrSK}},
	}
	reconciler := s.dep.ReconcileService(t, func(w *testkit.Wiring) { w.Deps = s.deps })
	// The charge function as deployed logs JSON at LOG_LEVEL=INFO (app.Logger)
	// and writes a metrics line per request; here both go to a counter.
	logs := &byteCounter{}
	logged := func(w *testkit.Wiring) {
		w.Charge, w.Deps = s.cfg, s.deps
		w.Charge.LimitsTable = s.dep.LimitsTable
		w.Deps.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		w.Deps.Metrics = logs
	}
	handler := s.dep.ChargeHandler(t, logged)

	var rows []roundTrip
	measure := func(id, outcome string, w want, do func() string) {
		t.Helper()
		counter.Snapshot()
		if _, err := m.Snapshot(); err != nil {
			t.Fatalf("%s: before: %v", outcome, err)
		}
		logsBefore := logs.n.Load()
		status := do()
		clock.Advance(limit.Window)
		r := roundTrip{id: id, outcome: outcome, status: status, calls: counter.Snapshot(), logBytes: logs.n.Load() - logsBefore}
		var err error
		r.used, err = m.Snapshot()
		if err != nil {
			t.Fatalf("%s: %v", outcome, err)
		}
		rows = append(rows, r)
		got := want{calls: r.calls, written: r.used.Written, wcu: r.used.WCU, indexWC: r.used.IndexWC, rcu: r.used.RCU}
		if !maps.Equal(got.calls, w.calls) || got.written != w.written || got.wcu != w.wcu || got.indexWC != w.indexWC || got.rcu != w.rcu {
			t.Errorf("%s: calls %v, written %d, WCU %d, index WCU %d, RCU %d; want calls %v, written %d, WCU %d, index WCU %d, RCU %d",
				outcome, got.calls, got.written, got.wcu, got.indexWC, got.rcu, w.calls, w.written, w.wcu, w.indexWC, w.rcu)
		}
	}
	handle := func(req events.APIGatewayV2HTTPRequest, wantStatus int, wantReplayed bool) func() string {
		return func() string {
			t.Helper()
			resp, err := handler.Handle(ctx, req)
			if err != nil || resp.StatusCode != wantStatus || (resp.Headers[httpapi.HeaderReplayed] == "true") != wantReplayed {
				t.Fatalf("%s %s: %d %v %s, %v; want %d", req.Headers["idempotency-key"], req.Body, resp.StatusCode, resp.Headers, resp.Body, err, wantStatus)
			}
			return answer(resp)
		}
	}
	with := func(source string) string { return strings.Replace(visa, "tok_visa", source, 1) }

	key := newKey()
	measure("first", "first charge", want{calls: map[string]int{"PutItem": 1, "TransactWriteItems": 1}, written: 3, wcu: 5, indexWC: 2},
		handle(post(key, visa), http.StatusCreated, false))
	// The record of a first charge, the item every replay reads back.
	if got := rows[len(rows)-1].used.Tables[roleIdempotency].MaxItemBytes; got > recordBudget {
		t.Errorf("first charge: record of %d B, want at most %d B", got, recordBudget)
	}
	// A busy tenant: at its SyncEvery-th request in a second, the instance
	// shares the tenant's count, one UpdateItem of the limits table. Its
	// caller is as typical as the first charge's, so its record is too.
	busy := func() events.APIGatewayV2HTTPRequest {
		req := post(newKey(), visa)
		req.RequestContext.Authorizer.JWT.Claims[testkit.TenantClaim] = "busy"
		return req
	}
	busySecond := func() {
		for range limit.SyncEvery - 1 {
			if resp, err := handler.Handle(ctx, busy()); err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("busy tenant: %d %s, %v", resp.StatusCode, resp.Body, err)
			}
		}
	}
	busySecond()
	measure("first-shared", "first charge that shares a busy tenant's count", want{calls: map[string]int{"PutItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}, written: 4, wcu: 6, indexWC: 2},
		handle(busy(), http.StatusCreated, false))
	// The next item's first second: the share reads the item before too,
	// once an item on an instance.
	clock.Advance(time.Duration(limit.SharedSpan-clock.Now().Unix()%limit.SharedSpan) * time.Second)
	busySecond()
	measure("first-shared-item", "the same, in a limits item's first seconds", want{calls: map[string]int{"GetItem": 1, "PutItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}, written: 4, wcu: 6, indexWC: 2, rcu: 1},
		handle(busy(), http.StatusCreated, false))
	measure("replay", "replay", want{calls: map[string]int{"PutItem": 1}, wcu: 1},
		handle(post(key, visa), http.StatusCreated, true))
	// A refund of that charge: the charge's row read, the claim, the hold,
	// then one transaction for the record, the refund's row and the hold's
	// settlement.
	firstKey, err := idem.NewKey(tenant, charge.ChargeOperation, key)
	if err != nil {
		t.Fatal(err)
	}
	firstRec, err := s.store.Get(ctx, firstKey)
	if err != nil {
		t.Fatal(err)
	}
	measure("refund", "first refund", want{calls: map[string]int{"GetItem": 1, "PutItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}, written: 5, wcu: 8, indexWC: 2, rcu: 1},
		handle(testkit.PostRefund(tenant, newKey(), charge.ChargeID(firstKey, firstRec.CreatedAt), `{"amount":500}`), http.StatusCreated, false))
	// A capture of an authorization: the row read, its move begun, then
	// settled. No idempotency record, no transaction.
	authKey := newKey()
	if _, err := handler.Handle(ctx, post(authKey, strings.Replace(visa, `"amount"`, `"capture":false,"amount"`, 1))); err != nil {
		t.Fatal(err)
	}
	authCmd, err := idem.NewKey(tenant, charge.ChargeOperation, authKey)
	if err != nil {
		t.Fatal(err)
	}
	authRec, err := s.store.Get(ctx, authCmd)
	if err != nil {
		t.Fatal(err)
	}
	measure("capture", "first capture", want{calls: map[string]int{"GetItem": 1, "UpdateItem": 2}, written: 2, wcu: 2, indexWC: 2, rcu: 1},
		handle(testkit.PostMove(tenant, charge.ChargeID(authCmd, authRec.CreatedAt), "capture", ""), http.StatusOK, false))
	// The charge function's replay cache: its first replay asks DynamoDB
	// and keeps the answer, the next is served from memory.
	cached := s.dep.ChargeHandler(t, func(w *testkit.Wiring) {
		logged(w)
		w.Charge.ReplayCache = 100
	})
	if resp, err := cached.Handle(ctx, post(key, visa)); err != nil || resp.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("cold replay through the cache: %d %v, %v", resp.StatusCode, resp.Headers, err)
	}
	measure("replay-cached", "replay, warm cache", want{calls: map[string]int{}},
		func() string {
			resp, err := cached.Handle(ctx, post(key, visa))
			if err != nil || resp.StatusCode != http.StatusCreated || resp.Headers[httpapi.HeaderReplayed] != "true" {
				t.Fatalf("warm replay: %d %v %s, %v", resp.StatusCode, resp.Headers, resp.Body, err)
			}
			return answer(resp)
		})

	held := newKey()
	fp, err := idem.FingerprintJSON([]byte(visa))
	if err != nil {
		t.Fatal(err)
	}
	heldKey, err := idem.NewKey(tenant, charge.ChargeOperation, held)
	if err != nil {
		t.Fatal(err)
	}
	// What the handler's own Begin would store: the request's intent.
	intent := []byte(`{"amount":1500,"currency":"EUR","description":"order 42"}`)
	if _, err := s.store.Begin(ctx, heldKey, fp, intent); err != nil {
		t.Fatal(err)
	}
	measure("in-flight", "in flight (INFLIGHT_WAIT=0)", want{calls: map[string]int{"PutItem": 1}, wcu: 1},
		handle(post(held, visa), http.StatusConflict, false))
	measure("mismatch", "mismatch", want{calls: map[string]int{"PutItem": 1}, wcu: 1},
		handle(post(key, strings.Replace(visa, "1500", "9900", 1)), http.StatusUnprocessableEntity, false))
	measure("decline", "decline", want{calls: map[string]int{"PutItem": 1, "UpdateItem": 1}, written: 2, wcu: 2, indexWC: 2},
		handle(post(newKey(), with("tok_decline")), http.StatusPaymentRequired, false))
	measure("released", "provider unavailable (key released)", want{calls: map[string]int{"PutItem": 1, "UpdateItem": 1}, written: 2, wcu: 2, indexWC: 2},
		handle(post(newKey(), with("tok_unavailable")), http.StatusServiceUnavailable, false))

	lost := newKey()
	// The claim, and the mark that queues its reconcile message once.
	measure("unknown", "outcome unknown (provider timed out)", want{calls: map[string]int{"PutItem": 1, "UpdateItem": 1}, written: 2, wcu: 2, indexWC: 1},
		handle(post(lost, with("tok_timeout_once")), http.StatusServiceUnavailable, false))
	lostKey, err := idem.NewKey(tenant, charge.ChargeOperation, lost)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // past the lease
	measure("reconcile", "reconcile (provider had charged)", want{calls: map[string]int{"GetItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}, written: 3, wcu: 5, indexWC: 3, rcu: 1},
		func() string {
			out, err := reconciler.Reconcile(ctx, lostKey)
			if err != nil || out != charge.OutcomeResolvedCharged {
				t.Fatalf("reconcile: %s, %v", out, err)
			}
			return string(out)
		})
	measure("naive", "naive handler, no idempotency", want{calls: map[string]int{"PutItem": 1}, written: 1, wcu: 1},
		func() string {
			resp, err := s.naive.Handle(ctx, post(newKey(), visa))
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("naive: %d %s, %v", resp.StatusCode, resp.Body, err)
			}
			return answer(resp)
		})

	for _, r := range rows {
		if r.id == "reconcile" || r.id == "refund" || r.id == "capture" || r.id == "first-shared-item" {
			// The reconciler reads, and a refund or capture reads its
			// charge. A busy tenant's share reads once an item on an
			// instance. A charge's path must not read otherwise.
			continue
		}
		if r.calls["GetItem"]+r.calls["Query"] != 0 {
			t.Errorf("%s reads on the request path: %v", r.outcome, r.calls)
		}
	}
	if charges := s.dep.Sim.Ledger().TotalCharges; charges != 5+2*limit.SyncEvery {
		t.Errorf("provider charges %d, want %d (first, the busy tenant's two seconds, the authorization, decline, timed out, naive)", charges, 5+2*limit.SyncEvery)
	}

	table := roundTripTable(rows)
	t.Log("\n" + table)
	if *roundTripsOut != "" {
		if err := os.WriteFile(*roundTripsOut, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if *roundTripsJSON != "" {
		b, err := json.MarshalIndent(roundTripFigures(rows), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*roundTripsJSON, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// recordBudget is the most bytes the record of a first charge may take
// (pkg/idem/dynamostore's doc, "Record layout", lists what they hold). The
// caller the audit trail names is in it: a typical one stays under 1 KB,
// one write unit.
const recordBudget = 1024

// byteCounter counts the bytes written to it.
type byteCounter struct{ n atomic.Int64 }

func (c *byteCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// roundTripFile is the JSON form of TestRoundTrips' figures (make bench:
// out/roundtrips.json), which cmd/capacity reads. Outcomes are
// named by a stable id: first, replay, replay-cached, in-flight, mismatch,
// decline, released, unknown, reconcile, naive.
type roundTripFile struct {
	// Index names the global secondary index whose writes index_wcu
	// counts (on the idempotency table).
	Index    string             `json:"index"`
	Outcomes []roundTripOutcome `json:"outcomes"`
}

type roundTripOutcome struct {
	ID      string         `json:"id"`
	Outcome string         `json:"outcome"`
	Answer  string         `json:"answer"`
	Calls   map[string]int `json:"calls"`
	tableFigures
	// Tables splits the figures by table: idempotency, charges.
	Tables map[string]tableFigures `json:"tables"`
	// LogBytes is what the charge function logged (absent for the
	// reconciler and the naive handler, whose logs are not captured).
	LogBytes int64 `json:"log_bytes,omitempty"`
}

type tableFigures struct {
	Written          int `json:"written"`
	WCU              int `json:"wcu"`
	IndexWCU         int `json:"index_wcu"`
	RCU              int `json:"rcu"`
	LargestItemBytes int `json:"largest_item_bytes"`
}

func figuresOf(u use) tableFigures {
	return tableFigures{Written: u.Written, WCU: u.WCU, IndexWCU: u.IndexWC, RCU: u.RCU, LargestItemBytes: u.MaxItemBytes}
}

func roundTripFigures(rows []roundTrip) roundTripFile {
	f := roundTripFile{Index: dynamostore.IndexStuckLeases}
	for _, r := range rows {
		o := roundTripOutcome{
			ID: r.id, Outcome: r.outcome, Answer: r.status, Calls: r.calls,
			tableFigures: figuresOf(r.used.use), Tables: map[string]tableFigures{}, LogBytes: r.logBytes,
		}
		for role, u := range r.used.Tables {
			o.Tables[role] = figuresOf(u)
		}
		f.Outcomes = append(f.Outcomes, o)
	}
	return f
}

func answer(resp events.APIGatewayV2HTTPResponse) string {
	a := strconv.Itoa(resp.StatusCode)
	if resp.Headers[httpapi.HeaderReplayed] == "true" {
		a += " (replayed)"
	}
	return a
}

// callOrder lists operations in the order the charge path makes them.
var callOrder = []string{"GetItem", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "Query"}

func roundTripTable(rows []roundTrip) string {
	var b strings.Builder
	b.WriteString("| outcome | answer | DynamoDB calls | items written | WCU | index WCU | RCU | largest item |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ops := slices.SortedFunc(maps.Keys(r.calls), func(a, b string) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b))
		})
		total := 0
		var names []string
		for _, op := range ops {
			total += r.calls[op]
			name := op
			if r.calls[op] > 1 {
				name = fmt.Sprintf("%d× %s", r.calls[op], op)
			}
			names = append(names, name)
		}
		calls, largest := "0", "–"
		if total > 0 {
			calls, largest = fmt.Sprintf("%d: %s", total, strings.Join(names, " + ")), fmt.Sprintf("%d B", r.used.MaxItemBytes)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %s |\n",
			r.outcome, r.status, calls, r.used.Written, r.used.WCU, r.used.IndexWC, r.used.RCU, largest)
	}
	return b.String()
}

func rank(op string) int {
	if i := slices.Index(callOrder, op); i >= 0 {
		return i
	}
	return len(callOrder)
}
