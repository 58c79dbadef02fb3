package model_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/provider/stripe"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// TestChargePathModel runs random histories against the real charge path
// and checks, after each, that retries never charged twice and that every
// client saw a consistent story. One set of tables, queue and simulator
// serves every history; each history uses fresh tenants, so histories never
// share a scoped key.
func TestChargePathModel(t *testing.T) { runModel(t, newEnv(t)) }

// TestChargePathModelStripe runs the same model with PROVIDER=stripe, on
// the stateful Stripe simulator: the reconciler looks charges up by
// replaying their requests, rolls forward those that never arrived, and
// parks a command past Stripe's key window that Stripe has no charge for.
func TestChargePathModelStripe(t *testing.T) { runModel(t, newStripeEnv(t)) }

func runModel(t *testing.T, e *env) {
	var runs atomic.Int64
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		r := &history{env: e, id: runs.Add(1), keys: map[idem.Key]*keyState{}, touched: map[idem.Key]bool{}}
		defer r.reset()
		r.tenants = []string{r.tenant("a"), r.tenant("b")}
		actions := map[string]func(*rapid.T){
			"request":            r.request,
			"concurrent":         r.concurrent,
			"crashAfterClaim":    r.crashAfterClaim,
			"crashAfterProvider": r.crashAfterProvider,
			"crashAfterCommit":   r.request, // the client never reads the response
			"advanceClock":       r.advanceClock,
			"retentionPasses":    r.retentionPasses,
			"providerLands":      r.providerLands,
			"providerDown":       r.providerDown,
			"dynamoFaults":       r.dynamoFaults,
			"sweep":              r.sweep,
			"reconcile":          r.reconcile,
			"staleOwner":         r.staleOwner,
			"connectionDrops":    r.connectionDrops,
			"claimAnswerLost":    r.claimAnswerLost,
			"dedupWindowNears":   r.dedupWindowNears,
			"atTheExpirySecond":  r.atTheExpirySecond,
		}
		// Crashed owners coming back late are drawn twice as often.
		names := append(slices.Sorted(maps.Keys(actions)), "staleOwner")
		for range rapid.IntRange(1, maxSteps).Draw(rt, "steps") {
			actions[rapid.SampledFrom(names).Draw(rt, "action")](rt)
			r.checkInvariantsSoFar(rt)
		}
		r.settle(rt)
		r.checkFinal(rt)
		r.removeItems(rt)
	})
	t.Logf("%d histories in %s; %d DynamoDB requests refused and %d answers lost; %d stale-owner writes refused; %d commands parked; "+
		"%d provider connections dropped after executing, %d claims landed unanswered, %d clients told nothing was charged",
		runs.Load(), time.Since(start).Round(time.Millisecond), e.faults.refused.Load(), e.faults.lost.Load(), e.staleRefused.Load(), e.parked.Load(),
		e.drop.dropped.Load(), e.faults.claim.Lost(), e.toldNothing.Load())
}

// env is the charge path as deployed, in-process.
type env struct {
	handler *httpapi.Handler
	recon   *charge.Service    // what the reconcile function runs per message
	store   *dynamostore.Store // the same table, for crashes, with the faults
	reader  *dynamostore.Store // the same table, without faults, for checks
	sim     backend
	prov    charger // a crashed charge function's provider calls
	// sources are the card sources clients draw; keepsSource: the intent
	// keeps the source (a provider that replays, as the charge path
	// stores it).
	sources     []string
	keepsSource bool
	// settleWindow and dedupWindow are the provider's guarantees.
	settleWindow, dedupWindow time.Duration
	clock                     *testkit.Clock
	faults                    *faultyTransport
	// db (without faults) and d let a history read and remove what it
	// stored.
	db *dynamodb.Client
	d  *testkit.Deployment
	// archive reads the same table as of the epoch, so a record past its
	// retention still reads: its last state, for the checks.
	archive *dynamostore.Store
	// drop is the charge function's connection to the provider, which a
	// history can break after the provider executed a charge.
	drop *connDrop
	// staleRefused counts the writes of stale lease holders refused;
	// parked the commands left parked at the end of a history;
	// toldNothing the answers that said nothing was charged.
	staleRefused, parked, toldNothing atomic.Int64
}

const (
	maxSteps     = 12               // per history: short histories keep 1,000 of them to a few minutes
	leaseExpiry  = 31 * time.Second // past the store's default 30s lease
	inflightWait = 100 * time.Millisecond
	retention    = 24 * time.Hour
	// simSettleWindow is the simulated provider's: a charge it accepted
	// lands within it (the history lands pending charges before the clock
	// passes it), so "not found" after it is the truth.
	simSettleWindow     = 2 * time.Minute
	retryBase, retryCap = time.Minute, 4 * time.Minute
)

// backend is the provider behind the charge path, as a history drives
// and reads it.
type backend interface {
	// Land lands the charges accepted but not landed yet.
	Land() int
	// SetDown starts or ends an outage of the whole provider.
	SetDown(down bool)
	// entries are what became of every reference sent.
	entries() map[string]entry
	// lateSends are the references sent again after the provider stopped
	// deduplicating them, less its margin; none may be.
	lateSends() []string
	// refused reports whether the provider refused a reconciler's replay
	// under reference outright (a 4xx about the request itself) since
	// forgetRefusal was last called for it.
	refused(reference string) bool
	forgetRefusal(reference string)
}

