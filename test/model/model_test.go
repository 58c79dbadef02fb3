package model_test

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestChargePathModel runs random histories against the real charge path
// and checks, after each, that retries never charged twice and that every
// client saw a consistent story. One set of tables, queue and simulator
// serves every history; each history uses fresh tenants, so histories never
// share a scoped key.
func TestChargePathModel(t *testing.T) { runModel(t, newEnv(t), actions, invariants) }

// TestChargePathModelStripe runs the same model with PROVIDER=stripe, on
// the stateful Stripe simulator: the reconciler looks charges up by
// replaying their requests, rolls forward those that never arrived, and
// parks a command past Stripe's key window that Stripe has no charge for.
// Stripe's webhooks settle what it reports on its own.
func TestChargePathModelStripe(t *testing.T) {
	runModel(t, newStripeEnv(t), stripeActions, stripeInvariants)
}

// runModel runs histories of acts on e, checking invs.
func runModel(t *testing.T, e *env, acts []action, invs []invariant) {
	names, run := drawn(t, acts)
	var runs atomic.Int64
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		r := &history{
			env: e, id: runs.Add(1), invariants: invs,
			keys: map[idem.Key]*keyState{}, touched: map[idem.Key]bool{}, refunds: newRefundBook(), expired: map[string]bool{},
		}
		defer r.reset()
		if e.hooks != nil {
			e.hooks.reset()
		}
		r.tenants = []string{r.tenant("a"), r.tenant("b")}
		for range rapid.IntRange(1, maxSteps).Draw(rt, "steps") {
			run[rapid.SampledFrom(names).Draw(rt, "action")](r, rt)
			r.checkInvariantsSoFar(rt)
		}
		r.settle(rt)
		r.checkFinal(rt)
		r.removeItems(rt)
	})
	t.Logf("%d histories in %s; %d DynamoDB requests refused and %d answers lost; %d stale-owner writes refused; %d commands parked; "+
		"%d provider connections dropped after executing, %d claims landed unanswered, %d clients told nothing was charged; "+
		"%d refunds made, %d refund answers said nothing was refunded, %d were outcome-pending; "+
		"%d captures and %d cancels answered 200, %d charge-state-conflicts, %d outcome-pending",
		runs.Load(), time.Since(start).Round(time.Millisecond), e.faults.refused.Load(), e.faults.lost.Load(), e.staleRefused.Load(), e.parked.Load(),
		e.drop.dropped.Load(), e.faults.claim.Lost(), e.toldNothing.Load(),
		e.refundStats.made.Load(), e.refundStats.toldNothing.Load(), e.refundStats.pending.Load(),
		e.moveStats.captured.Load(), e.moveStats.canceled.Load(), e.moveStats.conflicts.Load(), e.moveStats.pending.Load())
	if e.hooks != nil {
		t.Logf("%s; %d refunds read failed", e.hooks, e.refundStats.failed.Load())
	}
}

// maxSteps bounds a history: short histories keep 1,000 of them to a few
// minutes.
const maxSteps = 12

// action is one kind of step a history takes, drawn weight times as often
// as an action of weight 1.
type action struct {
	name   string
	weight int
	run    func(*history, *rapid.T)
}

// invariant is what must hold of one operation's commands: soFar after
// every step, final once the history has settled. Either may be nil.
type invariant struct {
	soFar, final func(*history, *rapid.T)
}

// The model's parts, each declared in the file of its concern. A new
// operation declares its actions and invariants in a file of its own and
// adds them here. Stripe mode adds its webhooks'.
var (
	actions          = slices.Concat(chargeActions, faultActions, refundActions, captureActions)
	invariants       = []invariant{chargeInvariant, refundInvariant, captureInvariant}
	stripeActions    = slices.Concat(actions, webhookActions)
	stripeInvariants = slices.Concat(invariants, []invariant{webhookInvariant})
)

// drawn returns the names a history draws its steps from, and each
// name's action. Every name comes once in order, then again those of
// weight 2 or more, and so on: the draws of a seed stay those it made
// before the actions were a table.
func drawn(t *testing.T, acts []action) ([]string, map[string]func(*history, *rapid.T)) {
	t.Helper()
	run := map[string]func(*history, *rapid.T){}
	most := 0
	for _, a := range acts {
		if _, twice := run[a.name]; twice || a.weight < 1 {
			t.Fatalf("action %q is declared twice or weighs %d", a.name, a.weight)
		}
		run[a.name], most = a.run, max(most, a.weight)
	}
	sorted := slices.SortedFunc(slices.Values(acts), func(a, b action) int { return cmp.Compare(a.name, b.name) })
	var names []string
	for pass := range most {
		for _, a := range sorted {
			if a.weight > pass {
				names = append(names, a.name)
			}
		}
	}
	return names, run
}

// history is the model of one random run: what every client was told,
// and what the store and the provider did.
type history struct {
	env        *env
	id         int64
	invariants []invariant // its mode's
	tenants    []string
	keys       map[idem.Key]*keyState
	faulty     bool // DynamoDB faults are being injected
	down       bool // the provider is down
	// zombies are the leases of charge functions that crashed: each may
	// come back and write late.
	zombies []*idem.Lease
	// touched are the keys a step may have changed, whose records note
	// reads after it: a record changes only when a step acts on its key,
	// or a webhook's event names its command.
	touched map[idem.Key]bool
	// pendingSince is when the oldest charge the provider accepted but has
	// not landed was sent (zero if none): it must land within the settle
	// window, so the clock never passes pendingSince+settleWindow first.
	pendingSince time.Time
	// refunds are what the clients of refunds have seen (refunds_test.go).
	refunds *refundBook
	// moved: a capture or cancel was sent. claims are what their answers
	// said of the charges; expired are the authorizations whose hold the
	// simulator ended (captures_test.go).
	moved   bool
	claims  []claim
	expired map[string]bool
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

func (r *history) tenant(name string) string { return fmt.Sprintf("m%d-%s", r.id, name) }

// reset leaves the shared environment healthy for the next history, also
// when this one failed.
func (r *history) reset() {
	r.env.faults.refuse.Store(0)
	r.env.faults.lose.Store(0)
	r.env.sim.SetDown(false)
	r.env.sim.Land()
}

// sortedKeys are the history's charge keys in a fixed order, so that a
// history replays the same steps from the same seed.
func (r *history) sortedKeys() []idem.Key { return sorted(maps.Keys(r.keys)) }

// commandKeys are every key of the history, charges' then refunds', in a
// fixed order: those the sweeper, the reconciler and the cleanup reach.
func (r *history) commandKeys() []idem.Key {
	return append(r.sortedKeys(), sorted(maps.Keys(r.refunds.keys))...)
}

func sorted(keys iter.Seq[idem.Key]) []idem.Key {
	return slices.SortedFunc(keys, func(a, b idem.Key) int { return cmp.Compare(a.String(), b.String()) })
}

// gensOf is the commands of the history's key k by their creation, or
// nil for another history's key.
func (r *history) gensOf(k idem.Key) map[time.Time]*idem.Record {
	if ks := r.keys[k]; ks != nil {
		return ks.gens
	}
	if rs := r.refunds.keys[k]; rs != nil {
		return rs.gens
	}
	return nil
}
