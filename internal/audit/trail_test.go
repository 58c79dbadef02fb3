package audit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/local/eventsource"
	"github.com/chargeonce/chargeonce/internal/local/gateway"
	"github.com/chargeonce/chargeonce/internal/provider/stripe/stripesim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

const day = 24 * time.Hour

// expire deletes, as DynamoDB's TTL does, every record of d whose
// retention has ended by now. moto's stream names no one for it: byTTL
// names TTL, as AWS's stream does.
func expire(t *testing.T, d *testkit.Deployment, now time.Time) {
	t.Helper()
	db := testkit.Clients(t).DynamoDB
	out, err := db.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(d.IdempotencyTable)})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range out.Items {
		exp, ok := item[dynamostore.AttrExpiresAt].(*ddbtypes.AttributeValueMemberN)
		if !ok {
			continue // in flight: TTL never deletes it
		}
		if secs, err := strconv.ParseInt(exp.Value, 10, 64); err != nil || time.Unix(secs, 0).After(now) {
			continue
		}
		if _, err := db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
			TableName: aws.String(d.IdempotencyTable), Key: map[string]ddbtypes.AttributeValue{dynamostore.AttrPK: item[dynamostore.AttrPK]},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// chargeHistory is the ChargeHistory tr reads of tenant's charge id, in
// d's charges table.
func chargeHistory(t *testing.T, d *testkit.Deployment, tr *testkit.Trail, tenant, id string) ([]audit.Entry, error) {
	t.Helper()
	rows, err := charge.NewRows(testkit.Clients(t).DynamoDB, d.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Reader(t).ChargeHistory(t.Context(), rows, tenant, id)
}

// TestAChargesHistoryOutlivesItsRecords: a card declined under a key;
// the key, free again once its record expired, charges another card;
// support refunds it; three days later the card's issuer fails the
// refund, and Stripe says so. Three days after the last record expired,
// the charge's history still says who charged it, who refunded it, what
// Stripe said, and that the same key was declined before.
func TestAChargesHistoryOutlivesItsRecords(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	d := testkit.Deploy(t)
	var api http.Handler
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.ServeHTTP(w, r) }))
	t.Cleanup(apiSrv.Close)
	const whsec = "whsec_test_audit"
	sim := stripesim.New(func(o *stripesim.Options) {
		o.SecretKey, o.WebhookURL, o.WebhookSecret = testkit.StripeSecret, apiSrv.URL+"/webhooks/stripe", whsec
		o.WebhookRetry, o.Clock = 100*time.Millisecond, clock.Now
	})
	t.Cleanup(sim.WaitWebhooks)
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)
	key, hookKey := testkit.Secret(t, testkit.StripeSecret), testkit.Secret(t, whsec)
	h := d.ChargeHandler(t, func(w *testkit.Wiring) {
		w.Charge.Provider, w.Charge.ProviderURL, w.Charge.ProviderSecretName = app.ProviderStripe, simSrv.URL, key
		w.Charge.WebhookSecretName, w.Deps.Clock = hookKey, clock.Now
	})
	gw, err := gateway.New(h.Handle, httpapi.Routes, gateway.WithPublicRoutes(httpapi.RouteWebhook), gateway.WithTenantClaim(testkit.TenantClaim))
	if err != nil {
		t.Fatal(err)
	}
	api = gw
	tr := d.Audit(t)
	// The streams stamp each change with the test's time, as it goes.
	tr.Handle = byTTL(stamped(tr.Handle, clock.Now))
	drain := func() {
		t.Helper()
		if b := tr.Drain(t); b.Failed != 0 {
			t.Fatalf("drained %+v", b)
		}
	}
	tenant, client, refundKey := testkit.UniqueName("acme"), testkit.UniqueName("order"), testkit.UniqueName("refund")
	body := func(pm string) string { return `{"amount":1500,"currency":"EUR","source":"` + pm + `"}` }

	send(t, h, alice.as(testkit.PostCharge(tenant, client, body(stripesim.PMDeclined))), http.StatusPaymentRequired)
	drain()
	clock.Advance(day + time.Hour)
	expire(t, d, clock.Now())
	drain()
	id := send(t, h, alice.as(testkit.PostCharge(tenant, client, body(stripesim.PMRefundFail))), http.StatusCreated)["id"].(string)
	send(t, h, carol.as(testkit.PostRefund(tenant, refundKey, id, `{}`)), http.StatusCreated)
	sim.WaitWebhooks()
	drain()
	clock.Advance(3 * day)
	expire(t, d, clock.Now())
	drain()
	if n := sim.FailRefunds(); n != 1 {
		t.Fatalf("stripesim failed %d refunds, want 1", n)
	}
	sim.WaitWebhooks()
	drain()
	clock.Advance(day)
	expire(t, d, clock.Now())
	drain()
	clock.Advance(3 * day)

	store, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	for op, k := range map[string]string{charge.ChargeOperation: client, charge.RefundOperation: refundKey} {
		k, _ := idem.NewKey(tenant, op, k)
		if _, err := store.Get(t.Context(), k); err == nil {
			t.Fatalf("the %s record is still there", op)
		}
	}
	got, err := chargeHistory(t, d, tr, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the charge's history, three days after its last record expired:\n%s", show(got))
	charged, refunded := hash(t, tenant, charge.ChargeOperation, client), hash(t, tenant, charge.RefundOperation, refundKey)

	declined := one(t, got, charged, audit.WhatFailed)
	if declined.Answer != http.StatusPaymentRequired || declined.Problem == "" || declined.Charge == id || *declined.Principal != *alice.principal() {
		t.Errorf("the declined attempt on the same key: %s", show([]audit.Entry{declined}))
	}
	made := one(t, got, charged, audit.WhatSucceeded)
	if made.Answer != http.StatusCreated || made.Charge != id || *made.Principal != *alice.principal() || *made.Origin != *alice.origin() {
		t.Errorf("who charged it: %s", show([]audit.Entry{made}))
	}
	refund := one(t, got, refunded, audit.WhatSucceeded)
	if refund.Answer != http.StatusCreated || refund.Charge != id || *refund.Principal != *carol.principal() || *refund.Origin != *carol.origin() {
		t.Errorf("who refunded it: %s", show([]audit.Entry{refund}))
	}
	var word, failed *audit.Entry
	for i, e := range got {
		switch {
		case e.Command == refunded && e.What == audit.WhatSucceeded && e.Principal != nil && e.Principal.Provider == "stripe" && e.Origin.Event != "":
			word = &got[i]
		case e.KeyHash == refunded && e.What == audit.WhatRowChanged && e.Status == charge.RefundFailed && e.Was == charge.StatusSucceeded:
			failed = &got[i]
		}
	}
	if word == nil || failed == nil || word.Refund != refund.Refund {
		t.Errorf("Stripe's word on the refund (%+v) and the refund it failed (%+v) are not both in the history", word, failed)
	}
	if expired := find(got, charged, audit.WhatExpired); len(expired) != 2 || len(find(got, refunded, audit.WhatExpired)) != 1 {
		t.Errorf("the records' expiries: %s", show(expired))
	}
	if i := func(e audit.Entry) int {
		return slices.IndexFunc(got, func(g audit.Entry) bool { return g.Event == e.Event })
	}; failed == nil ||
		!(i(declined) < i(made) && i(made) < i(refund) && i(refund) < i(*failed)) {
		t.Errorf("out of order:\n%s", show(got))
	}
}