// entry is what became of one reference at the provider.
type entry struct {
	// results counts the outcomes stored for it (charges and declines):
	// more than one means it was executed twice.
	results int
	status  provider.Status
	amount  int64
	pending bool
}

// charger is how a crashed charge function called the provider.
type charger interface {
	Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error)
}

// simBackend is the provider simulator.
type simBackend struct{ *providersim.Simulator }

// lateSends: the simulator deduplicates for ever.
func (simBackend) lateSends() []string { return nil }

// refused: only the Stripe mode parks, so only it asks.
func (simBackend) refused(string) bool { return false }

func (simBackend) forgetRefusal(string) {}

func (b simBackend) entries() map[string]entry {
	out := map[string]entry{}
	for ref, e := range b.Ledger().References {
		out[ref] = entry{results: e.Charges, status: e.Status, amount: e.Amount, pending: e.Pending}
	}
	return out
}

// stripeBackend is the Stripe simulator; while it is down, every request
// answers 503 and executes nothing (to the adapter an ambiguous charge).
// It notes when each reference was first sent, every send of it after
// Stripe's key window less the adapter's margin, and the references whose
// requests Stripe refused outright.
type stripeBackend struct {
	sim   *stripesim.Simulator
	clock func() time.Time
	down  atomic.Bool

	mu        sync.Mutex
	firstSent map[string]time.Time
	late      []string
	refusals  map[string]bool
}

