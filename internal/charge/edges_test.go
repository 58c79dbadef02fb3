package charge_test

// Tests of what happens after the timers and windows run out: retention,
// the provider's settle window, the reconciler's backoff, a request's
// deadline; and of the answers DynamoDB's and the provider's failures get.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// clocked is a harness whose store and service read a settable clock, and
// a reconcile service on the same deployment and clock.
type clocked struct {
	*harness
	clock *testkit.Clock
	recon *charge.Service
}

func newClocked(t *testing.T, tune ...func(*app.ChargeConfig)) *clocked {
	t.Helper()
	clock := testkit.NewClock(time.Now())
	h := newHarnessWith(t, harnessConfig{tune: tune, deps: func(d *app.Deps) { d.Clock = clock.Now }})
	recon := h.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.SettleWindow, w.Reconcile.RetryBase, w.Reconcile.RetryCap = 2*time.Minute, time.Minute, 4*time.Minute
		w.Deps.Clock = clock.Now
	})
	return &clocked{harness: h, clock: clock, recon: recon}
}

func chargeOf(t *testing.T, resp string) (id string, amount int64) {
	t.Helper()
	var c struct {
		ID     string
		Amount int64
	}
	if err := json.Unmarshal([]byte(resp), &c); err != nil {
		t.Fatalf("charge body %s: %v", resp, err)
	}
	return c.ID, c.Amount
}

// pastRetention moves the clock past the retention of a command just
// settled: its lease (30s without a deadline) and the retention after it.
func (c *clocked) pastRetention() {
	c.clock.Advance(c.d.Charge().Retention + time.Minute)
}

// TestKeyReusedAfterRetentionIsANewIntent: once the key's retention has
// passed, the README lets it name a new intent. That intent gets its own
// charge, row and answer; the first charge and its row stay as they were.
// (Before, the provider deduplicated the reused reference into the old
// charge, Commit failed on the old row, and the key wedged: 503 then 409
// until the new record expired.)
func TestKeyReusedAfterRetentionIsANewIntent(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	first := h.do(post("acme", key, visa))
	wantStatus(t, first, http.StatusCreated)
	firstID, _ := chargeOf(t, first.Body)

	h.pastRetention()
	reused := strings.Replace(visa, "1500", "9900", 1)
	second := h.do(post("acme", key, reused))
	wantStatus(t, second, http.StatusCreated)
	secondID, amount := chargeOf(t, second.Body)
	if secondID == firstID || amount != 9900 || second.Headers[httpapi.HeaderReplayed] != "" {
		t.Fatalf("the new intent answered %v %s (the first was %s)", second.Headers, second.Body, firstID)
	}
	if charges, calls := h.ledger(t); charges != 2 || calls != 2 {
		t.Fatalf("provider charges %d, calls %d; want 2 and 2", charges, calls)
	}
	replay := h.do(post("acme", key, reused))
	if replay.Body != second.Body || replay.Headers[httpapi.HeaderReplayed] != "true" {
		t.Fatalf("retry of the new intent: %v %s", replay.Headers, replay.Body)
	}
	wantStatus(t, h.do(post("acme", key, visa)), http.StatusUnprocessableEntity)
	for id, want := range map[string]int64{firstID: 1500, secondID: 9900} {
		row := h.do(get("acme", id))
		wantStatus(t, row, http.StatusOK)
		if _, got := chargeOf(t, row.Body); got != want {
			t.Fatalf("charge %s amount %d, want %d", id, got, want)
		}
	}
}

// TestDeclinedKeyReusedAfterRetentionTriesTheNewCard: a 402 is final for
// its retention, not for ever.
func TestDeclinedKeyReusedAfterRetentionTriesTheNewCard(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	declined := h.do(post("acme", key, strings.Replace(visa, "tok_visa", providersim.SourceDecline, 1)))
	wantStatus(t, declined, http.StatusPaymentRequired)
	h.pastRetention()
	wantStatus(t, h.do(post("acme", key, visa)), http.StatusCreated)
	if charges, calls := h.ledger(t); charges != 2 || calls != 2 {
		t.Fatalf("provider results %d, calls %d; want the decline and the new charge", charges, calls)
	}
}

