package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// faultActions are the faults a history injects: crashes, crashed owners
// coming back late (drawn twice as often), provider outages, DynamoDB's
// refusals and lost answers, and dropped connections.
var faultActions = []action{
	{"crashAfterClaim", 1, (*history).crashAfterClaim},
	{"crashAfterProvider", 1, (*history).crashAfterProvider},
	{"crashAfterCommit", 1, (*history).request}, // the client never reads the response
	{"staleOwner", 2, (*history).staleOwner},
	{"providerDown", 1, (*history).providerDown},
	{"dynamoFaults", 1, (*history).dynamoFaults},
	{"connectionDrops", 1, (*history).connectionDrops},
	{"claimAnswerLost", 1, (*history).claimAnswerLost},
}

// connDrop is the charge function's way to the provider: a server in
// front of it and a client whose dials it controls. Armed, the server
// lets the provider execute the next charge, then drops the connection
// without an answer, and every dial fails: Go's transport re-sends a
// request with an Idempotency-Key on a new connection when a kept-alive one
// drops after the request was written, and that re-send fails to dial.
// fault, when set, is the providersim Sim-Fault of the next POST to a
// path it names: a refund, a capture or a cancel.
type connDrop struct {
	h             http.Handler
	url           string
	client        *http.Client
	armed, noDial atomic.Bool
	dropped       atomic.Int64
	fault         atomic.Pointer[simFault]
}

// simFault is a Sim-Fault header for the next POST whose path ends in
// suffix.
type simFault struct{ suffix, value string }

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
	if f := c.fault.Load(); f != nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, f.suffix) && c.fault.CompareAndSwap(f, nil) {
		r.Header.Set(providersim.HeaderFault, f.value)
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
// every retry (idemtest.LostClaim). With transactions set, every
// TransactWriteItems is refused: a function that dies between the
// provider's effect and its record.
type faultyTransport struct {
	claim         *idemtest.LostClaim
	refuse, lose  atomic.Int64 // per mille
	refused, lost atomic.Int64
	transactions  atomic.Bool
}

func (f *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch n := rand.Int64N(1000); {
	case f.transactions.Load() && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems"):
		if req.Body != nil {
			_ = req.Body.Close()
		}
		f.refused.Add(1)
		return idemtest.DynamoDBFault(req, "InternalServerError"), nil
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

// withSimFault runs send with providersim's Sim-Fault, drawn, on the next
// POST whose path ends in suffix. Stripe mode has no such header; there
// send runs plain.
func (r *history) withSimFault(rt *rapid.T, suffix string, send func()) {
	if _, sim := r.env.sim.(simBackend); sim {
		fault := rapid.SampledFrom([]string{providersim.FaultUnavailable, providersim.FaultTimeout, providersim.FaultSlow}).Draw(rt, "fault")
		r.env.drop.fault.Store(&simFault{suffix, fault})
		defer r.env.drop.fault.Store(nil)
	}
	send()
}

// connectionDrops is a charge whose connection to the provider drops
// after the provider executed it, and whose re-send on a new connection
// fails to dial.
func (r *history) connectionDrops(rt *rapid.T) { r.dropping(rt, func() { r.request(rt) }) }

// dropping runs send with the connection to the provider set to drop
// after the provider executed the next request.
func (r *history) dropping(rt *rapid.T, send func()) {
	if err := r.env.drop.warm(); err != nil {
		rt.Fatal(err)
	}
	r.env.drop.armed.Store(true)
	r.env.drop.noDial.Store(true)
	defer r.env.drop.armed.Store(false)
	defer r.env.drop.noDial.Store(false)
	send()
}

// claimAnswerLost is a request whose claim lands in DynamoDB while its
// answer is lost and the SDK's retries are all throttled. Webhooks in
// flight are delivered first: their event claims would take the loss.
func (r *history) claimAnswerLost(rt *rapid.T) {
	r.hooksDelivered()
	faulty := r.faulty
	r.faulty = true
	r.env.faults.claim.Arm()
	defer func() {
		r.env.faults.claim.Disarm()
		r.faulty = faulty
	}()
	r.request(rt)
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
		Authorize   bool   `json:"authorize_only,omitempty"`
	}{Amount: b.Amount, Currency: b.Currency, Description: b.Description, Authorize: b.AuthorizeOnly}
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
// it recorded the outcome. It sends what the charge function sends, the
// command and row too: Stripe's events name them, and its replays match.
func (r *history) crashAfterProvider(rt *rapid.T) {
	ks, b, lease := r.claim(rt)
	if lease == nil {
		return
	}
	_, _ = r.env.prov.Charge(context.Background(), provider.ChargeRequest{
		Reference: charge.ProviderReference(ks.key, lease.CreatedAt), Amount: b.Amount, Currency: b.Currency, Source: b.Source,
		AuthorizeOnly: b.AuthorizeOnly, Command: ks.key.String(), Row: charge.ChargeID(ks.key, lease.CreatedAt),
	})
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
		r.advance(rt, max(l.ExpiresAt.Sub(r.env.clock.Now()), 0)+time.Second)
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