func (b *stripeBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ref string
	if r.Method == http.MethodPost {
		ref = b.noteSend(r)
	}
	if b.down.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"type":"api_error"}}`)
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	b.sim.ServeHTTP(rec, r)
	if c := rec.status; ref != "" && r.Header.Get(headerSender) == senderReconciler && (c == http.StatusBadRequest || c == http.StatusNotFound) {
		b.mu.Lock()
		b.refusals[ref] = true
		b.mu.Unlock()
	}
}

// noteSend notes a create request's reference, and returns it, leaving
// the body readable.
func (b *stripeBackend) noteSend(r *http.Request) string {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	form, _ := url.ParseQuery(string(body))
	ref := form.Get("metadata[" + stripe.MetadataReference + "]")
	if ref == "" {
		return ""
	}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	first, ok := b.firstSent[ref]
	switch {
	case !ok:
		b.firstSent[ref] = now
	case !now.Before(first.Add(stripe.DedupWindow - stripe.DedupMargin)):
		b.late = append(b.late, ref)
	}
	return ref
}

// headerSender marks the reconciler's requests to the provider.
const headerSender, senderReconciler = "X-Model-Sender", "reconciler"

// marked adds headerSender to every request.
type marked struct{ base http.RoundTripper }

func (m marked) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(headerSender, senderReconciler)
	return m.base.RoundTrip(req)
}

// statusRecorder notes the status a handler answers.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (b *stripeBackend) lateSends() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.late)
}

func (b *stripeBackend) refused(reference string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refusals[reference]
}

func (b *stripeBackend) forgetRefusal(reference string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.refusals, reference)
}

func (b *stripeBackend) Land() int         { return b.sim.Land() }
func (b *stripeBackend) SetDown(down bool) { b.down.Store(down) }

func (b *stripeBackend) entries() map[string]entry {
	out := map[string]entry{}
	for ref, e := range b.sim.Ledger() {
		x := entry{results: e.Succeeded + e.Declined, status: provider.StatusNotFound, amount: e.Amount, pending: e.Pending}
		switch {
		case e.Succeeded > 0:
			x.status = provider.StatusCharged
		case e.Declined > 0:
			x.status = provider.StatusDeclined
		}
		out[ref] = x
	}
	return out
}

// stripeTimeout bounds the Stripe adapter's calls in the model: a lost
// answer costs one.
const stripeTimeout = 500 * time.Millisecond

func newEnv(t *testing.T) *env {
	t.Helper()
	d := testkit.Deploy(t, providersim.WithSlowDelay(50*time.Millisecond))
	e := newEnvOn(t, d, testkit.NewClock(time.Now()), newConnDrop(t, d.Sim), func(w *testkit.Wiring) {
		w.Deps.ProviderOptions = []func(*provider.Options){provider.WithTimeout(5 * time.Second)}
		w.Reconcile.SettleWindow = simSettleWindow
	})
	e.sim, e.settleWindow = simBackend{d.Sim}, simSettleWindow
	e.prov = provider.NewClient(d.ProviderURL, "", provider.WithTimeout(5*time.Second))
	e.sources = []string{
		providersim.SourceVisa, providersim.SourceVisa, providersim.SourceDecline,
		providersim.SourceUnavailableOnce, providersim.SourceTimeoutOnce, providersim.SourceSlow,
		providersim.SourceLateOnce,
	}
	return e
}

// newStripeEnv is the charge path with PROVIDER=stripe on stripesim,
// whose search lags by stripe.SearchLag.
func newStripeEnv(t *testing.T) *env {
	t.Helper()
	d := testkit.Deploy(t)
	clock := testkit.NewClock(time.Now())
	b := &stripeBackend{clock: clock.Now, firstSent: map[string]time.Time{}, refusals: map[string]bool{}}
	var wire func(*testkit.Wiring)
	b.sim, wire = testkit.Stripe(t, clock.Now)
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	e := newEnvOn(t, d, clock, newConnDrop(t, b), wire, func(w *testkit.Wiring) {
		w.Charge.ProviderURL, w.Reconcile.ProviderURL = srv.URL, srv.URL
		w.Deps.StripeOptions = []func(*stripe.Options){func(o *stripe.Options) { o.Timeout = stripeTimeout }}
	})
	a, err := stripe.New(testkit.StripeSecret, func(o *stripe.Options) { o.BaseURL, o.Clock, o.Timeout = srv.URL, clock.Now, stripeTimeout })
	if err != nil {
		t.Fatal(err)
	}
	e.sim, e.prov, e.keepsSource = b, a, true
	g := a.Guarantees()
	e.settleWindow, e.dedupWindow = g.SettleWindow, g.DedupWindow
	// pmUnknown is well formed but unknown to Stripe, which refuses every
	// send of it outright (400 resource_missing).
	const pmUnknown = "pm_unknown_to_stripe"
	e.sources = []string{
		stripesim.PMVisa, stripesim.PMVisa, stripesim.PMDeclined, stripesim.PMRateLimited,
		stripesim.PMTimeout, stripesim.PMAPIError, stripesim.PMLate, pmUnknown,
	}
	return e
}

// newEnvOn builds the charge and reconcile functions on d, as wire says,
// on clock and a DynamoDB client that injects faults; the charge function
// reaches the provider through drop.
func newEnvOn(t *testing.T, d *testkit.Deployment, clock *testkit.Clock, drop *connDrop, wire ...func(*testkit.Wiring)) *env {
	t.Helper()
	faults := &faultyTransport{claim: &idemtest.LostClaim{}}
	clients := testkit.Clients(t, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: faults}
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxBackoff = 20 * time.Millisecond // keep the SDK's retries, not its pauses
			so.RateLimiter = ratelimit.None
		})
	})
	wire = append([]func(*testkit.Wiring){func(w *testkit.Wiring) {
		w.Deps.Clients, w.Deps.Clock = clients, clock.Now
		w.Charge.InflightWait, w.Charge.Retention = inflightWait, retention
		w.Reconcile.Retention, w.Reconcile.RetryBase, w.Reconcile.RetryCap = retention, retryBase, retryCap
	}}, wire...)
	recon := d.ReconcileService(t, append(wire, func(w *testkit.Wiring) {
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) {
			o.HTTPClient = &http.Client{Transport: marked{http.DefaultTransport}}
		})
	})...)
	h := d.ChargeHandler(t, append(wire, func(w *testkit.Wiring) {
		w.Charge.ProviderURL = drop.url
		w.Deps.ProviderOptions = append(w.Deps.ProviderOptions, provider.WithHTTPClient(drop.client))
		w.Deps.StripeOptions = append(w.Deps.StripeOptions, func(o *stripe.Options) { o.HTTPClient = drop.client })
	})...)
	store, err := dynamostore.New(clients.DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) {
		o.Clock, o.Retention = clock.Now, retention
	})
	if err != nil {
		t.Fatal(err)
	}
	db := testkit.Clients(t).DynamoDB
	reader, err := dynamostore.New(db, d.IdempotencyTable, func(o *dynamostore.Options) {
		o.Clock, o.Retention = clock.Now, retention
	})
	if err != nil {
		t.Fatal(err)
	}
	archive, err := dynamostore.New(db, d.IdempotencyTable, func(o *dynamostore.Options) {
		o.Clock, o.Retention = func() time.Time { return time.Unix(1, 0) }, retention
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{handler: h, recon: recon, store: store, reader: reader, archive: archive, clock: clock, faults: faults, db: db, d: d, drop: drop}
}

// connDrop is the charge function's way to the provider: a server in
// front of it and a client whose dials it controls. Armed, the server
// lets the provider execute the next charge, then drops the connection
// without an answer, and every dial fails: Go's transport re-sends a
// request with an Idempotency-Key on a new connection when a kept-alive one
// drops after the request was written, and that re-send fails to dial.
type connDrop struct {
	h             http.Handler
	url           string
	client        *http.Client
	armed, noDial atomic.Bool
	dropped       atomic.Int64
}

func newConnDrop(t *testing.T, provider http.Handler) *connDrop {
	t.Helper()
	c := &connDrop{h: provider}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	c.url = srv.URL
	c.client = &http.Client{Transport: &http.Transport{DialContext: c.dial}}
	return c
}

func (c *connDrop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodPost || !c.armed.CompareAndSwap(true, false) {
		c.h.ServeHTTP(w, r)
		return
	}
	c.h.ServeHTTP(unanswered{w}, r) // executed; its answer goes nowhere
	c.dropped.Add(1)
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

func (c *connDrop) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.noDial.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused (injected)")}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// warm leaves a kept-alive connection in the client's pool, for the next
// request to reuse.
func (c *connDrop) warm() error {
	resp, err := c.client.Get(c.url + "/warm")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// unanswered throws a handler's answer away; Unwrap lets a handler that
// hangs up hijack the connection itself.
type unanswered struct{ w http.ResponseWriter }

func (u unanswered) Header() http.Header         { return http.Header{} }
func (u unanswered) Write(b []byte) (int, error) { return len(b), nil }
func (u unanswered) WriteHeader(int)             {}
func (u unanswered) Unwrap() http.ResponseWriter { return u.w }

// faultyTransport makes a share of DynamoDB requests fail, shaped as
// DynamoDB's throttling or internal-server errors. A refused request is
// answered without being forwarded: nothing happened on the table. A lost
// answer is forwarded and applied, and its answer thrown away (a server
// error, as DynamoDB's answer to a write it applied can never be
// throttling): the SDK retries a write that already happened. What it
// forwards goes through claim, which can lose a claim's answer and refuse
// every retry (idemtest.LostClaim).
type faultyTransport struct {
	claim         *idemtest.LostClaim
	refuse, lose  atomic.Int64 // per mille
	refused, lost atomic.Int64
}

func (f *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch n := rand.Int64N(1000); {
	case n < f.refuse.Load():
		if req.Body != nil {
			_ = req.Body.Close()
		}
		f.refused.Add(1)
		return fault(req), nil
	case n < f.refuse.Load()+f.lose.Load():
		resp, err := f.claim.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		f.lost.Add(1)
		return idemtest.DynamoDBFault(req, "InternalServerError"), nil
	default:
		return f.claim.RoundTrip(req)
	}
}

// fault is a refusal: throttling (provably unprocessed) or a server error.
func fault(req *http.Request) *http.Response {
	if rand.IntN(2) == 0 {
		return idemtest.DynamoDBFault(req, "InternalServerError")
	}
	return idemtest.DynamoDBFault(req, "ThrottlingException")
}

// history is the model of one random run: what every client was told,
// and what the store and the provider did.
type history struct {
	env     *env
	id      int64
	tenants []string
	keys    map[idem.Key]*keyState
	faulty  bool // DynamoDB faults are being injected
	down    bool // the provider is down
	// zombies are the leases of charge functions that crashed: each may
	// come back and write late.
	zombies []*idem.Lease
	// touched are the keys a step may have changed, whose records note
	// reads after it: a record changes only when a step acts on its key.
	touched map[idem.Key]bool
	// pendingSince is when the oldest charge the provider accepted but has
	// not landed was sent (zero if none): it must land within the settle
	// window, so the clock never passes pendingSince+settleWindow first.
	pendingSince time.Time
}

// keyState is what the clients of one tenant-scoped key have seen, and
// every command (generation) the key has named.
type keyState struct {
	key      idem.Key
	body     body
	terminal *seen // the first 201 or 402 of the current intent, nil until one is seen
	firsts   int   // 201/402 responses of the current intent that were not replays
	// gens are the key's commands by their record's creation, with the
	// last state each was seen in: a command's record is replaced only
	// once settled and past retention, so its last state is its final one.
	gens map[time.Time]*idem.Record
	// told is the provider reference of the command whose client was last
	// told "nothing was charged", until the client sends again: the
	// provider must never charge it.
	told string
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
	clientKeys   = []string{"order-1", "order-2", "order-3"} // shared by the tenants
	descriptions = []string{"", "order 42", "café <b>&</b>"}
)

func (r *history) tenant(name string) string { return fmt.Sprintf("m%d-%s", r.id, name) }

// reset leaves the shared environment healthy for the next history, also
// when this one failed.
func (r *history) reset() {
	r.env.faults.refuse.Store(0)
	r.env.faults.lose.Store(0)
	r.env.sim.SetDown(false)
	r.env.sim.Land()
}

// removeItems deletes the history's records and charge rows once it has
// been checked. Histories never share keys, so this changes no outcome; it
// keeps the tables small, which matters on moto, whose query of the
// stuck-lease index reads the whole table.
func (r *history) removeItems(rt *rapid.T) {
	ctx := context.Background()
	for k := range r.keys {
		_, _ = r.env.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(r.env.d.IdempotencyTable),
			Key:       map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: k.String()}},
		})
	}
	for _, tenant := range r.tenants {
		for _, row := range r.rows(rt, tenant) {
			_, _ = r.env.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName: aws.String(r.env.d.ChargesTable),
				Key: map[string]types.AttributeValue{
					charge.AttrTenant: &types.AttributeValueMemberS{Value: tenant},
					charge.AttrID:     &types.AttributeValueMemberS{Value: row.ID},
				},
			})
		}
	}
}

// row is a charge row as the model reads it.
type row struct {
	ID, ProviderReference string
	Amount                int64
}

// rows reads every charge row of tenant.
func (r *history) rows(rt *rapid.T, tenant string) []row {
	rt.Helper()
	p := dynamodb.NewQueryPaginator(r.env.db, &dynamodb.QueryInput{
		TableName:                 aws.String(r.env.d.ChargesTable),
		KeyConditionExpression:    aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": charge.AttrTenant},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: tenant}},
		ConsistentRead:            aws.Bool(true),
	})
	var out []row
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			rt.Fatal(err)
		}
		for _, item := range page.Items {
			var w row
			if v, ok := item[charge.AttrID].(*types.AttributeValueMemberS); ok {
				w.ID = v.Value
			}
			if v, ok := item["provider_reference"].(*types.AttributeValueMemberS); ok {
				w.ProviderReference = v.Value
			}
			if v, ok := item["amount"].(*types.AttributeValueMemberN); ok {
				w.Amount, _ = strconv.ParseInt(v.Value, 10, 64)
			}
			out = append(out, w)
		}
	}
	return out
}

// sortedKeys are the history's keys in a fixed order, so that a history
// replays the same steps from the same seed.
func (r *history) sortedKeys() []idem.Key {
	return slices.SortedFunc(maps.Keys(r.keys), func(a, b idem.Key) int { return cmp.Compare(a.String(), b.String()) })
}

// pick draws a scoped key of this history, creating its state (and its
// request body) on first use.
func (r *history) pick(rt *rapid.T) *keyState {
	tenant := rapid.SampledFrom(r.tenants).Draw(rt, "tenant")
	key, err := idem.NewKey(tenant, charge.Operation, rapid.SampledFrom(clientKeys).Draw(rt, "clientKey"))
	if err != nil {
		rt.Fatal(err)
	}
	r.touched[key] = true
	if ks, ok := r.keys[key]; ok {
		return ks
	}
	ks := &keyState{key: key, body: r.newBody(rt), gens: map[time.Time]*idem.Record{}}
	r.keys[key] = ks
	return ks
}

// newBody draws the request of a new intent.
func (r *history) newBody(rt *rapid.T) body {
	return body{
		Amount:      int64(rapid.IntRange(charge.MinAmount, 100_000).Draw(rt, "amount")),
		Currency:    rapid.SampledFrom([]string{"EUR", "USD", "JPY"}).Draw(rt, "currency"),
		Source:      rapid.SampledFrom(r.env.sources).Draw(rt, "source"),
		Description: rapid.SampledFrom(descriptions).Draw(rt, "description"),
	}
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

func (r *history) send(ks *keyState, payload string) (events.APIGatewayV2HTTPResponse, error) {
	r.retried(ks)
	return r.env.handler.Handle(context.Background(), testkit.PostCharge(ks.key.Tenant(), ks.key.ClientKey(), payload))
}

// retried notes that a client sent ks's key again (its request may have
// crashed): it may charge the command it was told of, and a command that
// was released after a refusal may be claimed again and outlive its
// provider's window before the reconciler meets it.
func (r *history) retried(ks *keyState) {
	ks.told = ""
	for created := range ks.gens {
		r.env.sim.forgetRefusal(charge.ProviderReference(ks.key, created))
	}
}

func (r *history) request(rt *rapid.T) {
	ks := r.pick(rt)
	b, payload := variant(rt, ks)
	resp, err := r.send(ks, payload)
	r.observe(rt, ks, b, resp, err)
	r.noteNothingCharged(rt, ks, resp)
}

// nothingCharged are the problems that tell a client nothing was charged.
var nothingCharged = []string{
	httpapi.ProblemUnavailable.Slug, httpapi.ProblemServiceUnavailable.Slug, httpapi.ProblemProviderRejected.Slug,
}

// noteNothingCharged checks an answer of a request sent alone: one that
// says nothing was charged must be true now, and stay true until the
// client sends again. (Of duplicates sent at once, one may be told so
// while another charges.)
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
	ref := charge.ProviderReference(ks.key, rec.CreatedAt)
	if e := r.env.sim.entries()[ref]; e.status == provider.StatusCharged || e.pending {
		rt.Fatalf("%s: told %d %s, but the provider has %+v for its reference", ks.key, resp.StatusCode, resp.Body, e)
	}
	ks.told = ref
}

// connectionDrops is a charge whose connection to the provider drops
// after the provider executed it, and whose re-send on a new connection
// fails to dial.
func (r *history) connectionDrops(rt *rapid.T) {
	if err := r.env.drop.warm(); err != nil {
		rt.Fatal(err)
	}
	r.env.drop.armed.Store(true)
	r.env.drop.noDial.Store(true)
	defer r.env.drop.armed.Store(false)
	defer r.env.drop.noDial.Store(false)
	r.request(rt)
}

// claimAnswerLost is a request whose claim lands in DynamoDB while its
// answer is lost and the SDK's retries are all throttled.
func (r *history) claimAnswerLost(rt *rapid.T) {
	faulty := r.faulty
	r.faulty = true
	r.env.faults.claim.Arm()
	defer func() {
		r.env.faults.claim.Disarm()
		r.faulty = faulty
	}()
	r.request(rt)
}

// dedupWindowNears moves the clock to half an hour before the provider's
// dedup window ends (its margin is an hour), or before retention does for
// a provider that deduplicates for ever, after a request that may be
// released, and the client of every key still RELEASED then retries it. Keys whose records are gone by then name new
// intents.
func (r *history) dedupWindowNears(rt *rapid.T) {
	w := r.env.dedupWindow
	if w == 0 {
		w = retention
	}
	r.request(rt) // one that may be released
	// What the provider accepted lands within its settle window, before
	// the clock passes it.
	r.checkInvariantsSoFar(rt)
	r.advance(w - 30*time.Minute)
	r.forgetExpired(rt)
	for _, k := range r.sortedKeys() {
		if rec, err := r.env.reader.Get(context.Background(), k); err == nil && rec.Status == idem.StatusReleased {
			ks := r.keys[k]
			r.touched[k] = true
			resp, err := r.send(ks, ks.body.compact())
			r.observe(rt, ks, ks.body, resp, err)
			r.noteNothingCharged(rt, ks, resp)
		}
	}
}

// forgetExpired forgets what the clients of every key whose record has
// expired saw: the key names a new intent.
func (r *history) forgetExpired(rt *rapid.T) {
	for _, k := range r.sortedKeys() {
		if _, err := r.env.reader.Get(context.Background(), k); errors.Is(err, idem.ErrNotFound) {
			ks := r.keys[k]
			ks.terminal, ks.firsts = nil, 0
		} else if err != nil {
			rt.Fatal(err)
		}
	}
}

// atTheExpirySecond sends a request under a settled key at the instant
// its Idempotency-Expires names, or within that second: the key names a
// new intent then, so the answer is neither a replay nor a mismatch.
func (r *history) atTheExpirySecond(rt *rapid.T) {
	ks := r.pick(rt)
	rec, err := r.env.reader.Get(context.Background(), ks.key)
	if err != nil || rec.Status == idem.StatusInFlight || !rec.ExpiresAt.After(r.env.clock.Now()) {
		return
	}
	into := time.Duration(rapid.SampledFrom([]int{0, 1, 500, 999}).Draw(rt, "msIntoTheSecond")) * time.Millisecond
	r.advance(rec.ExpiresAt.Sub(r.env.clock.Now()) + into)
	r.forgetExpired(rt)
	if rapid.Bool().Draw(rt, "newRequest") {
		ks.body = r.newBody(rt)
	}
	b, payload := variant(rt, ks)
	resp, err := r.send(ks, payload)
	if resp.StatusCode == http.StatusUnprocessableEntity || resp.Headers[httpapi.HeaderReplayed] == "true" {
		rt.Fatalf("%s: %d (replayed=%s) %s at %s, %s after the key's expiry %s", ks.key, resp.StatusCode,
			resp.Headers[httpapi.HeaderReplayed], resp.Body, r.env.clock.Now(), into, rec.ExpiresAt)
	}
	r.observe(rt, ks, b, resp, err)
	r.noteNothingCharged(rt, ks, resp)
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
		return cmp.Compare(a.Headers[httpapi.HeaderReplayed], b.Headers[httpapi.HeaderReplayed])
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
	status, replayed := resp.StatusCode, resp.Headers[httpapi.HeaderReplayed] == "true"
	switch status {
	case http.StatusCreated, http.StatusPaymentRequired, http.StatusConflict, http.StatusUnprocessableEntity,
		http.StatusServiceUnavailable, http.StatusBadGateway:
	case http.StatusInternalServerError:
		if !r.faulty {
			rt.Fatalf("%s: 500 without DynamoDB faults: %s", ks.key, resp.Body)
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

// claim is what a charge function does before calling the provider.
func (r *history) claim(rt *rapid.T) (*keyState, body, *idem.Lease) {
	ks := r.pick(rt)
	b, _ := variant(rt, ks)
	kept := struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Description string `json:"description,omitempty"`
		Source      string `json:"source,omitempty"`
	}{Amount: b.Amount, Currency: b.Currency, Description: b.Description}
	if r.env.keepsSource {
		kept.Source = b.Source
	}
	intent, _ := json.Marshal(kept)
	r.retried(ks) // a request, if one that crashes
	begun, err := r.env.store.Begin(context.Background(), ks.key, b.fingerprint(), intent)
	if err != nil || begun.Lease == nil {
		return ks, b, nil // in flight, replay, mismatch or a fault: nothing claimed
	}
	r.zombies = append(r.zombies, begun.Lease)
	return ks, b, begun.Lease
}

// crashAfterClaim is a charge function that dies right after its claim.
func (r *history) crashAfterClaim(rt *rapid.T) { r.claim(rt) }

// crashAfterProvider is a charge function that dies after the provider
// charged (or declined, or accepted a charge that lands later) but before
// it recorded the outcome.
func (r *history) crashAfterProvider(rt *rapid.T) {
	ks, b, lease := r.claim(rt)
	if lease == nil {
		return
	}
	_, _ = r.env.prov.Charge(context.Background(), provider.ChargeRequest{
		Reference: charge.ProviderReference(ks.key, lease.CreatedAt), Amount: b.Amount, Currency: b.Currency, Source: b.Source,
	})
}

// advance moves the clock, first landing the provider's pending charges
// if the clock would pass their settle window: the provider lands what it
// accepted within it.
func (r *history) advance(d time.Duration) {
	if !r.pendingSince.IsZero() && r.env.clock.Now().Add(d).After(r.pendingSince.Add(r.env.settleWindow)) {
		r.env.sim.Land()
		r.pendingSince = time.Time{}
	}
	r.env.clock.Advance(d)
}

func (r *history) advanceClock(rt *rapid.T) {
	r.advance(rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, leaseExpiry, 2 * time.Minute, 5 * time.Minute, time.Hour}).Draw(rt, "advance"))
	r.forgetExpired(rt)
}

// retentionPasses moves the clock past every settled command's retention.
// A key whose command is settled may then name a new intent: its clients
// draw a new request. A command still IN_FLIGHT keeps its key.
func (r *history) retentionPasses(rt *rapid.T) {
	r.advance(retention + leaseExpiry + time.Minute)
	r.retentionPassed(rt, true)
}

// retentionPassed forgets what the clients of every settled command saw,
// now that its retention has passed; with draw, its clients may draw a new
// request.
func (r *history) retentionPassed(rt *rapid.T, draw bool) {
	for _, k := range r.sortedKeys() {
		ks := r.keys[k]
		rec, err := r.env.reader.Get(context.Background(), k)
		if err == nil && rec.Status == idem.StatusInFlight {
			continue
		}
		ks.terminal, ks.firsts = nil, 0
		if draw && rapid.Bool().Draw(rt, "newRequest") {
			ks.body = r.newBody(rt)
		}
	}
}

// providerLands has the provider's backend finish the charges it accepted.
func (r *history) providerLands(*rapid.T) {
	r.env.sim.Land()
	r.pendingSince = time.Time{}
}

func (r *history) providerDown(rt *rapid.T) {
	r.down = rapid.Bool().Draw(rt, "down")
	r.env.sim.SetDown(r.down)
}

func (r *history) dynamoFaults(rt *rapid.T) {
	refuse := rapid.SampledFrom([]int64{0, 50, 200}).Draw(rt, "refusedPerMille")
	lose := rapid.SampledFrom([]int64{0, 50, 200}).Draw(rt, "lostPerMille")
	r.faulty = refuse+lose > 0
	r.env.faults.refuse.Store(refuse)
	r.env.faults.lose.Store(lose)
}

// staleOwner is a crashed charge function coming back with its lease and
// writing late: a commit (with a charge row), a failure, a release, a
// heartbeat or a postponement. If its lease is no longer the record's (it
// was taken over, released and claimed again, or the key names a new
// intent), every such write must be refused and change nothing. A live
// lease is left alone: its owner is slow, not stale.
func (r *history) staleOwner(rt *rapid.T) {
	if len(r.zombies) == 0 {
		return
	}
	l := rapid.SampledFrom(r.zombies).Draw(rt, "zombie")
	r.touched[l.Key] = true
	ctx := context.Background()
	before, err := r.env.reader.Get(ctx, l.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		before = nil
	case err != nil:
		r.allowed(rt, err)
		return
	case before.Status == idem.StatusInFlight && before.LeaseToken == l.Token:
		// Its owner is slow, not stale (yet): it comes back after its lease
		// ran out and the reconciler took the command over.
		r.advance(max(l.ExpiresAt.Sub(r.env.clock.Now()), 0) + time.Second)
		r.deliver(rt, l.Key, 1)
		if before, err = r.env.reader.Get(ctx, l.Key); err != nil || before.LeaseToken == l.Token {
			return
		}
	}
	op := rapid.SampledFrom([]string{"commit", "fail", "release", "heartbeat", "postpone"}).Draw(rt, "write")
	late := idem.Response{Status: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"stale"}`)}
	switch op {
	case "commit":
		s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
		err = r.env.store.Commit(ctx, l, late, types.TransactWriteItem{Put: &types.Put{
			TableName:                aws.String(r.env.d.ChargesTable),
			Item:                     map[string]types.AttributeValue{charge.AttrTenant: s(l.Key.Tenant()), charge.AttrID: s("stale-" + l.Token)},
			ConditionExpression:      aws.String("attribute_not_exists(#id)"),
			ExpressionAttributeNames: map[string]string{"#id": charge.AttrID},
		}})
	case "fail":
		err = r.env.store.Fail(ctx, l, late)
	case "release":
		err = r.env.store.Release(ctx, l)
	case "heartbeat":
		err = r.env.store.Heartbeat(ctx, l)
	case "postpone":
		err = r.env.store.Postpone(ctx, l, r.env.clock.Now().Add(time.Hour))
	}
	switch {
	case err == nil:
		rt.Fatalf("%s: a stale lease's %s was applied", l.Key, op)
	case !errors.Is(err, idem.ErrLeaseLost):
		r.allowed(rt, err)
	default:
		r.env.staleRefused.Add(1)
	}
	after, aerr := r.env.reader.Get(ctx, l.Key)
	switch {
	case aerr != nil && !errors.Is(aerr, idem.ErrNotFound):
		r.allowed(rt, aerr)
	case (before == nil) != (aerr != nil):
		rt.Fatalf("%s: a stale lease's refused %s changed the record from %+v to %+v", l.Key, op, before, after)
	case before != nil && (after.Status != before.Status || after.LeaseToken != before.LeaseToken ||
		!after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) || !after.ExpiresAt.Equal(before.ExpiresAt)):
		rt.Fatalf("%s: a stale lease's refused %s changed the record from %+v to %+v", l.Key, op, before, after)
	}
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
	r.touched[key] = true
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
// may be charged again, whatever the state of the records. It also notes
// each key's command and its state, and when the provider accepted a
// charge that has not landed.
func (r *history) checkInvariantsSoFar(rt *rapid.T) {
	r.note(rt)
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
		ks := r.keys[k]
		if ks == nil {
			continue // another history's key, swept by this one's sweep
		}
		rec, err := r.env.archive.Get(context.Background(), ks.key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			continue // absent: its last state was noted before
		case err != nil:
			rt.Fatal(err)
		}
		ks.gens[rec.CreatedAt] = rec
	}
}

