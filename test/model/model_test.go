package model_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestChargePathModel runs random histories against the real charge path
// and checks, after each, that retries never charged twice and that every
// client saw a consistent story. One set of tables, queue and simulator
// serves every history; each history uses fresh tenants, so histories never
// share a scoped key.
func TestChargePathModel(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int64
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		r := &history{env: e, id: runs.Add(1), keys: map[idem.Key]*keyState{}}
		defer r.reset()
		r.tenants = []string{r.tenant("a"), r.tenant("b")}
		actions := map[string]func(*rapid.T){
			"request":            r.request,
			"concurrent":         r.concurrent,
			"crashAfterClaim":    r.crashAfterClaim,
			"crashAfterProvider": r.crashAfterProvider,
			"crashAfterCommit":   r.request, // the client never reads the response
			"advanceClock":       r.advanceClock,
			"providerDown":       r.providerDown,
			"dynamoFaults":       r.dynamoFaults,
			"sweep":              r.sweep,
			"reconcile":          r.reconcile,
		}
		names := slices.Sorted(maps.Keys(actions))
		for range rapid.IntRange(1, maxSteps).Draw(rt, "steps") {
			actions[rapid.SampledFrom(names).Draw(rt, "action")](rt)
			r.checkInvariantsSoFar(rt)
		}
		r.settle(rt)
		r.checkFinal(rt)
		r.removeItems()
	})
	t.Logf("%d histories in %s; %d DynamoDB faults injected", runs.Load(), time.Since(start).Round(time.Millisecond), e.faults.injected.Load())
}

// env is the charge path as deployed, in-process.
type env struct {
	handler *charge.Handler
	recon   *charge.Service // what the reconcile function runs per message
	store   *idem.Store     // the same table, for crashes and for checks
	sim     *providersim.Simulator
	prov    *provider.Client // a crashed charge function's provider calls
	clock   *testkit.Clock
	faults  *faultyTransport
	// db (without faults) and d let a history remove what it stored.
	db *dynamodb.Client
	d  *testkit.Deployment
}

const (
	maxSteps     = 10               // per history: short histories keep 200 of them under a minute
	leaseExpiry  = 31 * time.Second // past the store's default 30s lease
	inflightWait = 100 * time.Millisecond
)

