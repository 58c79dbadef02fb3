package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
)

// recoverer is a Resolver for the suite that records the leases it is
// asked under and answers with the next of its answers.
type recoverer struct {
	t       *testing.T
	answers []idem.Outcome
	err     error
	asked   []*idem.Lease
}

func (r *recoverer) resolve(_ context.Context, l *idem.Lease) (idem.Outcome, error) {
	r.asked = append(r.asked, l)
	if r.err != nil {
		return idem.Outcome{}, r.err
	}
	if len(r.answers) == 0 {
		r.t.Fatal("the resolver was asked more often than expected")
	}
	a := r.answers[0]
	r.answers = r.answers[1:]
	return a, nil
}

// succeeded is a success committing the business row named row, when the
// subject has rows.
func (c *suite) succeeded(row string) idem.Outcome {
	if c.Row == nil {
		return idem.Succeeded(resp)
	}
	return idem.Succeeded(resp, c.Row(row))
}

// wantLeftAlone fails unless rec says Recover found nothing to recover.
func wantLeftAlone(t *testing.T, what string, rec idem.Result) {
	t.Helper()
	if rec.Lease != nil || rec.Status != "" {
		t.Fatalf("%s: Recover = %+v, want nothing to recover", what, rec)
	}
}

func (c *suite) recover(t *testing.T, k idem.Key, r *recoverer) idem.Result {
	t.Helper()
	rec, err := idem.Recover(context.Background(), c.Store, k, r.resolve)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	return rec
}

// recoverSettles: a command whose attempt died is taken over, its resolver
// asked under the new lease, and the command settled as it says; the dead
// attempt's writes are fenced out.
func recoverSettles(t *testing.T, c *suite) {
	ctx := context.Background()
	declined := idem.Response{Status: 402, Body: []byte(`{"type":"card-declined"}`)}
	for _, tc := range []struct {
		name string
		out  func(row string) idem.Outcome
		want idem.Status
	}{
		{"succeeded", c.succeeded, idem.StatusSucceeded},
		{"failed", func(string) idem.Outcome { return idem.Failed(declined) }, idem.StatusFailedPermanent},
		{"not applied", func(string) idem.Outcome { return idem.NotApplied(idem.Response{}) }, idem.StatusReleased},
	} {
		k := UniqueKey(t, "acme")
		dead := c.begin(t, k, fpA)
		c.clock.Advance(31 * time.Second)
		row := "recovered-" + k.ClientKey()
		r := &recoverer{t: t, answers: []idem.Outcome{tc.out(row)}}
		got := c.recover(t, k, r)
		if got.Status != tc.want || got.Lease == nil || len(r.asked) != 1 || r.asked[0] != got.Lease {
			t.Fatalf("%s: Recover = %+v, resolver asked %d times; want %s", tc.name, got, len(r.asked), tc.want)
		}
		if l := got.Lease; l.Token == dead.Token || l.Attempts != 1 || !l.CreatedAt.Equal(dead.CreatedAt) || string(l.Intent) != "intent" {
			t.Fatalf("%s: the resolver's lease %+v (the dead attempt's: %+v)", tc.name, l, dead)
		}
		if err := c.Store.Commit(ctx, dead, idem.Response{Status: 201}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("%s: the dead attempt's late commit: want ErrLeaseLost, got %v", tc.name, err)
		}
		switch tc.want {
		case idem.StatusReleased:
			if again := c.begin(t, k, fpA); !again.CreatedAt.Equal(dead.CreatedAt) {
				t.Fatalf("a retry after the release runs under CreatedAt %v, want %v", again.CreatedAt, dead.CreatedAt)
			}
		case idem.StatusSucceeded:
			c.wantReplay(t, k, resp, tc.want)
			if c.RowExists != nil && !c.RowExists(t, row) {
				t.Fatal("the resolver's business write was not committed")
			}
		default:
			c.wantReplay(t, k, declined, tc.want)
		}
	}
}

// recoverLeavesAlone: a key that needs no recovery, or whose lease has not
// run out, is left as it is, and its resolver never asked.
func recoverLeavesAlone(t *testing.T, c *suite) {
	ctx := context.Background()
	r := &recoverer{t: t}
	wantLeftAlone(t, "an absent key", c.recover(t, UniqueKey(t, "acme"), r))
	for name, settle := range map[string]func(*idem.Lease) error{
		"succeeded": func(l *idem.Lease) error { return c.Store.Commit(ctx, l, resp) },
		"released":  func(l *idem.Lease) error { return c.Store.Release(ctx, l) },
	} {
		k := UniqueKey(t, "acme")
		if err := settle(c.begin(t, k, fpA)); err != nil {
			t.Fatal(err)
		}
		c.clock.Advance(31 * time.Second)
		wantLeftAlone(t, "a "+name+" key", c.recover(t, k, r))
	}
	k := UniqueKey(t, "acme")
	live := c.begin(t, k, fpA)
	if got := c.recover(t, k, r); got.Status != idem.StatusInFlight || got.Lease != nil {
		t.Fatalf("a live lease: Recover = %+v, want IN_FLIGHT and no lease", got)
	}
	if len(r.asked) != 0 {
		t.Fatalf("the resolver was asked %d times", len(r.asked))
	}
	if err := c.Store.Commit(ctx, live, resp); err != nil {
		t.Fatalf("the live holder's commit after Recover: %v", err)
	}
}

