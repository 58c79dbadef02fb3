package charge_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// twoRegions is the charge function of Regions r1 and r2 on one pair of
// tables, as if replication were instant, with the routes, the ledger and
// one clock; acme is homed in r1.
type twoRegions struct {
	r1, r2 *harness
	routes *regions.Routes
	ledger *dynamostore.Ledger
	clock  *testkit.Clock
	tables [2]string // the routes' and the ledger's
}

func newTwoRegions(t *testing.T) *twoRegions {
	t.Helper()
	tables := [2]string{testkit.TempTable(t, regions.TableInput("routes")), testkit.TempTable(t, regions.TableInput("ledger"))}
	db := testkit.Clients(t).DynamoDB
	// Ahead of the emulator's clock, which a move never starts before.
	tr := &twoRegions{clock: testkit.NewClock(time.Now().Add(time.Hour)), tables: tables}
	var err error
	if tr.routes, err = regions.NewRoutes(db, tables[0]); err != nil {
		t.Fatal(err)
	}
	if tr.ledger, err = dynamostore.NewLedger(db, tables[1]); err != nil {
		t.Fatal(err)
	}
	tr.r1 = newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) { c.Regions = tr.regions("r1") }},
		deps: func(d *app.Deps) { d.Clock = tr.clock.Now },
	})
	// r2 on r1's tables: a replica replication keeps in step.
	r2 := *tr.r1
	r2.handler = tr.handler(t, "r2")
	tr.r2 = &r2
	return tr
}

// regions is region's configuration in tr: acme is homed in r1.
func (tr *twoRegions) regions(region string) app.Regions {
	return app.Regions{Region: region, Home: "r1", Homes: map[string]string{"acme": "r1"}, RoutesTable: tr.tables[0], LedgerTable: tr.tables[1]}
}

// handler is region's charge function on r1's tables, tuned by tune.
func (tr *twoRegions) handler(t *testing.T, region string, tune ...func(*testkit.Wiring)) *httpapi.Handler {
	t.Helper()
	return tr.r1.d.ChargeHandler(t, append([]func(*testkit.Wiring){func(w *testkit.Wiring) {
		w.Charge.Regions, w.Deps.Clock = tr.regions(region), tr.clock.Now
	}}, tune...)...)
}

