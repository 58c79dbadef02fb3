package model_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// chargeActions are what a history's clients do with charges: create,
// retry, duplicate and reuse keys. The clock, the provider's backend, the
// sweeper and the reconciler act here too, for every operation.
var chargeActions = []action{
	{"request", 1, (*history).request},
	{"concurrent", 1, (*history).concurrent},
	{"dedupWindowNears", 1, (*history).dedupWindowNears},
	{"atTheExpirySecond", 1, (*history).atTheExpirySecond},
	{"advanceClock", 1, (*history).advanceClock},
	{"retentionPasses", 1, (*history).retentionPasses},
	{"providerLands", 1, (*history).providerLands},
	{"sweep", 1, (*history).sweep},
	{"reconcile", 1, (*history).reconcile},
}

type body struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Source      string `json:"source"`
	Description string `json:"description,omitempty"`
	// AuthorizeOnly is "capture": false: captures.go's actions settle it.
	AuthorizeOnly bool `json:"-"`
}

func (b body) compact() string {
	out, _ := json.Marshal(b)
	if b.AuthorizeOnly {
		out = append(out[:len(out)-1], `,"capture":false}`...)
	}
	return string(out)
}

// spaced writes the same document with the keys reversed and whitespace.
// It always names capture: true is the default, the same request.
func (b body) spaced() string {
	q := func(s string) string { out, _ := json.Marshal(s); return string(out) }
	s := "{\n  \"capture\" : " + strconv.FormatBool(!b.AuthorizeOnly) + ",\n  \"source\" : " + q(b.Source) + ",\n  \"currency\":" + q(b.Currency)
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

// pick draws a scoped key of this history, creating its state (and its
// request body) on first use.
func (r *history) pick(rt *rapid.T) *keyState {
	tenant := rapid.SampledFrom(r.tenants).Draw(rt, "tenant")
	key, err := idem.NewKey(tenant, charge.ChargeOperation, rapid.SampledFrom(clientKeys).Draw(rt, "clientKey"))
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
		// One intent in three authorizes only.
		AuthorizeOnly: rapid.IntRange(0, 2).Draw(rt, "authorizeOnly") == 0,
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

func (r *history) request(rt *rapid.T) { r.requestOn(rt, r.pick(rt)) }

// requestNew sends a request under a drawn key. A key with no record
// names a new intent, whose request is drawn, then shaped.
func (r *history) requestNew(rt *rapid.T, shape func(*body)) {
	ks := r.pick(rt)
	if _, err := r.env.reader.Get(context.Background(), ks.key); err != nil {
		ks.body = r.newBody(rt)
		shape(&ks.body)
		ks.terminal, ks.firsts = nil, 0
	}
	r.requestOn(rt, ks)
}

// requestOn sends a request under ks's key.
func (r *history) requestOn(rt *rapid.T, ks *keyState) {
	b, payload := variant(rt, ks)
	resp, err := r.send(ks, payload)
	r.observe(rt, ks, b, resp, err)
	r.noteNothingCharged(rt, ks, resp)
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
	r.advance(rt, w-30*time.Minute)
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
	r.hooksDelivered() // first: a delivery under way may move the clock
	r.advance(rt, rec.ExpiresAt.Sub(r.env.clock.Now())+into)
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

// advance moves the clock, first landing the provider's pending charges
// if the clock would pass their settle window: the provider lands what it
// accepted within it. The webhooks in flight are delivered first, and the
// commands they settled noted, before their records may expire.
func (r *history) advance(rt *rapid.T, d time.Duration) {
	r.hooksDelivered()
	// The step may touch its keys again after the clock moves: they stay
	// touched, for the step's own note.
	touched := maps.Clone(r.touched)
	r.note(rt)
	maps.Copy(r.touched, touched)
	if !r.pendingSince.IsZero() && r.env.clock.Now().Add(d).After(r.pendingSince.Add(r.env.settleWindow)) {
		r.env.sim.Land()
		r.pendingSince = time.Time{}
	}
	r.env.clock.Advance(d)
}

func (r *history) advanceClock(rt *rapid.T) {
	r.advance(rt, rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, leaseExpiry, 2 * time.Minute, 5 * time.Minute, time.Hour}).Draw(rt, "advance"))
	r.forgetExpired(rt)
}

// retentionPasses moves the clock past every settled command's retention.
// A key whose command is settled may then name a new intent: its clients
// draw a new request. A command still IN_FLIGHT keeps its key.
func (r *history) retentionPasses(rt *rapid.T) {
	r.advance(rt, retention+leaseExpiry+time.Minute)
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
	for shard := range r.env.index.Shards() {
		for sl, err := range r.env.index.StuckLeases(context.Background(), shard, r.env.clock.Now()) {
			if err != nil {
				return nil, err
			}
			if slices.Contains(r.tenants, sl.Key.Tenant()) {
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
		if r.env.hooks != nil && errors.Is(err, idem.ErrLeaseLost) {
			// A webhook's event settled the command, preempting the
			// lease: SQS delivers the message again, to find it settled.
			r.env.hooks.preempted.Add(1)
			continue
		}
		r.allowed(rt, err)
	}
}

// settle is the end of every history: faults stop, the provider recovers
// and lands what it accepted, every lease, backoff and settle window runs
// out, and the sweeper and reconciler run to completion, each message
// delivered twice, until no command is left IN_FLIGHT. Stripe's webhooks
// are then delivered, again until acknowledged. A command whose replays
// never get an answer (a card Stripe always rate-limits) is then left to
// grow older than the provider's dedup window, when the reconciler parks
// it.
func (r *history) settle(rt *rapid.T) {
	r.reset()
	r.faulty, r.down, r.pendingSince = false, false, time.Time{}
	r.hooksDelivered()
	r.note(rt)
	stuck := r.settleRounds(rt)
	r.hooksSettled(rt)
	r.noteAll(rt)
	r.forgetExpired(rt)
	if stuck && r.env.dedupWindow > 0 {
		// Records settled so far pass their retention meanwhile: their
		// final state is noted, and their keys may name new intents.
		r.env.clock.Advance(r.env.dedupWindow)
		r.retentionPassed(rt, false)
		r.settleRounds(rt)
		r.hooksSettled(rt)
		r.noteAll(rt)
	}
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
		// the sweeper sends for the stuck ones among them. A charge's
		// capture or cancel is settled under a key of its own.
		for _, k := range append(r.commandKeys(), r.moveKeys(rt)...) {
			r.deliver(rt, k, 2)
		}
	}
	return false
}
