package idem_test

import (
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
)

// TestSecondCommitWithOtherWritesIsRefused: "A second Commit with other
// arguments gets ErrLeaseLost", and the business writes are arguments. Each
// case commits row "first" and then row "second" under one lease, as a
// caller might:
//   - through the same *Lease: the stores recognised their own commit by
//     token, status and response alone, and returned nil;
//   - in one reused write value (the same *types.Put, its Item set for the
//     next row): the stores kept a shallow copy of the first Commit's
//     writes, which was the caller's own value;
//   - from copies of the lease made before the first Commit, which carry
//     nothing of it: DynamoDB answered IdempotentParameterMismatch, which
//     the store took for its own commit sent again.
func TestSecondCommitWithOtherWritesIsRefused(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	for name, twice := range map[string]func(s idem.Backend, l *idem.Lease, r rows) (first, second error){
		"the same lease": func(s idem.Backend, l *idem.Lease, r rows) (error, error) {
			first := s.Commit(ctx, l, resp, r.insert("first"))
			return first, s.Commit(ctx, l, resp, r.insert("second"))
		},
		"a reused write value": func(s idem.Backend, l *idem.Lease, r rows) (error, error) {
			w := r.insert("first")
			first := s.Commit(ctx, l, resp, w)
			w.Put.Item = r.insert("second").Put.Item
			return first, s.Commit(ctx, l, resp, w)
		},
		"copies of the lease": func(s idem.Backend, l *idem.Lease, r rows) (error, error) {
			a, b := *l, *l
			first := s.Commit(ctx, &a, resp, r.insert("first"))
			return first, s.Commit(ctx, &b, resp, r.insert("second"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			onBothStores(t, func(t *testing.T, s idem.Backend, r rows, exists func(id string) bool) {
				b, err := s.Begin(ctx, idemtest.UniqueKey(t, "acme"), fpA, nil)
				if err != nil {
					t.Fatal(err)
				}
				first, second := twice(s, b.Lease, r)
				if first != nil {
					t.Fatal(first)
				}
				t.Logf("second Commit with other writes: %v; its row there: %v", second, exists("second"))
				if !errors.Is(second, idem.ErrLeaseLost) {
					t.Errorf("a second Commit with other writes: %v, want ErrLeaseLost (its row there: %v)", second, exists("second"))
				}
			})
		})
	}
}