// settle is the end of every history: faults stop, the provider recovers
// and lands what it accepted, every lease, backoff and settle window runs
// out, and the sweeper and reconciler run to completion, each message
// delivered twice, until no command is left IN_FLIGHT. A command whose
// replays never get an answer (a card Stripe always rate-limits) is then
// left to grow older than the provider's dedup window, when the reconciler
// parks it.
func (r *history) settle(rt *rapid.T) {
	r.reset()
	r.faulty, r.down, r.pendingSince = false, false, time.Time{}
	stuck := r.settleRounds(rt)
	r.noteAll(rt)
	r.forgetExpired(rt)
	if stuck && r.env.dedupWindow > 0 {
		// Records settled so far pass their retention meanwhile: their
		// final state is noted, and their keys may name new intents.
		r.env.clock.Advance(r.env.dedupWindow)
		r.retentionPassed(rt, false)
		r.settleRounds(rt)
		r.noteAll(rt)
	}
}

// noteAll notes the state of every key's record.
func (r *history) noteAll(rt *rapid.T) {
	for k := range r.keys {
		r.touched[k] = true
	}
	r.note(rt)
}

// settleRounds runs the reconciler over every key until no lease is stuck,
// five rounds at most, and reports whether some still are.
func (r *history) settleRounds(rt *rapid.T) bool {
	for round := range 6 {
		// The provider lands what it accepted within its settle window,
		// also a charge a reconciler's replay sent in the round before.
		r.env.clock.Advance(retryCap + r.env.settleWindow + leaseExpiry)
		r.env.sim.Land()
		if round > 0 {
			keys, err := r.stuck()
			if err != nil {
				rt.Fatal(err)
			}
			if len(keys) == 0 || round == 5 {
				return len(keys) > 0
			}
		}
		// Every key: the messages the charge function queued, and those
		// the sweeper sends for the stuck ones among them.
		for _, k := range r.sortedKeys() {
			r.deliver(rt, k, 2)
		}
	}
	return false
}