// recoverPostpones: an unknown outcome keeps the command IN_FLIGHT, for
// the taken-over lease (no retry time) or until the resolver's retry time,
// and each later recovery counts one more attempt.
func recoverPostpones(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	c.begin(t, k, fpA)
	c.clock.Advance(31 * time.Second)
	until := c.clock.Now().Add(10 * time.Minute)
	r := &recoverer{t: t, answers: []idem.Outcome{
		{}, idem.Postponed(until), idem.Failed(resp),
	}}
	if got := c.recover(t, k, r); got.Status != idem.StatusInFlight || got.Lease == nil {
		t.Fatalf("unknown: Recover = %+v", got)
	}
	if got := c.recover(t, k, r); got.Lease != nil {
		t.Fatalf("within the taken-over lease: Recover = %+v, want it left alone", got)
	}
	c.clock.Advance(31 * time.Second)
	if got := c.recover(t, k, r); got.Status != idem.StatusInFlight || got.Lease == nil || got.Lease.Attempts != 2 || got.Lease.ExpiresAt.UnixMilli() != until.UnixMilli() {
		t.Fatalf("postponed: Recover = %+v, want the second attempt's lease ending %v", got, until)
	}
	for sl, err := range c.Store.StuckLeases(ctx, 0, c.clock.Now().Add(9*time.Minute)) {
		if err != nil {
			t.Fatal(err)
		}
		if sl.Key == k {
			t.Fatal("a postponed command is listed as stuck before its retry time")
		}
	}
	c.clock.Advance(9 * time.Minute)
	if got := c.recover(t, k, r); got.Lease != nil {
		t.Fatalf("before the retry time: Recover = %+v, want it left alone", got)
	}
	c.clock.Advance(2 * time.Minute)
	if got := c.recover(t, k, r); got.Status != idem.StatusFailedPermanent || got.Lease.Attempts != 3 {
		t.Fatalf("after the retry time: Recover = %+v", got)
	}
	if len(r.asked) != 3 {
		t.Fatalf("the resolver was asked %d times, want 3", len(r.asked))
	}
}

// recoverResolverFails: a resolver's error leaves the command IN_FLIGHT
// under the taken-over lease, which a later recovery takes over in turn.
func recoverResolverFails(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	c.begin(t, k, fpA)
	c.clock.Advance(31 * time.Second)
	errDown := errors.New("provider down")
	r := &recoverer{t: t, err: errDown}
	got, err := idem.Recover(ctx, c.Store, k, r.resolve)
	if !errors.Is(err, errDown) || got.Lease == nil || got.Status != idem.StatusInFlight {
		t.Fatalf("Recover = %+v, %v; want the resolver's error with its lease", got, err)
	}
	if rec, err := c.Store.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken != got.Lease.Token {
		t.Fatalf("record after the resolver's error: %+v, %v", rec, err)
	}
	c.clock.Advance(31 * time.Second)
	r.err, r.answers = nil, []idem.Outcome{idem.Succeeded(resp)}
	if again := c.recover(t, k, r); again.Status != idem.StatusSucceeded || again.Lease.Attempts != 2 {
		t.Fatalf("the next recovery: %+v", again)
	}
}

// releaseLocalEffect: for a function whose only effect is the writes it
// commits with the record, a release after the take-over is safe: the
// dead attempt's commit writes nothing, and the retry runs the function
// again, under the same CreatedAt, and commits its writes once.
func releaseLocalEffect(t *testing.T, c *suite) {
	ctx := context.Background()
	k := UniqueKey(t, "acme")
	dead := c.begin(t, k, fpA) // the attempt that crashes before its Commit
	c.clock.Advance(31 * time.Second)
	_, err := c.Store.Begin(ctx, k, fpA, nil)
	wantInFlight(t, err)
	got, err := idem.Recover(ctx, c.Store, k, idem.ReleaseLocalEffect)
	if err != nil || got.Status != idem.StatusReleased {
		t.Fatalf("Recover = %+v, %v; want RELEASED", got, err)
	}
	deadRow, row := "dead-"+k.ClientKey(), "retry-"+k.ClientKey()
	late := c.succeeded(deadRow)
	if err := c.Store.Commit(ctx, dead, late.Response, late.Writes...); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the dead attempt's late commit: want ErrLeaseLost, got %v", err)
	}
	runs := 0
	res, err := idem.Do(ctx, c.Store, k, fpA, nil, func(_ context.Context, l *idem.Lease) (idem.Outcome, error) {
		runs++
		if !l.CreatedAt.Equal(dead.CreatedAt) {
			t.Errorf("the retry runs under CreatedAt %v, want %v", l.CreatedAt, dead.CreatedAt)
		}
		return c.succeeded(row), nil
	})
	if err != nil || runs != 1 || res.Status != idem.StatusSucceeded {
		t.Fatalf("the retry: %+v, %v, %d runs", res, err, runs)
	}
	if err := c.Store.Commit(ctx, dead, late.Response, late.Writes...); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the dead attempt's commit after the retry: want ErrLeaseLost, got %v", err)
	}
	c.wantReplay(t, k, resp, idem.StatusSucceeded)
	if c.RowExists != nil && (!c.RowExists(t, row) || c.RowExists(t, deadRow)) {
		t.Fatalf("business rows: the retry's present %v (want true), the dead attempt's present %v (want false)", c.RowExists(t, row), c.RowExists(t, deadRow))
	}
}
