package audit_test

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// caller is who sends a test's requests, as API Gateway describes them.
type caller struct{ sub, client, ip, agent string }

var (
	alice = caller{"5f1c2a9e-0b7d-4d4e-9a51-7c6f0e2b8d13", "3hq1u0o9d2kfb7m1c5kq8e4s6v", "203.0.113.7", "acme-billing/2.4 (go1.26; linux/arm64)"}
	bob   = caller{"9b0e4c7d-52a1-4f0f-b3e6-1d2c3b4a5f60", "3hq1u0o9d2kfb7m1c5kq8e4s6v", "2001:db8::42", "support-console/1.0"}
	carol = caller{"c4a8e2f1-7d6b-4c3a-8e9f-0a1b2c3d4e5f", "7ab2c9d4e6f1g3h5j7k9l2m4n6", "198.51.100.23", "Mozilla/5.0 (Macintosh) Safari/605.1.15"}
)

// as is req sent by c.
func (c caller) as(req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPRequest {
	if req.RequestContext.Authorizer != nil && req.RequestContext.Authorizer.JWT != nil {
		req.RequestContext.Authorizer.JWT.Claims["sub"] = c.sub
		req.RequestContext.Authorizer.JWT.Claims["client_id"] = c.client
	}
	req.RequestContext.HTTP.SourceIP, req.RequestContext.HTTP.UserAgent = c.ip, c.agent
	return req
}

// principal and origin are what an entry says of c.
func (c caller) principal() *audit.Principal { return &audit.Principal{Sub: c.sub, Client: c.client} }
func (c caller) origin() *audit.Origin       { return &audit.Origin{IP: c.ip, UserAgent: c.agent} }

// send sends req to h and returns the answer, which must have status.
func send(t *testing.T, h *httpapi.Handler, req events.APIGatewayV2HTTPRequest, status int) map[string]any {
	t.Helper()
	resp, err := h.Handle(t.Context(), req)
	if err != nil || resp.StatusCode != status {
		t.Fatalf("%s: %d %s %v, want %d", req.RouteKey, resp.StatusCode, resp.Body, err, status)
	}
	var body map[string]any
	_ = json.Unmarshal([]byte(resp.Body), &body)
	return body
}

// hash is the key hash the trail files tenant's client key under.
func hash(t *testing.T, tenant, operation, client string) string {
	t.Helper()
	k, err := idem.NewKey(tenant, operation, client)
	if err != nil {
		t.Fatal(err)
	}
	return k.LogHash()
}

// find is the entries of history whose What is what and whose KeyHash is
// key.
func find(history []audit.Entry, key, what string) []audit.Entry {
	var out []audit.Entry
	for _, e := range history {
		if e.KeyHash == key && e.What == what {
			out = append(out, e)
		}
	}
	return out
}

// one is the one entry find finds.
func one(t *testing.T, history []audit.Entry, key, what string) audit.Entry {
	t.Helper()
	got := find(history, key, what)
	if len(got) != 1 {
		t.Fatalf("%d %s entries of %s in\n%s", len(got), what, key, show(history))
	}
	return got[0]
}

func show(history []audit.Entry) string {
	var b []byte
	for _, e := range history {
		line, _ := json.Marshal(e)
		b = append(append(b, line...), '\n')
	}
	return string(b)
}

func history(t *testing.T, tr *testkit.Trail, subjects ...string) []audit.Entry {
	t.Helper()
	h, err := tr.Reader(t).History(t.Context(), subjects...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestEveryCommandLeavesItsEntries: a charge, a decline, a refund and a
// capture each leave entries that say who asked, from where, what was
// asked and what came back; each change once, whatever the deliveries.
func TestEveryCommandLeavesItsEntries(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	tr := d.Audit(t)
	h := d.ChargeHandler(t)
	tenant := testkit.UniqueName("acme")
	kCharge, kDecline, kRefund, kAuth := testkit.UniqueName("order"), testkit.UniqueName("order"), testkit.UniqueName("refund"), testkit.UniqueName("order")

	ch := send(t, h, alice.as(testkit.PostCharge(tenant, kCharge, `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"order 1"}`)), http.StatusCreated)
	id := ch["id"].(string)
	send(t, h, alice.as(testkit.PostCharge(tenant, kDecline, `{"amount":900,"currency":"EUR","source":"`+providersim.SourceDecline+`"}`)), http.StatusPaymentRequired)
	send(t, h, bob.as(testkit.PostRefund(tenant, kRefund, id, `{"amount":500}`)), http.StatusCreated)
	auth := send(t, h, alice.as(testkit.PostCharge(tenant, kAuth, `{"amount":700,"currency":"EUR","source":"tok_visa","capture":false}`)), http.StatusCreated)
	send(t, h, carol.as(testkit.PostMove(tenant, auth["id"].(string), "capture", "")), http.StatusOK)

	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	charged, declined, refunded := hash(t, tenant, charge.ChargeOperation, kCharge), hash(t, tenant, charge.ChargeOperation, kDecline), hash(t, tenant, charge.RefundOperation, kRefund)
	got := history(t, tr, charged, refunded)

	claim := one(t, got, charged, audit.WhatClaimed)
	if claim.Tenant != tenant || claim.Charge != id || *claim.Principal != *alice.principal() || *claim.Origin != *alice.origin() ||
		string(claim.Request) != `{"amount":1500,"currency":"EUR","description":"order 1"}` || claim.Status != string(idem.StatusInFlight) {
		t.Errorf("the charge's claim: %s", show([]audit.Entry{claim}))
	}
	if done := one(t, got, charged, audit.WhatSucceeded); done.Answer != http.StatusCreated || done.Charge != id || done.Was != string(idem.StatusInFlight) || done.ExpiresAt.IsZero() {
		t.Errorf("the charge's settlement: %s", show([]audit.Entry{done}))
	}
	if row := find(got, charged, audit.WhatRowWritten); len(row) != 1 || row[0].Charge != id || row[0].Status != charge.StatusSucceeded {
		t.Errorf("the charge's row: %s", show(row))
	}
	refund := one(t, got, refunded, audit.WhatSucceeded)
	if refund.Charge != id || refund.Refund == "" || *refund.Principal != *bob.principal() || *refund.Origin != *bob.origin() || refund.Answer != http.StatusCreated {
		t.Errorf("the refund: %s", show([]audit.Entry{refund}))
	}
	if rows := find(got, refunded, audit.WhatRowWritten); len(rows) != 1 || rows[0].Refund != refund.Refund {
		t.Errorf("the refund's row: %s", show(rows))
	}
	if holds := find(got, charged, audit.WhatRowChanged); len(holds) != 2 {
		t.Errorf("the charge's row held the refund, then settled it: %s", show(holds))
	}
	if !slices.IsSortedFunc(got, func(a, b audit.Entry) int { return a.At.Compare(b.At) }) {
		t.Errorf("history out of order:\n%s", show(got))
	}

	decline := one(t, history(t, tr, declined), declined, audit.WhatFailed)
	if decline.Answer != http.StatusPaymentRequired || decline.Problem == "" || *decline.Principal != *alice.principal() {
		t.Errorf("the decline: %s", show([]audit.Entry{decline}))
	}

	moves := find(history(t, tr, hash(t, tenant, charge.ChargeOperation, kAuth)), hash(t, tenant, charge.ChargeOperation, kAuth), audit.WhatRowChanged)
	if len(moves) != 2 || moves[0].Status != charge.StatusCapturing || moves[0].Principal == nil || *moves[0].Principal != *carol.principal() ||
		*moves[0].Origin != *carol.origin() || moves[1].Status != charge.StatusSucceeded || moves[1].Principal != nil {
		t.Errorf("the capture: began by carol, then settled: %s", show(moves))
	}

	before := len(history(t, tr, charged, refunded, declined))
	if b := tr.Redeliver(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("redelivered %+v", b)
	}
	if after := len(history(t, tr, charged, refunded, declined)); after != before {
		t.Errorf("after every change was delivered again the history holds %d entries, want %d", after, before)
	}
}

// written is every byte the trail wrote: each version of each object,
// decompressed, with its name, and each item of the index.
func written(t *testing.T, tr *testkit.Trail) string {
	t.Helper()
	var all strings.Builder
	for p := s3.NewListObjectVersionsPaginator(tr.S3, &s3.ListObjectVersionsInput{Bucket: aws.String(tr.Config.AuditBucket)}); p.HasMorePages(); {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range page.Versions {
			out, err := tr.S3.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(tr.Config.AuditBucket), Key: v.Key, VersionId: v.VersionId})
			if err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(out.Body)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(zr)
			out.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			all.WriteString(aws.ToString(v.Key) + "\n")
			all.Write(body)
		}
	}
	items, err := testkit.Clients(t).DynamoDB.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(tr.Config.AuditIndexTable)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items.Items {
		for _, v := range it {
			if s, ok := v.(*ddbtypes.AttributeValueMemberS); ok {
				all.WriteString(s.Value + "\n")
			}
		}
	}
	return all.String()
}

// TestNoRawKeyCardSourceOrSecretIsEverWritten: on Stripe, whose records
// keep the card's PaymentMethod to replay a request, every byte of the
// trail names keys by their hash alone, and holds no source and no key of
// the provider's.
func TestNoRawKeyCardSourceOrSecretIsEverWritten(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	d := testkit.Deploy(t)
	_, onStripe := testkit.Stripe(t, clock.Now)
	h := d.ChargeHandler(t, onStripe)
	tr := d.Audit(t)
	tenant := testkit.UniqueName("acme")
	raw := []string{"order-4242-jane.doe@example.com", "refund-of-order-4242", "order-4243-capture-later"}
	ch := send(t, h, alice.as(testkit.PostCharge(tenant, raw[0], `{"amount":1500,"currency":"EUR","source":"pm_card_visa"}`)), http.StatusCreated)
	send(t, h, bob.as(testkit.PostRefund(tenant, raw[1], ch["id"].(string), `{}`)), http.StatusCreated)
	auth := send(t, h, alice.as(testkit.PostCharge(tenant, raw[2], `{"amount":700,"currency":"EUR","source":"pm_card_visa","capture":false}`)), http.StatusCreated)
	send(t, h, carol.as(testkit.PostMove(tenant, auth["id"].(string), "cancel", "")), http.StatusOK)
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	all := written(t, tr)
	if !strings.Contains(all, hash(t, tenant, charge.ChargeOperation, raw[0])) {
		t.Fatalf("the trail does not name the charge's key by its hash:\n%s", all)
	}
	for _, secret := range append(raw, "pm_card_visa", testkit.StripeSecret) {
		for line := range strings.Lines(all) {
			if strings.Contains(line, secret) {
				t.Errorf("the trail holds %q: %s", secret, line)
			}
		}
	}
}

// outage is an HTTP transport that fails every request while down.
type outage struct {
	down atomic.Bool
	next http.RoundTripper
}

func (o *outage) RoundTrip(r *http.Request) (*http.Response, error) {
	if o.down.Load() {
		return nil, errors.New("connection refused")
	}
	return o.next.RoundTrip(r)
}

// streamed is the id of every change the streams of tr hold.
func streamed(t *testing.T, tr *testkit.Trail) map[string]bool {
	t.Helper()
	api := testkit.Streams(t)
	ids := map[string]bool{}
	for _, arn := range tr.Streams {
		desc, err := api.DescribeStream(t.Context(), &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)})
		if err != nil {
			t.Fatal(err)
		}
		for _, shard := range desc.StreamDescription.Shards {
			it, err := api.GetShardIterator(t.Context(), &dynamodbstreams.GetShardIteratorInput{
				StreamArn: aws.String(arn), ShardId: shard.ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := api.GetRecords(t.Context(), &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Records {
				ids[aws.ToString(r.EventID)] = true
			}
		}
	}
	return ids
}

// archived is the id of every entry the archive holds, counted.
func archived(t *testing.T, tr *testkit.Trail) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for line := range strings.Lines(written(t, tr)) {
		var e audit.Entry
		if json.Unmarshal([]byte(line), &e) == nil && e.Event != "" {
			ids[e.Event]++
		}
	}
	return ids
}

// TestAnOutageOfTheTrailIsCaughtUpWithNothingMissing: while S3 cannot be
// reached, every batch fails, says so at ERROR (the function's Errors,
// which alarm), and the streams keep their place. Once it can, every
// change is written, none twice over and none missing, and the charges
// answered as ever meanwhile.
func TestAnOutageOfTheTrailIsCaughtUpWithNothingMissing(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	s3down := &outage{next: http.DefaultTransport}
	logs := &testkit.LogBuffer{}
	tr := d.Audit(t, func(w *testkit.Wiring) {
		w.Deps.S3 = s3.New(testkit.S3(t).Options(), func(o *s3.Options) {
			o.HTTPClient, o.RetryMaxAttempts = &http.Client{Transport: s3down}, 1
		})
		w.Deps.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	tenant := testkit.UniqueName("acme")
	s3down.down.Store(true)
	var keys []string
	for range 3 {
		k := testkit.UniqueName("order")
		send(t, h, alice.as(testkit.PostCharge(tenant, k, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)
		keys = append(keys, hash(t, tenant, charge.ChargeOperation, k))
	}
	for range 2 {
		if b := tr.Drain(t); b.Records == 0 || b.Failed != b.Records {
			t.Fatalf("during the outage: %+v, want every batch failed", b)
		}
	}
	if got := archived(t, tr); len(got) != 0 {
		t.Fatalf("during the outage the archive holds %v", got)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"audit: batch not written; it is delivered again"`) {
		t.Errorf("no ERROR line for the failed batches:\n%s", logs)
	}

	s3down.down.Store(false)
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("after the outage: %+v", b)
	}
	want, got := streamed(t, tr), archived(t, tr)
	for id := range want {
		if got[id] != 1 {
			t.Errorf("change %s archived %d times, want once", id, got[id])
		}
	}
	if len(got) != len(want) {
		t.Errorf("archived %d changes, the streams hold %d", len(got), len(want))
	}
	for _, k := range keys {
		one(t, history(t, tr, k), k, audit.WhatSucceeded)
	}
}

// TestATypicalChargesRecordStaysUnderOneKilobyte: the principal and
// origin a claim keeps add a few score bytes to a record, which stays
// within one write unit.
func TestATypicalChargesRecordStaysUnderOneKilobyte(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	db := testkit.Clients(t).DynamoDB
	tenant := testkit.UniqueName("acme")
	size := func(req events.APIGatewayV2HTTPRequest, key string) int {
		t.Helper()
		send(t, h, req, http.StatusCreated)
		k, _ := idem.NewKey(tenant, charge.ChargeOperation, key)
		out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{
			TableName: aws.String(d.IdempotencyTable), ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{dynamostore.AttrPK: &ddbtypes.AttributeValueMemberS{Value: k.String()}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return testkit.ItemSize(out.Item)
	}
	body := `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"Order #1042: 2 items"}`
	anonymous, typical := testkit.UniqueName("order"), testkit.UniqueName("order")
	without := size(testkit.PostCharge(tenant, anonymous, body), anonymous)
	with := size(alice.as(testkit.PostCharge(tenant, typical, body)), typical)
	t.Logf("a first charge's settled record: %d B, %d B of them who asked and from where", with, with-without)
	if with >= 1024 {
		t.Errorf("a typical charge's record is %d B, want under 1 KB", with)
	}
}

// TestAnEntryIsAFewHundredBytes measures what the trail stores of a
// charge: its entries' size as JSON and gzipped, which docs/capacity.md
// prices.
func TestAnEntryIsAFewHundredBytes(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	tr := d.Audit(t)
	tenant := testkit.UniqueName("acme")
	for range 50 {
		send(t, h, alice.as(testkit.PostCharge(tenant, testkit.UniqueName("order"), `{"amount":1500,"currency":"EUR","source":"tok_visa","description":"Order #1042: 2 items"}`)), http.StatusCreated)
	}
	tr.Drain(t)
	var entries, plain, gzipped int
	out, err := tr.S3.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(tr.Config.AuditBucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out.Contents {
		gzipped += int(aws.ToInt64(o.Size))
	}
	for line := range strings.Lines(written(t, tr)) {
		if strings.HasPrefix(line, "{") {
			entries++
			plain += len(line)
		}
	}
	t.Logf("%d entries of 50 charges (3 changes each before TTL's): %d B each as JSON, %d B gzipped, in %d objects",
		entries, plain/entries, gzipped/entries, len(out.Contents))
	if entries != 150 || plain/entries >= 1024 {
		t.Errorf("%d entries of %d B each, want 150 under 1 KB", entries, plain/entries)
	}
}

// TestADeletionWithinRetentionReadLateIsStillOneToLookInto: a record
// deleted before its retention ended is not TTL's, though the trail reads
// it after that end: behind, say, after an outage. The change's own time
// says when it was deleted; the handler's clock does not.
func TestADeletionWithinRetentionReadLateIsStillOneToLookInto(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	h := d.ChargeHandler(t)
	late := testkit.NewClock(time.Now().Add(3 * 24 * time.Hour))
	tr := d.Audit(t, func(w *testkit.Wiring) { w.Deps.Clock = late.Now })
	tenant, client := testkit.UniqueName("acme"), testkit.UniqueName("order")
	send(t, h, alice.as(testkit.PostCharge(tenant, client, `{"amount":1500,"currency":"EUR","source":"tok_visa"}`)), http.StatusCreated)
	k, _ := idem.NewKey(tenant, charge.ChargeOperation, client)
	if _, err := testkit.Clients(t).DynamoDB.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(d.IdempotencyTable), Key: map[string]ddbtypes.AttributeValue{dynamostore.AttrPK: &ddbtypes.AttributeValueMemberS{Value: k.String()}},
	}); err != nil {
		t.Fatal(err)
	}
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	got := history(t, tr, k.LogHash())
	if gone := one(t, got, k.LogHash(), audit.WhatDeleted); gone.Principal != nil && gone.Principal.Service == audit.ServiceTTL {
		t.Errorf("the deletion: %s", show([]audit.Entry{gone}))
	}
}

// TestAQueueMarkIsFiledAsOneNotAsASettlement: the sweeper marks a stuck
// key queued; the reconciler's message renews the mark, takes the key
// over and settles it; then it removes the mark from the settled record.
// The command settled once: its history holds one settlement, and the
// mark's three changes as what they are.
func TestAQueueMarkIsFiledAsOneNotAsASettlement(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	tr := d.Audit(t)
	ctx := t.Context()
	clock := testkit.NewClock(time.Now().Add(-10 * time.Minute))
	st, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	k, err := idem.NewKey(testkit.UniqueName("acme"), charge.ChargeOperation, testkit.UniqueName("order"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Begin(ctx, k, idem.FingerprintOf([]byte(`{}`)), []byte(`{"amount":1500,"currency":"EUR"}`)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute)
	until := clock.Now().Add(15 * time.Minute)
	if ok, err := st.MarkQueued(ctx, k, until); err != nil || !ok { // the sweeper
		t.Fatalf("mark: %v %v", ok, err)
	}
	if err := st.RenewQueued(ctx, k, until, time.Hour); err != nil { // the message delivered
		t.Fatal(err)
	}
	lease, err := st.TakeOver(ctx, k) // the reconciler
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, lease, idem.Response{Status: http.StatusCreated, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.UnmarkQueued(ctx, k, until); err != nil { // the message handled
		t.Fatal(err)
	}
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	var whats []string
	for _, e := range history(t, tr, k.LogHash()) {
		whats = append(whats, e.What)
	}
	want := []string{audit.WhatClaimed, audit.WhatQueueMark, audit.WhatQueueMark, audit.WhatTakenOver, audit.WhatSucceeded, audit.WhatQueueMark}
	if !slices.Equal(whats, want) {
		t.Errorf("the history: %v, want %v", whats, want)
	}
}

// TestADeletionPastRetentionIsTTLsOnlyWhenTheStreamSaysSo: a record past
// its retention, which TTL has not deleted yet (it may take days), is
// deleted with DeleteItem. The stream names no one: AWS names TTL on its
// own deletions alone. The entry says it was deleted after its retention,
// and names no TTL.
func TestADeletionPastRetentionIsTTLsOnlyWhenTheStreamSaysSo(t *testing.T) {
	t.Parallel()
	d := testkit.Deploy(t)
	tr := d.Audit(t)
	ctx := t.Context()
	clock := testkit.NewClock(time.Now().Add(-3 * 24 * time.Hour))
	st, err := dynamostore.New(testkit.Clients(t).DynamoDB, d.IdempotencyTable, func(o *dynamostore.Options) { o.Clock = clock.Now })
	if err != nil {
		t.Fatal(err)
	}
	k, err := idem.NewKey(testkit.UniqueName("acme"), charge.ChargeOperation, testkit.UniqueName("order"))
	if err != nil {
		t.Fatal(err)
	}
	begun, err := st.Begin(ctx, k, idem.FingerprintOf([]byte(`{}`)), []byte(`{"amount":1500,"currency":"EUR"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, begun.Lease, idem.Response{Status: http.StatusCreated, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Clients(t).DynamoDB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(d.IdempotencyTable), Key: map[string]ddbtypes.AttributeValue{dynamostore.AttrPK: &ddbtypes.AttributeValueMemberS{Value: k.String()}},
	}); err != nil {
		t.Fatal(err)
	}
	if b := tr.Drain(t); b.Records == 0 || b.Failed != 0 {
		t.Fatalf("drained %+v", b)
	}
	got := history(t, tr, k.LogHash())
	if gone := one(t, got, k.LogHash(), audit.WhatDeletedAfterRetention); gone.Principal != nil {
		t.Errorf("the deletion names who made it, which the stream does not: %s", show([]audit.Entry{gone}))
	}
	if expired := find(got, k.LogHash(), audit.WhatExpired); len(expired) != 0 {
		t.Errorf("a DeleteItem is filed as TTL's expiry:\n%s", show(expired))
	}
}