func newEnv(t *testing.T) *env {
	t.Helper()
	faults := &faultyTransport{base: http.DefaultTransport}
	clients := testkit.Clients(t, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: faults}
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxBackoff = 20 * time.Millisecond // keep the SDK's retries, not its pauses
			so.RateLimiter = ratelimit.None
		})
	})
	d := testkit.Deploy(t, providersim.WithSlowDelay(50*time.Millisecond))
	clock := testkit.NewClock(time.Now())
	deps := app.Deps{
		Clients: clients, Clock: clock.Now, Logger: slog.New(slog.DiscardHandler),
		ProviderOptions: []provider.Option{provider.WithTimeout(5 * time.Second)},
	}
	chargeCfg := d.Charge()
	chargeCfg.InflightWait = inflightWait
	h, err := app.ChargeHandler(chargeCfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	recon, err := app.ReconcileService(d.Reconcile(), deps)
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(clients.DynamoDB, d.IdempotencyTable, func(o *idem.Options) {
		o.Clock, o.Retention = clock.Now, 24*time.Hour
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		handler: h, recon: recon, store: store, sim: d.Sim, clock: clock, faults: faults,
		db: testkit.Clients(t).DynamoDB, d: d,
		prov: provider.NewClient(d.ProviderURL, "", provider.WithTimeout(5*time.Second)),
	}
}

// faultyTransport answers a share of DynamoDB requests itself with a
// throttling or internal-server error, shaped as DynamoDB sends them,
// without forwarding the request: nothing happened on the table.
type faultyTransport struct {
	base     http.RoundTripper
	perMille atomic.Int64
	injected atomic.Int64
}

func (f *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if rand.Int64N(1000) >= f.perMille.Load() {
		return f.base.RoundTrip(req)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	f.injected.Add(1)
	status, kind := http.StatusBadRequest, "ThrottlingException"
	if rand.IntN(2) == 0 {
		status, kind = http.StatusInternalServerError, "InternalServerError"
	}
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#` + kind + `","message":"injected by the model test"}`
	return &http.Response{
		Status:     strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode: status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":     {"application/x-amz-json-1.0"},
			"X-Amzn-Errortype": {kind},
			"X-Amzn-Requestid": {"injected"},
			"Content-Length":   {strconv.Itoa(len(body))},
			"X-Amz-Crc32":      {strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10)},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// history is the model of one random run: what every client was told.
type history struct {
	env     *env
	id      int64
	tenants []string
	keys    map[idem.Key]*keyState
	faulty  bool // DynamoDB faults are being injected
	down    bool // the provider is down
}

// keyState is what the clients of one tenant-scoped key have seen.
type keyState struct {
	key      idem.Key
	body     body
	terminal *seen // the first 201 or 402, nil until one is seen
	firsts   int   // 201/402 responses that were not replays
}

type seen struct {
	status int
	body   string
	fp     idem.Fingerprint
	req    body // a request body that gets this replay
}

type body struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Source      string `json:"source"`
	Description string `json:"description,omitempty"`
}

func (b body) compact() string {
	out, _ := json.Marshal(b)
	return string(out)
}

// spaced writes the same document with the keys reversed and whitespace.
func (b body) spaced() string {
	q := func(s string) string { out, _ := json.Marshal(s); return string(out) }
	s := "{\n  \"source\" : " + q(b.Source) + ",\n  \"currency\":" + q(b.Currency)
	if b.Description != "" {
		s += ",\t\"description\" : " + q(b.Description)
	}
	return s + ",\n  \"amount\" : " + strconv.FormatInt(b.Amount, 10) + "\n}\n"
}

func (b body) fingerprint() idem.Fingerprint {
	fp, _ := idem.FingerprintJSON([]byte(b.compact()))
	return fp
}

var (
	sources = []string{
		providersim.SourceVisa, providersim.SourceVisa, providersim.SourceDecline,
		providersim.SourceUnavailableOnce, providersim.SourceTimeoutOnce, providersim.SourceSlow,
	}
	clientKeys   = []string{"order-1", "order-2", "order-3"} // shared by the tenants
	descriptions = []string{"", "order 42", "café <b>&</b>"}
)

func (r *history) tenant(name string) string { return fmt.Sprintf("m%d-%s", r.id, name) }

// reset leaves the shared environment healthy for the next history, also
// when this one failed.
func (r *history) reset() {
	r.env.faults.perMille.Store(0)
	r.env.sim.SetDown(false)
}

// removeItems deletes the history's records and charge rows once it has
// been checked. Histories never share keys, so this changes no outcome; it
// keeps the tables small, which matters on moto, whose transactions copy
// every table they touch.
func (r *history) removeItems() {
	ctx := context.Background()
	for k := range r.keys {
		_, _ = r.env.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(r.env.d.IdempotencyTable),
			Key:       map[string]types.AttributeValue{idem.AttrPK: &types.AttributeValueMemberS{Value: k.String()}},
		})
		_, _ = r.env.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(r.env.d.ChargesTable),
			Key: map[string]types.AttributeValue{
				charge.AttrTenant: &types.AttributeValueMemberS{Value: k.Tenant()},
				charge.AttrID:     &types.AttributeValueMemberS{Value: charge.ChargeID(k)},
			},
		})
	}
}

