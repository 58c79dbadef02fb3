package model_test

import (
	"context"
	"io"
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
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// env is the charge path as deployed, in-process.
type env struct {
	handler *httpapi.Handler
	recon   *charge.Service    // what the reconcile function runs per message
	store   *dynamostore.Store // the same table, for crashes, with the faults
	reader  *dynamostore.Store // the same table, without faults, for checks
	// index is what the sweeper reads, with the faults: the stuck leases
	// and the charges' captures and cancels in flight.
	index sweeper.Index
	sim   backend
	prov  charger // a crashed charge function's provider calls
	// hooks receive Stripe's webhooks (webhooks_test.go); nil in the
	// simulator's mode, which sends none.
	hooks *webhooks
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
	refundStats                       refundStats
	moveStats                         moveStats
}

const (
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
	// refunds counts the refunds the provider made under each of
	// references, and how many of those failed since.
	refunds(references []string) map[string]refundCount
}

// refundCount is what the provider made under one refund reference:
// more than one refund is a duplicate. A failed one refunded nothing.
type refundCount struct{ made, failed int }

// kept reports whether a refund made under the reference still takes
// money back.
func (c refundCount) kept() bool { return c.made > c.failed }

// entry is what became of one reference at the provider.
type entry struct {
	// results counts the outcomes stored for it (charges and declines):
	// more than one means it was executed twice.
	results int
	status  provider.Status
	amount  int64
	pending bool
	// refunded is what the provider's refunds of the charge took back.
	refunded int64
	// An authorization's: the provider's id of the charge, the captures
	// it made and what they took, and whether it ended uncaptured
	// (canceled or expired).
	id       string
	captures int
	captured int64
	canceled bool
}

// made reports whether the provider made the charge: captured, or held
// to capture later.
func (e entry) made() bool {
	return e.status == provider.StatusCharged || e.status == provider.StatusAuthorized
}

// rowAmount is the amount the charge's row must read: what a capture
// took, or else what was charged or held.
func (e entry) rowAmount() int64 {
	if e.captures > 0 {
		return e.captured
	}
	return e.amount
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
		out[ref] = entry{
			results: e.Charges, status: e.Status, amount: e.Amount, pending: e.Pending, refunded: e.Refunded,
			id: e.ID, captures: e.Captures, captured: e.Captured, canceled: e.Canceled,
		}
	}
	return out
}

// refunds: the simulator's refunds never fail.
func (b simBackend) refunds(references []string) map[string]refundCount {
	l, out := b.Ledger(), map[string]refundCount{}
	for _, ref := range references {
		out[ref] = refundCount{made: l.Refunds[ref].Refunds}
	}
	return out
}

// stripeBackend is the Stripe simulator; while it is down, every request
// answers 503 and executes nothing (to the adapter an ambiguous charge).
// It notes when each reference was first sent, every send of it after
// Stripe's key window less the adapter's margin, and the references whose
// requests Stripe refused outright. Armed with failRefund, it fails the
// refunds that can fail right after making the next one, before its
// answer reaches the adapter.
type stripeBackend struct {
	sim        *stripesim.Simulator
	clock      func() time.Time
	down       atomic.Bool
	failRefund atomic.Bool

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
	if r.Method == http.MethodPost && r.URL.Path == "/v1/refunds" && b.failRefund.CompareAndSwap(true, false) {
		b.sim.FailRefunds()
	}
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
		x := entry{
			results: e.Succeeded + e.Declined, status: provider.StatusNotFound, amount: e.Amount, pending: e.Pending, refunded: e.Refunded,
			captures: e.Captures, captured: e.Captured, canceled: e.Canceled > 0,
		}
		if e.Authorized > 0 && e.Amount > 0 {
			// Authorizations count whatever became of them: each held
			// the key's amount.
			x.results = e.Declined + int(e.Authorized/e.Amount)
		}
		switch {
		case e.Succeeded > 0:
			x.status = provider.StatusCharged
		case e.Declined > 0:
			x.status = provider.StatusDeclined
		case e.Authorized > 0:
			x.status = provider.StatusAuthorized
		}
		out[ref] = x
	}
	return out
}

func (b *stripeBackend) refunds(references []string) map[string]refundCount {
	out := map[string]refundCount{}
	for _, ref := range references {
		// A refund's idempotency key is its reference.
		out[ref] = refundCount{made: b.sim.Refunded(ref), failed: b.sim.RefundsFailed(ref)}
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
	hooks := newWebhooks(t)
	var wire func(*testkit.Wiring)
	b.sim, wire = testkit.Stripe(t, clock.Now, hooks.options)
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	e := newEnvOn(t, d, clock, newConnDrop(t, b), wire, func(w *testkit.Wiring) {
		w.Charge.ProviderURL, w.Reconcile.ProviderURL = srv.URL, srv.URL
		w.Charge.WebhookSecretName = hooks.secretName
		w.Deps.StripeOptions = []func(*stripe.Options){func(o *stripe.Options) { o.Timeout = stripeTimeout }}
	})
	hooks.serve(t, e.handler, b.sim)
	e.hooks = hooks
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
		stripesim.PMTimeout, stripesim.PMAPIError, stripesim.PMLate, pmUnknown, stripesim.PMRefundFail,
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
	rows, err := charge.NewRows(clients.DynamoDB, d.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		handler: h, recon: recon, store: store, index: sweeper.Join(store, rows), reader: reader, archive: archive,
		clock: clock, faults: faults, db: db, d: d, drop: drop,
	}
}

// removeItems deletes the history's records, its events' and charge rows
// once it has been checked. Histories never share keys, so this changes no
// outcome; it keeps the tables small, which matters on moto, whose query
// of the stuck-lease index reads the whole table.
func (r *history) removeItems(rt *rapid.T) {
	ctx := context.Background()
	keys := r.commandKeys()
	if h := r.env.hooks; h != nil {
		keys = append(keys, h.eventKeys()...)
	}
	for _, k := range keys {
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

// row is a charge's or a refund's row as the model reads it.
type row struct {
	ID, ProviderReference, Status string
	Amount                        int64
	// A charge's: its provider's id for it, its currency, what its
	// settled refunds returned, and that plus what refunds in flight hold.
	// Count is its refund rows and holds, which the limit bounds.
	ProviderChargeID, Currency string
	Refunded, Claimed, Count   int64
	// ChargeID is a refund's charge, empty on a charge's row.
	ChargeID string
}

// rows reads every row of tenant, its charges' and their refunds'.
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
			out = append(out, row{
				ID: attrS(item, charge.AttrID), ProviderReference: attrS(item, "provider_reference"), Status: attrS(item, "status"),
				Amount:           attrN(item, "amount"),
				ProviderChargeID: attrS(item, "provider_charge_id"), Currency: attrS(item, "currency"), Refunded: attrN(item, "amount_refunded"), Claimed: attrN(item, "refund_claimed"),
				Count: attrN(item, "refund_count"), ChargeID: attrS(item, "charge_id"),
			})
		}
	}
	return out
}

// attrS is item's string attribute name, or "".
func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// attrN is item's number attribute name, or 0.
func attrN(item map[string]types.AttributeValue, name string) int64 {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}