// crashAfterClaim is a charge function that claims key and dies before it
// calls the provider; the lease runs out.
func (c *clocked) crashAfterClaim(t *testing.T, key, body string) *idem.Lease {
	t.Helper()
	canonical, err := idem.CanonicalJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.store.Begin(context.Background(), mustKey(t, "acme", key), idem.FingerprintOf(canonical), []byte(`{"amount":1500,"currency":"EUR","description":"order 42"}`))
	if err != nil || b.Lease == nil {
		t.Fatalf("claim: %+v, %v", b, err)
	}
	c.clock.Advance(time.Minute)
	return b.Lease
}

func (c *clocked) reconcile(t *testing.T, key string) charge.Outcome {
	t.Helper()
	out, err := c.recon.Reconcile(context.Background(), mustKey(t, "acme", key))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return out
}

func (c *clocked) lateCharge(t *testing.T, l *idem.Lease) {
	t.Helper()
	_, err := provider.NewClient(c.d.ProviderURL, "").Charge(context.Background(), provider.ChargeRequest{
		Reference: charge.ProviderReference(l.Key, l.CreatedAt), Amount: 1500, Currency: "EUR", Source: providersim.SourceVisa,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNotFoundReleasesOnlyAfterTheSettleWindow: a provider's "not found"
// right after the attempt is no proof, since its backend may still be
// charging. The key is postponed, not released: a retry with another
// body is still refused, and a charge that lands late is recorded without
// the client coming back. (Before, the key was released at once, another
// body was accepted, and the late charge was never recorded.)
func TestNotFoundReleasesOnlyAfterTheSettleWindow(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	l := h.crashAfterClaim(t, key, visa)
	if got := h.reconcile(t, key); got != charge.OutcomeNotSettled {
		t.Fatalf("reconcile inside the settle window: %s, want %s", got, charge.OutcomeNotSettled)
	}
	rec, err := h.store.Get(context.Background(), l.Key)
	if err != nil || rec.Status != idem.StatusInFlight || rec.LeaseExpiresAt.Before(l.AttemptDeadline.Add(2*time.Minute)) {
		t.Fatalf("record after a premature not-found: %+v, %v", rec, err)
	}
	wantStatus(t, h.do(post("acme", key, strings.Replace(visa, "1500", "9900", 1))), http.StatusUnprocessableEntity)
	h.lateCharge(t, l) // the provider's backend charges after all
	h.clock.Advance(2 * time.Minute)
	if got := h.reconcile(t, key); got != charge.OutcomeResolvedCharged {
		t.Fatalf("reconcile after the settle window: %s, want %s", got, charge.OutcomeResolvedCharged)
	}
	replay := h.do(post("acme", key, visa))
	wantStatus(t, replay, http.StatusCreated)
	id, _ := chargeOf(t, replay.Body)
	wantStatus(t, h.do(get("acme", id)), http.StatusOK)
	if charges, _ := h.ledger(t); charges != 1 {
		t.Fatalf("provider charges %d, want 1", charges)
	}
}

// TestReleasedKeyRunsAgainUnderItsReference: once the settle window has
// passed, "not found" releases the key; the same request then runs again
// under the same reference (so a charge that landed is found, not
// repeated), and another request is still refused.
func TestReleasedKeyRunsAgainUnderItsReference(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	l := h.crashAfterClaim(t, key, visa)
	h.clock.Advance(2 * time.Minute)
	if got := h.reconcile(t, key); got != charge.OutcomeReleased {
		t.Fatalf("reconcile after the settle window: %s, want %s", got, charge.OutcomeReleased)
	}
	wantStatus(t, h.do(post("acme", key, strings.Replace(visa, "1500", "9900", 1))), http.StatusUnprocessableEntity)
	created := h.do(post("acme", key, visa))
	wantStatus(t, created, http.StatusCreated)
	var c struct {
		ProviderReference string `json:"provider_reference"`
	}
	_ = json.Unmarshal([]byte(created.Body), &c)
	if want := charge.ProviderReference(l.Key, l.CreatedAt); c.ProviderReference != want {
		t.Fatalf("the retry charged reference %s, want the released command's %s", c.ProviderReference, want)
	}
}

// TestReconcileBacksOffPerKey: a key whose provider cannot be asked is
// postponed by a backoff that doubles per attempt up to a cap, instead of
// being retried every sweep (and through the DLQ).
func TestReconcileBacksOffPerKey(t *testing.T) {
	t.Parallel()
	h := newClocked(t)
	key := newKey()
	h.crashAfterClaim(t, key, visa)
	h.sim.SetDown(true)
	for i, wait := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		if got := h.reconcile(t, key); got != charge.OutcomeDeferred {
			t.Fatalf("attempt %d with the provider down: %s, want %s", i+1, got, charge.OutcomeDeferred)
		}
		rec, err := h.store.Get(context.Background(), mustKey(t, "acme", key))
		if err != nil || rec.Attempts != i+1 || !rec.LeaseExpiresAt.Equal(h.clock.Now().Add(wait).Truncate(time.Millisecond)) {
			t.Fatalf("attempt %d: record %+v, %v; want the lease %s on", i+1, rec, err, wait)
		}
		h.clock.Advance(wait - time.Second)
		if got := h.reconcile(t, key); got != charge.OutcomeStillLeased {
			t.Fatalf("before the backoff ran out: %s, want %s", got, charge.OutcomeStillLeased)
		}
		h.clock.Advance(2 * time.Second)
	}
	h.sim.SetDown(false)
	h.clock.Advance(2 * time.Minute) // past the settle window too
	if got := h.reconcile(t, key); got != charge.OutcomeReleased {
		t.Fatalf("with the provider back: %s, want %s", got, charge.OutcomeReleased)
	}
}

// TestChargeRowCollisionIsSettled: a charge row already under the
// command's id is never an ambiguous outcome that would wedge the key and
// cycle it through the reconciler. The command's own row settles it as
// created; a conflicting one as a permanent, stated error.
func TestChargeRowCollisionIsSettled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		sameCharge bool
		want       charge.Outcome
		status     int
	}{
		{"the command's own row", true, charge.OutcomeResolvedCharged, http.StatusCreated},
		{"a conflicting row", false, charge.OutcomeChargeConflict, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newClocked(t)
			key := newKey()
			l := h.crashAfterClaim(t, key, visa)
			h.lateCharge(t, l)
			ref := charge.ProviderReference(l.Key, l.CreatedAt)
			looked, err := provider.NewClient(h.d.ProviderURL, "").Lookup(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			providerID := looked.ChargeID
			if !tc.sameCharge {
				providerID = "pc_someone_else"
			}
			s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
			_, err = testkit.Clients(t).DynamoDB.PutItem(context.Background(), &dynamodb.PutItemInput{
				TableName: aws.String(h.d.ChargesTable),
				Item: map[string]types.AttributeValue{
					charge.AttrTenant: s("acme"), charge.AttrID: s(charge.ChargeID(l.Key, l.CreatedAt)),
					"amount": &types.AttributeValueMemberN{Value: "1500"}, "currency": s("EUR"), "description": s("order 42"),
					"status": s("succeeded"), "provider_reference": s(ref), "provider_charge_id": s(providerID),
					"idempotency_key": s(key), "created_at": s(l.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := h.reconcile(t, key); got != tc.want {
				t.Fatalf("reconcile: %s, want %s", got, tc.want)
			}
			rec, err := h.store.Get(context.Background(), l.Key)
			if err != nil || !rec.Status.Terminal() {
				t.Fatalf("record: %+v, %v; want it settled", rec, err)
			}
			replay := h.do(post("acme", key, visa))
			wantStatus(t, replay, tc.status)
			if replay.Headers[httpapi.HeaderReplayed] != "true" {
				t.Fatalf("retry: %v %s, want the stored answer", replay.Headers, replay.Body)
			}
		})
	}
}

// TestProviderRejectionIsFinal: a provider 4xx means our request was
// refused before anything was charged: the key is released and the
// client told, with a problem it does not retry, instead of a 500.
func TestProviderRejectionIsFinal(t *testing.T) {
	t.Parallel()
	h := newClocked(t, func(c *app.ChargeConfig) { c.ProviderURL += "/no-such-prefix" })
	key := newKey()
	resp := h.do(post("acme", key, visa))
	wantStatus(t, resp, http.StatusBadGateway)
	if problemType(t, resp) != "provider-rejected" || resp.Headers["Retry-After"] != "" {
		t.Fatalf("rejection answered %v %s", resp.Headers, resp.Body)
	}
	rec, err := h.store.Get(context.Background(), mustKey(t, "acme", key))
	if err != nil || rec.Status != idem.StatusReleased {
		t.Fatalf("record after a rejection: %+v, %v; want released", rec, err)
	}
}

// throttle answers every PutItem with DynamoDB's throttling error,
// without forwarding it.
type throttle struct{}

func (throttle) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		return http.DefaultTransport.RoundTrip(req)
	}
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}`
	return &http.Response{
		StatusCode: http.StatusBadRequest, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Errortype": {"ThrottlingException"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: req,
	}, nil
}

// TestThrottledClaimAnswers503: throttling (or a conflict, or a 5xx) on
// the claim is not a server bug: the client gets a 503 it may retry at
// once, and the provider is never called.
func TestThrottledClaimAnswers503(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: throttle{}}
			o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
		})
	}})
	resp := h.do(post("acme", newKey(), visa))
	wantStatus(t, resp, http.StatusServiceUnavailable)
	if problemType(t, resp) != "service-unavailable" || resp.Headers["Retry-After"] == "" {
		t.Fatalf("throttled claim answered %v %s", resp.Headers, resp.Body)
	}
	if _, calls := h.ledger(t); calls != 0 {
		t.Fatalf("provider calls %d, want 0", calls)
	}
}

// TestAmbiguousPathQueuesAfterTheDeadline: the provider call leaves the
// commit reserve of the request's time, and the reconcile message is sent
// on its own time, so an answer that never comes is still queued. (Before,
// the provider call could use the whole budget and the enqueue ran on an
// expired context.)
func TestAmbiguousPathQueuesAfterTheDeadline(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.CommitReserve, c.InflightWait = 500*time.Millisecond, 0 }},
		sim:  []func(*providersim.Options){providersim.WithSlowDelay(3 * time.Second)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	started := time.Now()
	resp, err := h.handler.Handle(ctx, post("acme", newKey(), strings.Replace(visa, "tok_visa", providersim.SourceSlow, 1)))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, resp, http.StatusServiceUnavailable)
	if problemType(t, resp) != "outcome-pending" {
		t.Fatalf("slow provider answered %s", resp.Body)
	}
	if took := time.Since(started); took > 1500*time.Millisecond {
		t.Fatalf("the handler answered after %s, past the request's deadline", took)
	}
	h.wantOneQueued(t)
}

// TestGetReadsStronglyConsistent: a charge answered 201 is found by the
// GET that follows it, which an eventually consistent read does not
// promise.
func TestGetReadsStronglyConsistent(t *testing.T) {
	t.Parallel()
	var consistent []bool
	h := newHarnessWith(t, harnessConfig{deps: func(d *app.Deps) {
		d.Clients = testkit.Clients(t, func(o *dynamodb.Options) {
			o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
				return s.Initialize.Add(middleware.InitializeMiddlewareFunc("SeeGetItem",
					func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
						switch g := in.Parameters.(type) {
						case *dynamodb.GetItemInput:
							consistent = append(consistent, aws.ToBool(g.ConsistentRead))
						case *dynamodb.QueryInput:
							consistent = append(consistent, aws.ToBool(g.ConsistentRead))
						}
						return next.HandleInitialize(ctx, in)
					}), middleware.Before)
			})
		})
	}})
	created := h.do(post("acme", newKey(), visa))
	id, _ := chargeOf(t, created.Body)
	wantStatus(t, h.do(get("acme", id)), http.StatusOK)
	if len(consistent) != 1 || !consistent[0] {
		t.Fatalf("GET's reads, consistent: %v; want one strongly consistent read", consistent)
	}
}
