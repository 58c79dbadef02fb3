package idem_test

import (
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// TestSecondCommitWithOtherWritesIsRefused: "A second Commit with other
// arguments gets ErrLeaseLost", and the business writes are arguments. The
// stores recognised their own commit by token, status and response alone,
// so a second Commit of the lease with the same response and other writes
// returned nil though none of its writes was applied.
func TestSecondCommitWithOtherWritesIsRefused(t *testing.T) {
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	onBothStores(t, func(t *testing.T, s idem.RecoveryBackend, r rows, exists func(id string) bool) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, b.Lease, resp, r.insert("first")); err != nil {
			t.Fatal(err)
		}
		err = s.Commit(ctx, b.Lease, resp, r.insert("second"))
		t.Logf("second Commit with other writes: %v; its row there: %v", err, exists("second"))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("a second Commit with other writes: %v, want ErrLeaseLost (its row there: %v)", err, exists("second"))
		}
	})
}

// TestSecondCommitWithAReusedWriteIsRefused: a caller that builds its
// writes in one reused value (the same *types.Put, its Item set for the
// next row) must still have a second Commit of other writes refused. The
// stores kept a shallow copy of the first Commit's writes, which was the
// caller's own value, so the second Commit returned nil unwritten.
func TestSecondCommitWithAReusedWriteIsRefused(t *testing.T) {
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	onBothStores(t, func(t *testing.T, s idem.RecoveryBackend, r rows, exists func(id string) bool) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		w := r.insert("first")
		if err := s.Commit(ctx, b.Lease, resp, w); err != nil {
			t.Fatal(err)
		}
		w.Put.Item = r.insert("second").Put.Item // the same Put, for the next row
		err = s.Commit(ctx, b.Lease, resp, w)
		t.Logf("second Commit, of row %q: %v; row there: %v", "second", err, exists("second"))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("a second Commit with other writes: %v, want ErrLeaseLost (its row there: %v)", err, exists("second"))
		}
	})
}

// TestSecondCommitWithOtherWritesFromALeaseCopy: a Lease is a plain
// struct, and a caller may commit from copies of it. A copy made before
// the first Commit does not carry what that Commit sent; DynamoDB then
// answers the second, with other writes, IdempotentParameterMismatch, and
// the store took that for its own commit sent again and returned nil.
func TestSecondCommitWithOtherWritesFromALeaseCopy(t *testing.T) {
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	onBothStores(t, func(t *testing.T, s idem.RecoveryBackend, r rows, exists func(id string) bool) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		kept := *b.Lease // the lease, kept by value
		first := kept
		if err := s.Commit(ctx, &first, resp, r.insert("first")); err != nil {
			t.Fatal(err)
		}
		second := kept
		err = s.Commit(ctx, &second, resp, r.insert("second"))
		t.Logf("second Commit, other writes, from a copy of the lease: %v; its row there: %v", err, exists("second"))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("a second Commit with other writes: %v, want ErrLeaseLost (its row there: %v)", err, exists("second"))
		}
	})
}