// pick draws a scoped key of this history, creating its state (and its
// request body) on first use.
func (r *history) pick(rt *rapid.T) *keyState {
	tenant := rapid.SampledFrom(r.tenants).Draw(rt, "tenant")
	key, err := idem.NewKey(tenant, charge.Operation, rapid.SampledFrom(clientKeys).Draw(rt, "clientKey"))
	if err != nil {
		rt.Fatal(err)
	}
	if ks, ok := r.keys[key]; ok {
		return ks
	}
	ks := &keyState{key: key, body: body{
		Amount:      int64(rapid.IntRange(charge.MinAmount, 100_000).Draw(rt, "amount")),
		Currency:    rapid.SampledFrom([]string{"EUR", "USD", "JPY"}).Draw(rt, "currency"),
		Source:      rapid.SampledFrom(sources).Draw(rt, "source"),
		Description: rapid.SampledFrom(descriptions).Draw(rt, "description"),
	}}
	r.keys[key] = ks
	return ks
}

// variant draws the body a client sends: usually its key's own body, in
// either layout, sometimes with a changed amount.
func variant(rt *rapid.T, ks *keyState) (body, string) {
	b := ks.body
	if rapid.IntRange(0, 4).Draw(rt, "changedBody") == 0 {
		b.Amount++
	}
	if rapid.Bool().Draw(rt, "spaced") {
		return b, b.spaced()
	}
	return b, b.compact()
}

func postEvent(tenant, key, payload string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RouteKey: charge.RouteCreate, RawPath: "/charges", Body: payload,
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": key},
	}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.HTTP.Path = "/charges"
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"tenant_id": tenant}},
	}
	return req
}

func getEvent(tenant, id string) events.APIGatewayV2HTTPRequest {
	req := postEvent(tenant, "", "")
	req.RouteKey, req.RawPath, req.Body = charge.RouteGet, "/charges/"+id, ""
	req.Headers = map[string]string{}
	req.PathParameters = map[string]string{"id": id}
	req.RequestContext.HTTP.Method, req.RequestContext.HTTP.Path = http.MethodGet, req.RawPath
	return req
}

func (r *history) send(ks *keyState, payload string) (events.APIGatewayV2HTTPResponse, error) {
	return r.env.handler.Handle(context.Background(), postEvent(ks.key.Tenant(), ks.key.ClientKey(), payload))
}

func (r *history) request(rt *rapid.T) {
	ks := r.pick(rt)
	b, payload := variant(rt, ks)
	resp, err := r.send(ks, payload)
	r.observe(rt, ks, b, resp, err)
}