// checkFinal checks the history's end state. For every command (a key's
// intent, named by its record's creation):
//   - the provider charged its reference at most once;
//   - it is SUCCEEDED exactly when the provider charged it, and then it has
//     exactly one charge row, and the row, the stored 201 and the provider
//     agree on the amount; FAILED_PERMANENT exactly when the provider
//     declined it; RELEASED (or never claimed) when the provider has no
//     charge for it; never left IN_FLIGHT, unless it is parked: older than
//     the provider's dedup window, with no charge at the provider;
//
// and for the history as a whole: provider charges = charge rows =
// SUCCEEDED commands, other tenants never read a charge, and every client
// of the current intent is replayed what the first was told.
func (r *history) checkFinal(rt *rapid.T) {
	ctx := context.Background()
	ledger := r.env.sim.entries()
	rows := map[string]row{}
	for _, tenant := range r.tenants {
		for _, w := range r.rows(rt, tenant) {
			rows[w.ID] = w
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
			if e.status == provider.StatusCharged {
				charged++
			}
			switch rec.Status {
			case idem.StatusSucceeded:
				succeeded++
				c := parseCharge(rt, string(rec.Response.Body))
				if e.status != provider.StatusCharged || !hasRow || w.Amount != e.amount || c.Amount != e.amount || c.ID != id || w.ProviderReference != ref {
					rt.Fatalf("%s@%s: SUCCEEDED with %s, but the provider says %+v and the row is %+v (%t)", k, created, rec.Response.Body, e, w, hasRow)
				}
			case idem.StatusFailedPermanent:
				if e.status != provider.StatusDeclined || hasRow {
					rt.Fatalf("%s@%s: FAILED_PERMANENT, but the provider says %+v and a row exists: %t", k, created, e, hasRow)
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
		if ks.told != "" && ledger[ks.told].status == provider.StatusCharged {
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