// stamped is h handed each change stamped with now, to the second, as
// DynamoDB stamps it.
func stamped(h eventsource.StreamHandler, now func() time.Time) eventsource.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) error {
		for i := range ev.Records {
			ev.Records[i].Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: now().Truncate(time.Second)}
		}
		return h(ctx, ev)
	}
}

// byTTL is h handed each removal as AWS's stream hands TTL's: named the
// DynamoDB service's. A test with it removes records only by expire.
func byTTL(h eventsource.StreamHandler) eventsource.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) error {
		for i, r := range ev.Records {
			if r.EventName == "REMOVE" {
				ev.Records[i].UserIdentity = &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: audit.ServiceTTL}
			}
		}
		return h(ctx, ev)
	}
}

// TestAChargesHistoryWithinOneSecondIsInTheOrderItHappened: a charge and
// its refund, their changes stamped with one second, read in the order
// they happened. The charge's claim, its row, its settlement; then the
// refund's claim, its hold on the charge's row, its own row, its
// settlement.
func TestAChargesHistoryWithinOneSecondIsInTheOrderItHappened(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	tr := d.Audit(t)
	at := time.Now()
	tr.Handle = stamped(tr.Handle, func() time.Time { return at })
	tenant, kCharge, kRefund := testkit.UniqueName("acme"), testkit.UniqueName("order"), testkit.UniqueName("refund")
	id := send(t, h, alice.as(testkit.PostCharge(tenant, kCharge, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	send(t, h, bob.as(testkit.PostRefund(tenant, kRefund, id, `{"amount":500}`)), http.StatusCreated)
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	got, err := chargeHistory(t, d, tr, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	charged, refunded := hash(t, tenant, charge.ChargeOperation, kCharge), hash(t, tenant, charge.RefundOperation, kRefund)
	want := []struct{ key, what string }{
		{charged, audit.WhatClaimed}, {charged, audit.WhatRowWritten}, {charged, audit.WhatSucceeded},
		{refunded, audit.WhatClaimed}, {charged, audit.WhatRowChanged}, {refunded, audit.WhatRowWritten},
		{charged, audit.WhatRowChanged}, {refunded, audit.WhatSucceeded},
	}
	var order []struct{ key, what string }
	for _, e := range got {
		order = append(order, struct{ key, what string }{e.KeyHash, e.What})
	}
	if !slices.Equal(order, want) {
		t.Errorf("the history, all in one second:\n%s", show(got))
	}
}

// TestAChargesHistoryNeedsAWholeChargeID: ChargeHistory refuses what is
// not a charge id, a prefix of one say. It would read another charge's
// history for it, or several as one.
func TestAChargesHistoryNeedsAWholeChargeID(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	tr := d.Audit(t)
	tenant := testkit.UniqueName("acme")
	id := send(t, h, alice.as(testkit.PostCharge(tenant, testkit.UniqueName("order"), `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	for _, prefix := range []string{id[:len(id)-1], "ch_", id + "#"} {
		if got, err := chargeHistory(t, d, tr, tenant, prefix); !errors.Is(err, charge.ErrNotChargeID) {
			t.Errorf("the history of %q: %d entries, %v; want it refused", prefix, len(got), err)
		}
	}
}

// TestTwoRefundsWithinOneSecondReadOneAfterTheOther: a charge and two
// refunds, one after the other, all stamped with one second. Each refund
// reads whole: its claim, its hold on the charge's row, its own row, the
// hold settled, its settlement. The second's follows the first's.
func TestTwoRefundsWithinOneSecondReadOneAfterTheOther(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	tr := d.Audit(t)
	at := time.Now()
	tr.Handle = stamped(tr.Handle, func() time.Time { return at })
	tenant, kCharge, kA, kB := testkit.UniqueName("acme"), testkit.UniqueName("order"), testkit.UniqueName("refund"), testkit.UniqueName("refund")
	id := send(t, h, alice.as(testkit.PostCharge(tenant, kCharge, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	send(t, h, bob.as(testkit.PostRefund(tenant, kA, id, `{"amount":500}`)), http.StatusCreated)
	send(t, h, bob.as(testkit.PostRefund(tenant, kB, id, `{"amount":400}`)), http.StatusCreated)
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	got, err := chargeHistory(t, d, tr, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	charged := hash(t, tenant, charge.ChargeOperation, kCharge)
	a, b := hash(t, tenant, charge.RefundOperation, kA), hash(t, tenant, charge.RefundOperation, kB)
	type step struct{ key, what string }
	want := []step{
		{charged, audit.WhatClaimed}, {charged, audit.WhatRowWritten}, {charged, audit.WhatSucceeded},
		{a, audit.WhatClaimed}, {charged, audit.WhatRowChanged}, {a, audit.WhatRowWritten}, {charged, audit.WhatRowChanged}, {a, audit.WhatSucceeded},
		{b, audit.WhatClaimed}, {charged, audit.WhatRowChanged}, {b, audit.WhatRowWritten}, {charged, audit.WhatRowChanged}, {b, audit.WhatSucceeded},
	}
	var order []step
	for _, e := range got {
		order = append(order, step{e.KeyHash, e.What})
	}
	if !slices.Equal(order, want) {
		name := map[string]string{charged: "charge", a: "refund A", b: "refund B"}
		var lines string
		for _, s := range order {
			lines += "  " + name[s.key] + " " + s.what + "\n"
		}
		t.Errorf("two refunds, one after the other, within one second; read as:\n%s", lines)
	}
}

// TestAChargesHistoryHoldsNoLaterCharge: a key charges, its record
// expires, and the key charges again: another command, another charge.
// The first charge's history is its command's and its refunds': it holds
// no entry of the second charge. The second's holds the first's, which
// led to it on the same key.
func TestAChargesHistoryHoldsNoLaterCharge(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t, func(w *testkit.Wiring) { w.Deps.Clock = clock.Now })
	tr := d.Audit(t)
	tenant, client := testkit.UniqueName("acme"), testkit.UniqueName("order")
	first := send(t, h, alice.as(testkit.PostCharge(tenant, client, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	if b := tr.Drain(t); b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	clock.Advance(day + time.Hour)
	expire(t, d, clock.Now())
	second := send(t, h, carol.as(testkit.PostCharge(tenant, client, `{"amount":9900,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	if b := tr.Drain(t); b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	got, err := chargeHistory(t, d, tr, tenant, first)
	if err != nil {
		t.Fatal(err)
	}
	of := func(history []audit.Entry, id string) []audit.Entry {
		var out []audit.Entry
		for _, e := range history {
			if e.Charge == id {
				out = append(out, e)
			}
		}
		return out
	}
	if other := of(got, second); len(other) != 0 || len(of(got, first)) != len(got) {
		t.Errorf("the history of %s holds %d entries of %s:\n%s", first, len(other), second, show(got))
	}
	later, err := chargeHistory(t, d, tr, tenant, second)
	if err != nil {
		t.Fatal(err)
	}
	if len(of(later, first)) != len(got) || len(of(later, second)) == 0 {
		t.Errorf("the history of %s, which the same key's %s led to:\n%s", second, first, show(later))
	}
}

// TestARefusedRefundShowsInItsChargesHistory: a refund of more than the
// charge is refused for good, so no refund row names it. Its claim names
// the charge: the charge's history shows the refusal, and a note on it.
func TestARefusedRefundShowsInItsChargesHistory(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	tr := d.Audit(t)
	tenant, kCharge, kRefund := testkit.UniqueName("acme"), testkit.UniqueName("order"), testkit.UniqueName("refund")
	id := send(t, h, alice.as(testkit.PostCharge(tenant, kCharge, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	resp, err := h.Handle(t.Context(), bob.as(testkit.PostRefund(tenant, kRefund, id, `{"amount":99999}`)))
	if err != nil || resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Fatalf("refund of 99999: %d %s %v, want a refusal", resp.StatusCode, resp.Body, err)
	}
	if b := tr.Drain(t); b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	refund := hash(t, tenant, charge.RefundOperation, kRefund)
	claims := find(history(t, tr, refund), refund, audit.WhatClaimed)
	if len(claims) != 1 {
		t.Fatalf("the refund key's claims: %s", show(claims))
	}
	// An operator's note names the refund alone, as chargectl's does.
	archive, err := audit.NewArchive(tr.S3, tr.Config.AuditBucket)
	if err != nil {
		t.Fatal(err)
	}
	index, err := audit.NewIndex(testkit.Clients(t).DynamoDB, tr.Config.AuditIndexTable)
	if err != nil {
		t.Fatal(err)
	}
	note := audit.Entry{At: time.Now(), What: audit.WhatOperatorSettles, Tenant: tenant, Operation: charge.RefundOperation, KeyHash: refund, Refund: claims[0].Refund}
	if err := audit.Note(t.Context(), archive, index, note, audit.DefaultIndexRetention); err != nil {
		t.Fatal(err)
	}
	got, err := chargeHistory(t, d, tr, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{audit.WhatClaimed, audit.WhatFailed, audit.WhatOperatorSettles} {
		if len(find(got, refund, what)) == 0 {
			t.Errorf("charge %s's history lacks the refund's %s:\n%s", id, what, show(got))
		}
	}
}

// TestAnObjectGoneFromTheArchiveIsAnErrorWithinItsRetention: a delete
// marker hides a locked object. Within the archive's retention that is
// never routine, and the history fails naming it. Past the retention,
// the lifecycle removed it: the history reads past it, and names it.
func TestAnObjectGoneFromTheArchiveIsAnErrorWithinItsRetention(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	tr := d.Audit(t)
	tenant, client := testkit.UniqueName("acme"), testkit.UniqueName("order")
	id := send(t, h, alice.as(testkit.PostCharge(tenant, client, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)["id"].(string)
	if b := tr.Drain(t); b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	key := hash(t, tenant, charge.ChargeOperation, client)
	before := history(t, tr, key)
	bucket := aws.String(tr.Config.AuditBucket)
	out, err := tr.S3.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: bucket})
	if err != nil || len(out.Contents) != 2 {
		t.Fatalf("objects %v %v, want the records' and the rows'", out, err)
	}
	name := aws.ToString(out.Contents[0].Key)
	if _, err := tr.S3.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: bucket, Key: &name}); err != nil {
		t.Fatal(err)
	}
	if got, err := tr.Reader(t).History(t.Context(), key); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("history with an object deleted within its retention: %v, %d entries; want an error naming it:\n%s", err, len(got), show(got))
	}
	later := func() time.Time { return time.Now().AddDate(0, 0, audit.MinRetentionDays+2) }
	got, err := tr.ReaderAt(t, later).History(t.Context(), key)
	if err != nil {
		t.Fatalf("history of %d entries, one object past its retention: %v", len(before), err)
	}
	rows, err := charge.NewRows(testkit.Clients(t).DynamoDB, d.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	byCharge, err := tr.ReaderAt(t, later).ChargeHistory(t.Context(), rows, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range [][]audit.Entry{got, byCharge} {
		gone := slices.IndexFunc(h, func(e audit.Entry) bool { return e.What == audit.WhatObjectGone && e.Event == name })
		if gone < 0 || len(find(h, key, audit.WhatClaimed)) != 1 || len(find(h, key, audit.WhatSucceeded)) != 1 {
			t.Errorf("history, the rows' object gone, of %d entries: want the record's 2 and the object's:\n%s", len(before), show(h))
		}
	}
}