// concurrent sends the same request 2 to 4 times at once, as a client
// that retries without waiting, or several of its instances, would.
func (r *history) concurrent(rt *rapid.T) {
	ks := r.pick(rt)
	b, _ := variant(rt, ks)
	n := rapid.IntRange(2, 4).Draw(rt, "duplicates")
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = b.compact()
		if rapid.Bool().Draw(rt, "spaced") {
			payloads[i] = b.spaced()
		}
	}
	resps := make([]events.APIGatewayV2HTTPResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-release
			resps[i], errs[i] = r.send(ks, payloads[i])
		})
	}
	close(release)
	wg.Wait()
	// The first final answer came before any replay of it; an answer that
	// is not final (409, 503) may have been given before either, so it is
	// judged by what was known before the duplicates were sent.
	slices.SortStableFunc(resps, func(a, b events.APIGatewayV2HTTPResponse) int {
		return cmp.Compare(a.Headers[charge.HeaderReplayed], b.Headers[charge.HeaderReplayed])
	})
	before, err := ks.terminal, errors.Join(errs...)
	for _, resp := range resps {
		if isFinal(resp.StatusCode) {
			r.observe(rt, ks, b, resp, err)
			continue
		}
		after := ks.terminal
		ks.terminal = before
		r.observe(rt, ks, b, resp, err)
		ks.terminal = after
	}
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
	status, replayed := resp.StatusCode, resp.Headers[charge.HeaderReplayed] == "true"
	switch status {
	case http.StatusCreated, http.StatusPaymentRequired, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable:
	case http.StatusInternalServerError:
		if !r.faulty {
			rt.Fatalf("%s: 500 without DynamoDB faults: %s", ks.key, resp.Body)
		}
		return
	default:
		rt.Fatalf("%s: unexpected %d %s", ks.key, status, resp.Body)
	}
	if status == http.StatusCreated {
		var c struct{ ID string }
		if err := json.Unmarshal([]byte(resp.Body), &c); err != nil || c.ID != charge.ChargeID(ks.key) {
			rt.Fatalf("%s: 201 carries charge %q, want %q (this tenant's): %s", ks.key, c.ID, charge.ChargeID(ks.key), resp.Body)
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

// claim is what a charge function does before calling the provider.
func (r *history) claim(rt *rapid.T) (*keyState, body, *idem.Lease) {
	ks := r.pick(rt)
	b, _ := variant(rt, ks)
	intent, _ := json.Marshal(struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Description string `json:"description,omitempty"`
	}{b.Amount, b.Currency, b.Description})
	begun, err := r.env.store.Begin(context.Background(), ks.key, b.fingerprint(), intent)
	if err != nil || begun.Lease == nil {
		return ks, b, nil // in flight, replay, mismatch or a fault: nothing claimed
	}
	return ks, b, begun.Lease
}

// crashAfterClaim is a charge function that dies right after its claim.
func (r *history) crashAfterClaim(rt *rapid.T) { r.claim(rt) }

// crashAfterProvider is a charge function that dies after the provider
// charged (or declined) but before it recorded the outcome.
func (r *history) crashAfterProvider(rt *rapid.T) {
	ks, b, lease := r.claim(rt)
	if lease == nil {
		return
	}
	_, _ = r.env.prov.Charge(context.Background(), provider.ChargeRequest{
		Reference: charge.ProviderReference(ks.key), Amount: b.Amount, Currency: b.Currency, Source: b.Source,
	})
}

func (r *history) advanceClock(rt *rapid.T) {
	r.env.clock.Advance(rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, leaseExpiry, 2 * time.Minute}).Draw(rt, "advance"))
}

func (r *history) providerDown(rt *rapid.T) {
	r.down = rapid.Bool().Draw(rt, "down")
	r.env.sim.SetDown(r.down)
}

func (r *history) dynamoFaults(rt *rapid.T) {
	pm := rapid.SampledFrom([]int64{0, 50, 200}).Draw(rt, "faultsPerMille")
	r.faulty = pm > 0
	r.env.faults.perMille.Store(pm)
}

// sweep finds this history's stuck leases as the sweeper does and delivers
// each to the reconciler, sometimes twice (SQS delivers at least once).
func (r *history) sweep(rt *rapid.T) {
	keys, err := r.stuck()
	if err != nil {
		r.allowed(rt, err)
		return
	}
	for _, k := range keys {
		r.deliver(rt, k, rapid.IntRange(1, 2).Draw(rt, "deliveries"))
	}
}

func (r *history) stuck() ([]idem.Key, error) {
	var keys []idem.Key
	for shard := range r.env.store.Shards() {
		for sl, err := range r.env.store.StuckLeases(context.Background(), shard, r.env.clock.Now()) {
			if err != nil {
				return nil, err
			}
			if _, ours := r.keys[sl.Key]; ours {
				keys = append(keys, sl.Key)
			}
		}
	}
	return keys, nil
}

// reconcile delivers a reconcile message for one key, possibly duplicated
// and concurrently, as the reconcile function would process it.
func (r *history) reconcile(rt *rapid.T) {
	r.deliver(rt, r.pick(rt).key, rapid.IntRange(1, 3).Draw(rt, "deliveries"))
}

func (r *history) deliver(rt *rapid.T, key idem.Key, n int) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = r.env.recon.Reconcile(context.Background(), key) })
	}
	wg.Wait()
	for _, err := range errs {
		r.allowed(rt, err)
	}
}

