package regions_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// scenario is a world of two Regions and a history on it. Its tenant is
// the history's first, homed in r1.
type scenario struct {
	*world
	h      *history
	r1, r2 *region
	tenant string
}

func newScenario(t *testing.T, d design) *scenario {
	t.Helper()
	w := newWorld(t, 2, d)
	h := newHistory(t, t, w, &stats{})
	return &scenario{world: w, h: h, r1: w.regions[0], r2: w.regions[1], tenant: h.tenants[0]}
}

// charge sends body as POST /charges under clientKey to r. It waits 10 ms
// first: no two claims in one millisecond.
func (s *scenario) charge(t *testing.T, r *region, clientKey, body string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	s.clock.Advance(10 * time.Millisecond)
	resp, err := s.h.stacks[r.name].handler.Handle(t.Context(), testkit.PostCharge(s.tenant, clientKey, body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// failOverAndDrain fails r1 over to r2 before its writes replicate. Then
// r1 comes back and is drained.
func (s *scenario) failOverAndDrain(t *testing.T) {
	t.Helper()
	s.r1.link.down.Store(true)
	s.failOver(t, s.r1.name, s.r2)
	s.recover(t, s.r1)
}

// recover brings r back: its writes replicate, and every Region is
// drained.
func (s *scenario) recover(t *testing.T, r *region) {
	t.Helper()
	r.link.down.Store(false)
	if err := s.drainAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.h.drainRoutes(t)
}

// TestAFailedRegionsChargeIsNotMadeAgain is the shortest history that
// tells the designs apart. A charge is made in its tenant's Region, which
// fails before the charge's writes replicate. The client retries in the
// other Region. The naive design claims the key afresh there, under a
// new reference, and charges the card a second time. The chosen design
// finds the first Region's claim in the ledger: it answers outcome-pending,
// and once the first Region is back and drained, the retry gets the first
// answer.
func TestAFailedRegionsChargeIsNotMadeAgain(t *testing.T) {
	for _, d := range []design{naive, chosen} {
		t.Run(string(d), func(t *testing.T) {
			s := newScenario(t, d)
			w, h, r1, r2 := s.world, s.h, s.r1, s.r2
			key, _ := idem.NewKey(s.tenant, charge.ChargeOperation, "order-1")
			send := func(r *region) (int, string) {
				resp := s.charge(t, r, key.ClientKey(), `{"amount":500,"currency":"EUR","source":"tok_visa"}`)
				return resp.StatusCode, resp.Body
			}
			status, first := send(r1)
			if status != http.StatusCreated {
				t.Fatalf("the first charge: %d %s", status, first)
			}
			r1.link.down.Store(true) // before anything replicated
			if d == chosen {
				w.failOver(t, r1.name, r2)
			}
			status, again := send(r2)
			in := &intent{key: key, kind: "charge"}
			made := h.effects(in, w.sim.Ledger())
			if d == naive {
				if status != http.StatusCreated || len(made) != 2 {
					t.Fatalf("naive: the retry in r2 got %d %s, the provider acted under %v; want a second charge", status, again, made)
				}
				t.Logf("naive: the retry in r2 was charged again: references %v", made)
				return
			}
			if status != http.StatusServiceUnavailable || slug(again) != httpapi.ProblemOutcomePending.Slug || len(made) != 1 {
				t.Fatalf("chosen: the retry in r2 got %d %s, the provider acted under %v; want outcome-pending and one charge", status, again, made)
			}
			s.recover(t, r1)
			if status, replay := send(r2); status != http.StatusCreated || replay != first {
				t.Fatalf("chosen: the retry once r1 is drained got %d %s, want the first answer %s", status, replay, first)
			}
		})
	}
}

// TestAMoveBackDoesNotRewriteWhatThePendingRegionSettled moves a tenant
// r1 -> r2 -> r1, r2 not drained. r2 re-claimed and captured a charge r1
// had released. r1's stale copy of the record still names r1. Rewriting
// it would lose r2's capture to last writer wins, so r1 waits for r2.
func TestAMoveBackDoesNotRewriteWhatThePendingRegionSettled(t *testing.T) {
	ctx := t.Context()
	s := newScenario(t, chosen)
	w, h, r1, r2, tenant := s.world, s.h, s.r1, s.r2, s.tenant
	key, _ := idem.NewKey(tenant, charge.ChargeOperation, "order-1")
	body := `{"amount":500,"currency":"EUR","source":"` + providersim.SourceUnavailableOnce + `","capture":false}`
	replayed := false
	send := func(r *region) (int, string) {
		resp := s.charge(t, r, key.ClientKey(), body)
		replayed = resp.Headers[httpapi.HeaderReplayed] == "true"
		return resp.StatusCode, resp.Body
	}

	// r1: the provider is unavailable; nothing charged, the key RELEASED.
	if status, b := send(r1); status != http.StatusServiceUnavailable || slug(b) != httpapi.ProblemUnavailable.Slug {
		t.Fatalf("first try in r1: %d %s, want provider-unavailable", status, b)
	}
	if err := w.drainAll(ctx); err != nil {
		t.Fatal(err)
	}
	// r1 fails, its tenants move to r2; r1 returns and is drained.
	s.failOverAndDrain(t)
	w.clock.Advance(regions.DefaultLease)

	// r2 re-claims the key (r1 yields), charges and captures.
	status, first := send(r2)
	if status != http.StatusCreated {
		t.Fatalf("retry in r2: %d %s, want 201", status, first)
	}
	var made struct{ ID string }
	_ = json.Unmarshal([]byte(first), &made)
	resp, err := h.stacks[r2.name].handler.Handle(ctx, testkit.PostMove(tenant, made.ID, "capture", ""))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("capture in r2: %v %d %s", err, resp.StatusCode, resp.Body)
	}

	// r2 fails before any of that replicates; the tenants move back.
	r2.link.down.Store(true)
	w.failOver(t, r1.name, r1)

	// The client retries the key in r1: r2, pending, may hold its outcome.
	status, again := send(r1)
	conflictsBefore := w.conflicts.Load()
	r2.link.down.Store(false)
	if err := w.drainAll(ctx); err != nil {
		t.Fatal(err)
	}
	lost := w.conflicts.Load() - conflictsBefore
	out, err := w.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r1.d.ChargesTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{charge.AttrTenant: &types.AttributeValueMemberS{Value: tenant}, charge.AttrID: &types.AttributeValueMemberS{Value: made.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	row := out.Item
	t.Logf("retry in r1 while r2 pending: %d (replayed %t) %s", status, replayed, again)
	t.Logf("after r2 returned: %d of r2's writes lost to r1's later ones; the charge's row in r1: status=%s", lost, attrS(row, "status"))
	if (status != http.StatusServiceUnavailable || slug(again) != httpapi.ProblemOutcomePending.Slug) && (again != first || !replayed) {
		t.Errorf("r1 answered the retry %d %s: want outcome-pending (r2 is pending) or r2's answer", status, again)
	}
	if lost > 0 {
		t.Errorf("%d writes r2 made were lost to r1's later writes of the same items", lost)
	}
	if attrS(row, "status") != charge.StatusSucceeded {
		t.Errorf("the capture r2 answered 200 is lost: the row says %s", attrS(row, "status"))
	}
}

// TestAFailedRegionsChargeIsNotMadeAgainWhileItsKeyLives retries a key
// after its ledger claim expired but before r1's record did. The record
// deduplicates until its lease's end plus retention; the claim ends
// sooner. So r2 must not claim afresh while r1 is not drained.
func TestAFailedRegionsChargeIsNotMadeAgainWhileItsKeyLives(t *testing.T) {
	ctx := t.Context()
	s := newScenario(t, chosen)
	w, h, r1, r2 := s.world, s.h, s.r1, s.r2
	key, _ := idem.NewKey(s.tenant, charge.ChargeOperation, "order-1")
	send := func(r *region) (int, string) {
		resp := s.charge(t, r, key.ClientKey(), `{"amount":500,"currency":"EUR","source":"tok_visa"}`)
		return resp.StatusCode, resp.Body
	}
	created := w.clock.Now()
	if status, b := send(r1); status != http.StatusCreated {
		t.Fatalf("the first charge: %d %s", status, b)
	}
	r1.link.down.Store(true) // before anything replicated
	route, _ := w.routes.Route(ctx, r1.name)
	if _, err := w.routes.Move(ctx, route, r2.name, w.clock.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	// A day later, within the key's retention: r1's record still
	// deduplicates (its TTL is ahead).
	w.clock.Advance(created.Add(retention + 10*time.Second).Sub(w.clock.Now()))
	out, err := w.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r1.d.IdempotencyTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: key.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	ttl := attrN(out.Item, dynamostore.AttrExpiresAt)
	t.Logf("r1's record: %s, deduplicating until %s; now %s", attrS(out.Item, "st"), time.Unix(ttl, 0).UTC(), w.clock.Now().UTC())
	status, again := send(r2)
	made := h.effects(&intent{key: key, kind: "charge"}, w.sim.Ledger())
	if len(made) > 1 || status == http.StatusCreated {
		t.Fatalf("the retry in r2, r1 not drained, the key still live in r1: %d %s; the provider acted under %v", status, again, made)
	}
}

// TestAReadDuringAFailoverDoesNotDenyARefundMade: r1 charges, and it
// replicates. r1 refunds the charge, answers 201, and fails before the
// refund replicates. The tenant fails over to r2, r1 pending. r2's copy
// of the charge may be stale, so a read of it answers outcome-pending, as
// one that finds nothing does. Once r1 is back and drained, the read
// shows the refund.
func TestAReadDuringAFailoverDoesNotDenyARefundMade(t *testing.T) {
	ctx := t.Context()
	s := newScenario(t, chosen)
	w, h, r1, r2, tenant := s.world, s.h, s.r1, s.r2, s.tenant
	resp := s.charge(t, r1, "order-1", `{"amount":500,"currency":"EUR","source":"tok_visa"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the charge in r1: %d %s", resp.StatusCode, resp.Body)
	}
	var made struct{ ID string }
	_ = json.Unmarshal([]byte(resp.Body), &made)
	if err := w.drainAll(ctx); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(10 * time.Millisecond)
	resp, err := h.stacks[r1.name].handler.Handle(ctx, testkit.PostRefund(tenant, "refund-1", made.ID, `{"amount":500}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the refund in r1: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	r1.link.down.Store(true) // before the refund replicates
	w.failOver(t, r1.name, r2)
	read := func() (int, string, int64) {
		t.Helper()
		resp, err := h.stacks[r2.name].handler.Handle(ctx, testkit.GetCharge(tenant, made.ID))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			AmountRefunded int64 `json:"amount_refunded"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &c)
		return resp.StatusCode, resp.Body, c.AmountRefunded
	}
	if status, body, _ := read(); status != http.StatusServiceUnavailable || slug(body) != httpapi.ProblemOutcomePending.Slug {
		t.Fatalf("r2, r1 pending, reads the charge r1 refunded in full: %d %s; want outcome-pending", status, body)
	}
	s.recover(t, r1)
	w.clock.Advance(regions.DefaultLease) // r2's fence reads the drain
	if status, body, refunded := read(); status != http.StatusOK || refunded != 500 {
		t.Fatalf("r2, r1 drained, reads the charge: %d %s; want 200 with amount_refunded 500", status, body)
	}
}

// TestAWrittenOffRegionsChargeIsNotMadeAgainWhileItsKeyLives: r1 charges
// and fails before anything replicates, for good. acme fails over to r2,
// and an operator writes r1 off. The docs promise: r2 takes r1's claims
// over as inherited, under r1's reference, never a fresh send. The client
// retries a day later, before the Idempotency-Expires it was given, but
// after the ledger claim's Until. r2 claims afresh and charges again.
func TestAWrittenOffRegionsChargeIsNotMadeAgainWhileItsKeyLives(t *testing.T) {
	s := newScenario(t, chosen)
	w, h, r1, r2 := s.world, s.h, s.r1, s.r2
	send := func(r *region) events.APIGatewayV2HTTPResponse {
		return s.charge(t, r, "order-1", `{"amount":500,"currency":"EUR","source":"tok_visa"}`)
	}
	first := send(r1)
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("the first charge: %d %s", first.StatusCode, first.Body)
	}
	expires, err := time.Parse(http.TimeFormat, first.Headers["Idempotency-Expires"])
	if err != nil {
		t.Fatalf("Idempotency-Expires %q: %v (headers %v)", first.Headers["Idempotency-Expires"], err, first.Headers)
	}
	r1.link.down.Store(true) // before anything replicated; it never returns
	w.failOver(t, r1.name, r2)
	h.drainRoutes(t) // the write-off: chargectl admin drained
	w.clock.Advance(expires.Add(-5 * time.Second).Sub(w.clock.Now()))
	again := send(r2)
	key, _ := idem.NewKey(s.tenant, charge.ChargeOperation, "order-1")
	made := h.effects(&intent{key: key, kind: "charge"}, w.sim.Ledger())
	if len(made) > 1 {
		t.Fatalf("the retry in r2 at %s, before the key's Idempotency-Expires %s: %d %s; the provider acted under %v",
			w.clock.Now().UTC().Format(time.RFC3339), expires.UTC().Format(time.RFC3339), again.StatusCode, again.Body, made)
	}
}

// TestAMoveBackAfterAReclaimDoesNotChargeAgain: r1 claims a
// key; the provider is unavailable, and the key is released. acme fails
// over to r2, and r1 is drained. Near the end of the release's retention
// the client retries in r2: r2 claims the release back, under r1's
// CreatedAt, and charges. Its record now lives a retention more, but the
// ledger's claim still names r1, until its old Until. r2 fails before
// anything replicates, and acme moves back to r1, r2 pending. Just past
// the old Until, the client retries in r1, well before the
// Idempotency-Expires r2 gave it. r1 finds its own stale copy expired, and
// its own claim expired: it claims afresh, and charges a second time.
func TestAMoveBackAfterAReclaimDoesNotChargeAgain(t *testing.T) {
	ctx := t.Context()
	s := newScenario(t, chosen)
	w, h, r1, r2 := s.world, s.h, s.r1, s.r2
	key, _ := idem.NewKey(s.tenant, charge.ChargeOperation, "order-1")
	send := func(r *region) events.APIGatewayV2HTTPResponse {
		return s.charge(t, r, key.ClientKey(), `{"amount":500,"currency":"EUR","source":"`+providersim.SourceUnavailableOnce+`"}`)
	}
	created := w.clock.Now()
	if resp := send(r1); resp.StatusCode != http.StatusServiceUnavailable || slug(resp.Body) != httpapi.ProblemUnavailable.Slug {
		t.Fatalf("first try in r1: %d %s, want provider-unavailable", resp.StatusCode, resp.Body)
	}
	if err := w.drainAll(ctx); err != nil {
		t.Fatal(err)
	}
	s.failOverAndDrain(t)
	w.clock.Advance(created.Add(retention - time.Minute).Sub(w.clock.Now()))
	charged := send(r2)
	if charged.StatusCode != http.StatusCreated {
		t.Fatalf("the retry in r2: %d %s, want 201", charged.StatusCode, charged.Body)
	}
	expires, _ := time.Parse(http.TimeFormat, charged.Headers["Idempotency-Expires"])
	r2.link.down.Store(true) // before r2's writes replicate
	w.failOver(t, r1.name, r1)
	w.clock.Advance(created.Add(retention + 10*time.Second).Sub(w.clock.Now()))
	var answers []string
	for range 2 { // the provider is unavailable on a reference's first call
		resp := send(r1)
		answers = append(answers, fmt.Sprintf("%d %s", resp.StatusCode, resp.Body))
	}
	made := h.effects(&intent{key: key, kind: "charge"}, w.sim.Ledger())
	if len(made) > 1 {
		t.Fatalf("r2 charged under %s, the key to expire at %s; at %s, r2 pending, r1 answered %q: the provider acted under %v",
			made[0], expires.UTC().Format(time.RFC3339), w.clock.Now().UTC().Format(time.RFC3339), answers, made)
	}
}

// TestATTLDeleteInTheOtherRegionErasesANewIntentsRecordButNotItsCharge:
// DynamoDB's TTL may delete an expired item in any Region of a global
// table, and the delete replicates like any write. r1 serves the tenant.
// Its charge's record expires, and its claim ends. The client reuses the
// key for a new intent in r1, charged. Before that record replicates,
// r2's TTL deletes its own expired copy of the old record. Last writer
// wins: the later delete erases the new record everywhere. What holds is
// the ledger's claim, with the new intent's CreatedAt and fingerprint.
// The client's retry runs the command again under the same reference:
// the provider finds its charge, and the retry gets the first answer's.
// So too late, past a release's retention, yet before the
// Idempotency-Expires it was given: the claim records no release.
// Another body under the key is refused, as while the record lived.
func TestATTLDeleteInTheOtherRegionErasesANewIntentsRecordButNotItsCharge(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late %t", late), func(t *testing.T) {
			ctx := t.Context()
			s := newScenario(t, chosen)
			w, r1, r2 := s.world, s.r1, s.r2
			key, _ := idem.NewKey(s.tenant, charge.ChargeOperation, "order-1")
			if resp := s.charge(t, r1, key.ClientKey(), `{"amount":500,"currency":"EUR","source":"tok_visa"}`); resp.StatusCode != http.StatusCreated {
				t.Fatalf("the first intent: %d %s", resp.StatusCode, resp.Body)
			}
			if err := w.drainAll(ctx); err != nil {
				t.Fatal(err)
			}
			w.clock.Advance(2*retention + time.Hour) // the record and its claim end
			second := `{"amount":900,"currency":"EUR","source":"tok_visa"}`
			created := s.charge(t, r1, key.ClientKey(), second)
			if created.StatusCode != http.StatusCreated {
				t.Fatalf("the new intent in r1: %d %s", created.StatusCode, created.Body)
			}
			// r2's TTL deletes its expired copy of the first intent's record.
			item := map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: key.String()}}
			if _, err := r2.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(r2.table("idem")), Key: item}); err != nil {
				t.Fatal(err)
			}
			conflicts := w.conflicts.Load()
			if err := w.drainAll(ctx); err != nil {
				t.Fatal(err)
			}
			out, err := w.raw.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r1.table("idem")), Key: item, ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("r1's record of the new intent after the delete replicated: %d attributes; %d writes lost to last writer wins",
				len(out.Item), w.conflicts.Load()-conflicts)
			var first, again struct {
				ID                string
				Amount            int64
				ProviderReference string `json:"provider_reference"`
			}
			if err := json.Unmarshal([]byte(created.Body), &first); err != nil {
				t.Fatal(err)
			}
			charged := w.sim.Ledger().References[first.ProviderReference]
			if late {
				expires, err := http.ParseTime(created.Headers[httpapi.HeaderIdempotencyExpires])
				if err != nil {
					t.Fatalf("Idempotency-Expires %q: %v", created.Headers[httpapi.HeaderIdempotencyExpires], err)
				}
				w.clock.Advance(expires.Add(-5 * time.Second).Sub(w.clock.Now()))
			} else {
				other := s.charge(t, r1, key.ClientKey(), `{"amount":700,"currency":"EUR","source":"tok_visa"}`)
				if other.StatusCode != http.StatusUnprocessableEntity {
					t.Fatalf("another body under the key, its record erased: %d %s; want 422, as while it lived", other.StatusCode, other.Body)
				}
			}
			retry := s.charge(t, r1, key.ClientKey(), second)
			if err := json.Unmarshal([]byte(retry.Body), &again); err != nil || retry.StatusCode != http.StatusCreated || again != first {
				t.Fatalf("the client's retry: %d %s; want the first answer's charge %s", retry.StatusCode, retry.Body, created.Body)
			}
			charges := 0
			for _, ref := range w.sim.Ledger().References {
				if ref.Amount == 900 {
					charges += ref.Charges
				}
			}
			if made := w.sim.Ledger().References[first.ProviderReference]; charges != 1 || made.Amount != 900 || made.Charges != charged.Charges {
				t.Fatalf("the provider under the new intent's reference: %+v, was %+v, %d charges of 900; want one charge of 900", made, charged, charges)
			}
		})
	}
}