// failOver moves acme's home r1 to r2, now: r2 serves it after the
// fence, r1 pending.
func (tr *twoRegions) failOver(t *testing.T) {
	t.Helper()
	route, err := tr.routes.Route(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.routes.Move(t.Context(), route, "r2", tr.clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
}

// drain marks r1 drained, pending since failOver, and lets r1's leases
// end: r2 then writes what r1 claimed.
func (tr *twoRegions) drain(t *testing.T) {
	t.Helper()
	route, err := tr.routes.Route(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.routes.Drained(t.Context(), route, "r1"); err != nil {
		t.Fatal(err)
	}
	tr.clock.Advance(regions.DefaultLease)
}

// TestARegionActsOnlyForItsTenants: a Region answers a tenant another
// Region serves 421 wrong-region, naming it, with nothing stored; the
// serving Region claims in the ledger before it charges.
func TestARegionActsOnlyForItsTenants(t *testing.T) {
	t.Parallel()
	tr := newTwoRegions(t)
	resp := tr.r2.do(post("acme", "order-1", `{"amount":500,"currency":"EUR","source":"tok_visa"}`))
	if resp.StatusCode != http.StatusMisdirectedRequest || problemType(t, resp) != "wrong-region" || !strings.Contains(resp.Body, "r1") {
		t.Fatalf("r2 for r1's tenant: %d %s", resp.StatusCode, resp.Body)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1")
	if _, err := tr.r1.store.Get(t.Context(), key); err == nil {
		t.Fatal("a request refused as wrong-region stored a record")
	}
	wantStatus(t, tr.r1.do(post("acme", "order-1", `{"amount":500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)
	if got, err := tr.ledger.Claim(t.Context(), key, idem.Claim{Region: "r2", CreatedAt: tr.clock.Now(), Until: tr.clock.Now().Add(time.Hour)}); err == nil {
		t.Fatalf("the ledger took r2's claim of a key r1 charged: %+v", got)
	}
	if rec, err := tr.r1.store.Get(t.Context(), key); err != nil || rec.Region != "r1" {
		t.Fatalf("the record: %+v, %v; want r1's", rec, err)
	}
}

// TestAnotherRegionsTenantIsAnsweredBeforeTheLimits: a Region answers
// 421 for a tenant it does not serve, however often asked. The requests
// cost the tenant nothing of its limits there: past its rate, they would
// be 429.
func TestAnotherRegionsTenantIsAnsweredBeforeTheLimits(t *testing.T) {
	t.Parallel()
	tr := newTwoRegions(t)
	r2 := *tr.r2
	r2.handler = tr.handler(t, "r2", func(w *testkit.Wiring) {
		w.Charge.LimitsTable, w.Charge.Limits = tr.r1.d.LimitsTable, limit.Limits{Rate: 1, Concurrency: 100}
	})
	for i := range 3 {
		resp := r2.do(post("acme", fmt.Sprintf("order-%d", i), `{"amount":500,"currency":"EUR","source":"tok_visa"}`))
		if resp.StatusCode != http.StatusMisdirectedRequest || problemType(t, resp) != "wrong-region" {
			t.Fatalf("request %d to r2 for r1's tenant: %d %s, want 421 wrong-region", i, resp.StatusCode, resp.Body)
		}
	}
}

// TestAFailoverWaitsForTheFenceAndTheDrain: once r1's tenants fail over to
// r2, r2 serves them only after the fence. Until r1 is drained, r2 takes
// new charges and refunds of charges made since, and answers
// outcome-pending, doing nothing, for a key r1 claimed and for a refund of
// a charge r1 made. Once r1 is drained, both go on: r1's claim is
// inherited, left to the reconciler.
func TestAFailoverWaitsForTheFenceAndTheDrain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tr := newTwoRegions(t)
	charge1 := tr.r1.charged(t, "acme", 500)
	// r1 claimed order-3 in the ledger, and failed before its record.
	stranded, _ := idem.NewKey("acme", charge.ChargeOperation, "order-3")
	if _, err := tr.ledger.Claim(ctx, stranded, idem.Claim{Region: "r1", CreatedAt: tr.clock.Now(), Until: tr.clock.Now().Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tr.failOver(t)
	tr.clock.Advance(regions.DefaultLease)
	pending := tr.r2.do(post("acme", "order-2", `{"amount":700,"currency":"EUR","source":"tok_visa"}`))
	if pending.StatusCode != http.StatusServiceUnavailable || problemType(t, pending) != "outcome-pending" {
		t.Fatalf("r2 before the fence: %d %s", pending.StatusCode, pending.Body)
	}
	tr.clock.Advance(regions.FenceDelay)
	created := tr.r2.do(post("acme", "order-2", `{"amount":700,"currency":"EUR","source":"tok_visa"}`))
	wantStatus(t, created, http.StatusCreated)
	charge2, _ := chargeOf(t, created.Body)
	for name, resp := range map[string]events.APIGatewayV2HTTPResponse{
		"a key r1 claimed":           tr.r2.do(post("acme", "order-3", `{"amount":900,"currency":"EUR","source":"tok_visa"}`)),
		"a refund of r1's charge":    tr.r2.do(postRefund("acme", "refund-1", charge1, `{"amount":100}`)),
		"a cancel of r1's charge":    tr.r2.do(testkit.PostMove("acme", charge1, "cancel", "")),
		"a read of a missing charge": tr.r2.do(get("acme", "ch_000000000000000000000000")),
	} {
		if resp.StatusCode != http.StatusServiceUnavailable || problemType(t, resp) != "outcome-pending" || resp.Headers["Retry-After"] == "" {
			t.Errorf("%s, before r1 is drained: %d %s, want outcome-pending with Retry-After", name, resp.StatusCode, resp.Body)
		}
	}
	refund1, _ := idem.NewKey("acme", charge.RefundOperation, "refund-1")
	if _, err := tr.r2.store.Get(ctx, refund1); err == nil {
		t.Fatal("r2 claimed a refund of r1's charge before r1 was drained")
	}
	wantStatus(t, tr.r2.do(postRefund("acme", "refund-2", charge2, `{"amount":100}`)), http.StatusCreated)
	if _, err := tr.r2.store.Get(ctx, stranded); err == nil {
		t.Fatal("r2 wrote a record under r1's claim before r1 was drained")
	}

	tr.drain(t)
	wantStatus(t, tr.r2.do(postRefund("acme", "refund-1", charge1, `{"amount":100}`)), http.StatusCreated)
	inherited := tr.r2.do(post("acme", "order-3", `{"amount":900,"currency":"EUR","source":"tok_visa"}`))
	if inherited.StatusCode != http.StatusServiceUnavailable || problemType(t, inherited) != "outcome-pending" {
		t.Fatalf("r1's claim once drained: %d %s, want outcome-pending for the reconciler", inherited.StatusCode, inherited.Body)
	}
	if rec, err := tr.r2.store.Get(ctx, stranded); err != nil || rec.Status != idem.StatusInFlight || rec.Region != "r2" {
		t.Fatalf("r1's claim once drained: record %+v, %v; want it IN_FLIGHT, r2's to reconcile", rec, err)
	}
}

// TestWhenTheStrongTablesFailEveryRequestFailsClosed: the routes table
// is in the ledger's strongly consistent set. Once the lease ends, no
// Region knows whom it serves, so every request answers 503, nothing done.
func TestWhenTheStrongTablesFailEveryRequestFailsClosed(t *testing.T) {
	t.Parallel()
	tables := [2]string{testkit.TempTable(t, regions.TableInput("routes")), testkit.TempTable(t, regions.TableInput("ledger"))}
	clock := testkit.NewClock(time.Now())
	h := newHarnessWith(t, harnessConfig{
		tune: []func(*app.ChargeConfig){func(c *app.ChargeConfig) {
			c.Regions = app.Regions{Region: "r1", Home: "r1", Homes: map[string]string{}, RoutesTable: tables[0], LedgerTable: tables[1]}
		}},
		deps: func(d *app.Deps) { d.Clock = clock.Now },
	})
	body := `{"amount":500,"currency":"EUR","source":"tok_visa"}`
	first := h.do(post("acme", "order-1", body))
	wantStatus(t, first, http.StatusCreated)
	created, _ := chargeOf(t, first.Body)
	db := testkit.Clients(t).DynamoDB
	for _, name := range tables { // the strong tables' Regions cannot agree
		// A retried delete whose first attempt was applied finds nothing.
		_, err := db.DeleteTable(t.Context(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		if _, gone := errors.AsType[*types.ResourceNotFoundException](err); err != nil && !gone {
			t.Fatal(err)
		}
	}
	clock.Advance(regions.DefaultLease)
	fresh := h.do(post("acme", "order-2", body))
	replay := h.do(post("acme", "order-1", body))
	read := h.do(get("acme", created))
	for name, r := range map[string]events.APIGatewayV2HTTPResponse{"a first charge": fresh, "a replay": replay, "a read": read} {
		if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(r.Body, "not carried out") {
			t.Errorf("%s: %d %s, want 503, not carried out", name, r.StatusCode, r.Body)
		}
	}
}

// notification is Stripe's event that acme's authorization id, in tr,
// was canceled.
func (tr *twoRegions) notification(t *testing.T, id string) charge.Notification {
	t.Helper()
	row := tr.r1.row(t, "acme", id)
	key, err := idem.NewKey("acme", charge.ChargeOperation, string(row.IdempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	return charge.Notification{
		Provider: "stripe", EventID: "evt_" + strings.ReplaceAll(newKey(), "-", ""),
		Command: key, Reference: charge.ProviderReference(key, row.CreatedAt), Row: id,
		Result: provider.Result{Status: provider.StatusCanceled},
	}
}

// notifier is region's service for Stripe's events, in tr.
func (tr *twoRegions) notifier(t *testing.T, region string) *charge.Service {
	t.Helper()
	return tr.r1.d.ReconcileService(t, func(w *testkit.Wiring) {
		w.Reconcile.Regions, w.Deps.Clock = tr.regions(region), tr.clock.Now
	})
}

// TestAWebhookIsSettledInTheServingRegion: r1 serves acme, no failover
// ever. Stripe tells both Regions an authorization of acme's was
// canceled. r1 settles it: the event's key is acme's, whose route the
// fence reads. r2 acknowledges its delivery once r1's record is there.
func TestAWebhookIsSettledInTheServingRegion(t *testing.T) {
	t.Parallel()
	tr := newTwoRegions(t)
	n := tr.notification(t, tr.r1.authorized(t, "acme", 1000))
	res, err := tr.notifier(t, "r1").Notify(t.Context(), n)
	if err != nil || res.Outcome != charge.OutcomeResolvedCanceled {
		t.Fatalf("r1, serving acme, settles its event: %+v, %v; want %q", res, err, charge.OutcomeResolvedCanceled)
	}
	res, err = tr.notifier(t, "r2").Notify(t.Context(), n)
	if err != nil || !res.Replayed {
		t.Fatalf("r2, with r1's record of the event: %+v, %v; want it acknowledged, replayed", res, err)
	}
}

// TestAnEventAcknowledgedByTheOtherRegionIsNotLostInAFailover: Stripe
// sends every event to both Regions' endpoints. r1 serves acme, and is
// failing: its delivery fails, and Stripe will deliver it again there.
// r2 does not serve acme, and has no record of the event from r1. So it
// does not acknowledge it, and Stripe delivers it to r2 again. Then acme
// fails over to r2, and r1 returns drained. r2 settles the event; r1
// acknowledges its own delivery.
func TestAnEventAcknowledgedByTheOtherRegionIsNotLostInAFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tr := newTwoRegions(t)
	id := tr.r1.authorized(t, "acme", 1000)
	n := tr.notification(t, id)
	r1, r2 := tr.notifier(t, "r1"), tr.notifier(t, "r2")
	// r1's delivery fails (r1 is down). r2's:
	res, err := r2.Notify(ctx, n)
	if err != nil || res.Outcome != charge.OutcomeWrongRegion || res.Region != "r1" {
		t.Fatalf("r2, not serving acme, with no record of the event: %+v, %v; want %q naming r1", res, err, charge.OutcomeWrongRegion)
	}
	tr.failOver(t)
	tr.clock.Advance(regions.FenceDelay + time.Second)
	tr.drain(t)
	// Stripe delivers the event again to both.
	res, err = r2.Notify(ctx, n)
	if got := tr.r1.row(t, "acme", id); err != nil || res.Outcome != charge.OutcomeResolvedCanceled || got.Status != charge.StatusCanceled {
		t.Fatalf("r2, serving acme, redelivered the event: %+v, %v, the charge %s; want %q", res, err, got.Status, charge.OutcomeResolvedCanceled)
	}
	if res, err = r1.Notify(ctx, n); err != nil || !res.Replayed {
		t.Fatalf("r1, back, with r2's record of the event: %+v, %v; want it acknowledged, replayed", res, err)
	}
}

// TestAnEventOfAnotherRegionsTenantIsDeliveredAgain: r2's endpoint gets
// Stripe's event about acme, whom r1 serves, before r1's record of it is
// there. r2 answers 421 wrong-region, naming r1, so Stripe delivers the
// event again.
func TestAnEventOfAnotherRegionsTenantIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	tr := newTwoRegions(t)
	whsec := testkit.Secret(t, testWhsec)
	h := tr.handler(t, "r2", func(w *testkit.Wiring) { w.Charge.WebhookSecretName = whsec })
	payload := piEvent("payment_intent.succeeded", "acme", newKey(), "co_x")
	req := webhookEvent(payload, sign(payload, testWhsec, time.Now()))
	resp, err := h.Handle(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	validateContract(t, req, resp)
	if got := problemType(t, resp); resp.StatusCode != http.StatusMisdirectedRequest || got != httpapi.ProblemWrongRegion.Slug || !strings.Contains(resp.Body, "r1") {
		t.Fatalf("r2's endpoint, r1 serving acme: %d %s; want 421 wrong-region naming r1", resp.StatusCode, resp.Body)
	}
}

// TestANewIntentAfterADeletedReleaseIsANewCommand: acme, served by r1,
// charges 500 under a key; the provider is unavailable, and the key is
// released. The provider lands the request after all. The release
// expires, and DynamoDB's TTL deletes it. The ledger's claim records the
// release's end. A new intent under the key is a new command at once:
// another reference. That holds for another body, charged 900, and for
// the released request's very body, the contract's "new command with a
// new reference". So too in r2, once acme failed over and r1 is drained:
// r2 would inherit a live claim, but the release ended it.
func TestANewIntentAfterADeletedReleaseIsANewCommand(t *testing.T) {
	t.Parallel()
	releasedBody := `{"amount":500,"currency":"EUR","source":"` + providersim.SourceUnavailable + `"}`
	for _, tc := range []struct {
		moved bool
		body  string
		want  int
	}{
		{false, `{"amount":900,"currency":"EUR","source":"tok_visa"}`, http.StatusCreated},
		{true, `{"amount":900,"currency":"EUR","source":"tok_visa"}`, http.StatusCreated},
		{false, releasedBody, http.StatusServiceUnavailable},
		{true, releasedBody, http.StatusServiceUnavailable},
	} {
		t.Run(fmt.Sprintf("failed over %t, the released body %t", tc.moved, tc.body == releasedBody), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			tr := newTwoRegions(t)
			key := newKey()
			k := mustKey(t, "acme", key)
			wantStatus(t, tr.r1.do(post("acme", key, releasedBody)), http.StatusServiceUnavailable)
			rec, err := tr.r1.store.Get(ctx, k)
			if err != nil || rec.Status != idem.StatusReleased {
				t.Fatalf("the first intent's record: %+v, %v; want RELEASED", rec, err)
			}
			released := charge.ProviderReference(k, rec.CreatedAt)
			if _, err := provider.NewClient(tr.r1.d.ProviderURL, "").Charge(ctx, provider.ChargeRequest{
				Reference: released, Amount: 500, Currency: "EUR", Source: providersim.SourceVisa,
			}); err != nil {
				t.Fatal(err)
			}
			serving := tr.r1
			if tc.moved {
				tr.failOver(t)
				tr.clock.Advance(regions.FenceDelay + time.Second)
				tr.drain(t)
				serving = tr.r2
			}
			tr.clock.Advance(rec.ExpiresAt.Add(time.Second).Sub(tr.clock.Now()))
			if _, err := testkit.Clients(t).DynamoDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(tr.r1.d.IdempotencyTable),
				Key: map[string]ddbtypes.AttributeValue{dynamostore.AttrPK: &ddbtypes.AttributeValueMemberS{Value: k.String()}}}); err != nil {
				t.Fatal(err)
			}
			landed := tr.r1.sim.Ledger().References[released]
			answer := serving.do(post("acme", key, tc.body))
			wantStatus(t, answer, tc.want)
			if made := tr.r1.sim.Ledger().References[released]; made != landed {
				t.Fatalf("the new intent reached the provider under the released reference: %+v, was %+v", made, landed)
			}
			next, err := serving.store.Get(ctx, k)
			if err != nil || !next.CreatedAt.After(rec.CreatedAt) {
				t.Fatalf("the new intent's record: %+v, %v; want a new command, created after %s", next, err, rec.CreatedAt)
			}
			if tc.want != http.StatusCreated {
				return
			}
			var c struct {
				Amount            int64
				ProviderReference string `json:"provider_reference"`
			}
			if err := json.Unmarshal([]byte(answer.Body), &c); err != nil {
				t.Fatal(err)
			}
			if made := tr.r1.sim.Ledger().References[c.ProviderReference]; c.ProviderReference == released || c.Amount != 900 || made.Amount != 900 {
				t.Fatalf("the new intent: %s; the provider holds %+v under its reference", answer.Body, made)
			}
		})
	}
}

// TestAnOperatorSettlesOnlyWhereTheRegionMayWrite: SettleByOperator, and
// MaySettle before it, refuse with nothing written in a Region not serving
// the tenant, and for a command older than a failover not drained. Once
// the old Region is drained, the serving one settles it.
func TestAnOperatorSettlesOnlyWhereTheRegionMayWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tr := newTwoRegions(t)
	db := testkit.Clients(t).DynamoDB
	r1, err := dynamostore.New(db, tr.r1.d.IdempotencyTable, func(o *dynamostore.Options) { o.Region, o.Ledger, o.Clock = "r1", tr.ledger, tr.clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idem.NewKey("acme", charge.ChargeOperation, "order-1")
	begun, err := r1.Begin(ctx, key, idem.FingerprintOf([]byte("{}")), []byte(`{"amount":500,"currency":"EUR"}`))
	if err != nil {
		t.Fatal(err)
	}
	operator := func(region string) *charge.Service {
		return tr.r1.d.ReconcileService(t, func(w *testkit.Wiring) { w.Reconcile.Regions, w.Deps.Clock = tr.regions(region), tr.clock.Now })
	}
	released := provider.Result{Status: provider.StatusNotFound, Reference: charge.ProviderReference(key, begun.Lease.CreatedAt)}
	refused := func(svc *charge.Service, want charge.Outcome) {
		t.Helper()
		if res, ok := svc.MaySettle(ctx, key, begun.Lease.CreatedAt); ok || res.Outcome != want {
			t.Errorf("MaySettle: %+v, %t; want %s", res, ok, want)
		}
		out, _, err := svc.SettleByOperator(ctx, key, released)
		rec, gerr := r1.Get(ctx, key)
		if err != nil || out != want || gerr != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken != begun.Lease.Token {
			t.Fatalf("SettleByOperator: %s, %v; record %+v (%v); want %s, the record as it was", out, err, rec, gerr, want)
		}
	}
	r2 := operator("r2")
	refused(r2, charge.OutcomeWrongRegion)

	tr.failOver(t)
	tr.clock.Advance(regions.FenceDelay + time.Second)
	refused(r2, charge.OutcomeFailoverPending)
	refused(operator("r1"), charge.OutcomeWrongRegion)

	tr.drain(t)
	if out, rec, err := r2.SettleByOperator(ctx, key, released); err != nil || out != charge.OutcomeReleased || rec == nil || rec.Status != idem.StatusReleased {
		t.Fatalf("SettleByOperator in r2 once r1 is drained: %s, %+v, %v; want it released", out, rec, err)
	}
}