// allowed fails on an error that neither a DynamoDB fault nor a provider
// outage explains.
func (r *history) allowed(rt *rapid.T, err error) {
	rt.Helper()
	if err != nil && !r.faulty && !r.down {
		rt.Fatalf("error with DynamoDB and the provider healthy: %v", err)
	}
}

// checkInvariantsSoFar runs between steps: nothing the provider charged
// may be charged again, whatever the state of the records.
func (r *history) checkInvariantsSoFar(rt *rapid.T) {
	ledger := r.env.sim.Ledger()
	for k := range r.keys {
		if e := ledger.References[charge.ProviderReference(k)]; e.Charges > 1 {
			rt.Fatalf("%s: charged %d times", k, e.Charges)
		}
	}
}

// settle is the end of every history: faults stop, the provider recovers,
// every lease runs out, and the sweeper and reconciler run to completion,
// each message delivered twice.
func (r *history) settle(rt *rapid.T) {
	r.reset()
	r.faulty, r.down = false, false
	r.env.clock.Advance(leaseExpiry)
	keys, err := r.stuck()
	if err != nil {
		rt.Fatal(err)
	}
	for k := range r.keys {
		keys = append(keys, k) // the messages the charge function queued
	}
	for _, k := range keys {
		r.deliver(rt, k, 2)
	}
}

func (r *history) checkFinal(rt *rapid.T) {
	ctx := context.Background()
	ledger := r.env.sim.Ledger()
	var charged, rows, succeeded int
	for k, ks := range r.keys {
		entry := ledger.References[charge.ProviderReference(k)]
		if entry.Charges > 1 {
			rt.Fatalf("%s: charged %d times", k, entry.Charges)
		}
		if entry.Status == provider.StatusCharged {
			charged++
		}
		id := charge.ChargeID(k)
		row, err := r.env.handler.Handle(ctx, getEvent(k.Tenant(), id))
		if err != nil {
			rt.Fatal(err)
		}
		if row.StatusCode == http.StatusOK {
			rows++
		}
		for _, other := range r.tenants {
			if other == k.Tenant() {
				continue
			}
			if resp, _ := r.env.handler.Handle(ctx, getEvent(other, id)); resp.StatusCode != http.StatusNotFound {
				rt.Fatalf("%s: tenant %s reads the charge with %d %s", k, other, resp.StatusCode, resp.Body)
			}
		}
		rec, err := r.env.store.Get(ctx, k)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			if entry.Status != "" && entry.Status != provider.StatusNotFound || ks.terminal != nil || row.StatusCode != http.StatusNotFound {
				rt.Fatalf("%s: no record, but provider says %q, the row answers %d, a client saw %v", k, entry.Status, row.StatusCode, ks.terminal)
			}
			continue
		case err != nil:
			rt.Fatal(err)
		}
		switch rec.Status {
		case idem.StatusSucceeded:
			succeeded++
			if entry.Status != provider.StatusCharged || row.StatusCode != http.StatusOK {
				rt.Fatalf("%s: SUCCEEDED, but provider says %q and the row answers %d", k, entry.Status, row.StatusCode)
			}
		case idem.StatusFailedPermanent:
			if entry.Status != provider.StatusDeclined || row.StatusCode != http.StatusNotFound {
				rt.Fatalf("%s: FAILED_PERMANENT, but provider says %q and the row answers %d", k, entry.Status, row.StatusCode)
			}
		default:
			rt.Fatalf("%s: left %s after the final sweep and reconcile", k, rec.Status)
		}
		if t := ks.terminal; t != nil {
			if rec.Response.Status != t.status || string(rec.Response.Body) != t.body {
				rt.Fatalf("%s: stored %d %s, clients saw %d %s", k, rec.Response.Status, rec.Response.Body, t.status, t.body)
			}
			resp, err := r.send(ks, t.req.spaced())
			r.observe(rt, ks, t.req, resp, err)
		}
	}
	if charged != rows || rows != succeeded {
		rt.Fatalf("provider charges %d, charge rows %d, SUCCEEDED records %d", charged, rows, succeeded)
	}
}
