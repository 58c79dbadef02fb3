package charge_test

import (
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// TestReferenceIsTheOneEachOperationSends: an operator looks up what the
// operation sent, and a key of no operation has no reference.
func TestReferenceIsTheOneEachOperationSends(t *testing.T) {
	t.Parallel()
	created := time.UnixMilli(1_767_225_600_000)
	for _, tc := range []struct {
		operation string
		want      func(idem.Key, time.Time) string // nil: no reference
	}{
		{charge.ChargeOperation, charge.ProviderReference},
		{charge.RefundOperation, charge.RefundReference},
		{charge.NotificationOperation, nil},
		{charge.TransitionOperation, nil},
		{"no-such-operation", nil},
	} {
		key, err := idem.NewKey("acme", tc.operation, "order-1")
		if err != nil {
			t.Fatal(err)
		}
		got, err := charge.Reference(key, created)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%s: reference %q, want an error", tc.operation, got)
		case tc.want != nil && (err != nil || got != tc.want(key, created)):
			t.Errorf("%s: reference %q, %v; want %q", tc.operation, got, err, tc.want(key, created))
		}
	}
}

// TestReconcilesTheOperationsAndTheirBypasses: the reconciler takes the
// keys of every operation and of both bypasses, and no other.
func TestReconcilesTheOperationsAndTheirBypasses(t *testing.T) {
	t.Parallel()
	for operation, want := range map[string]bool{
		charge.ChargeOperation:       true,
		charge.RefundOperation:       true,
		charge.NotificationOperation: true,
		charge.TransitionOperation:   true,
		"no-such-operation":          false,
		"":                           false,
	} {
		if got := charge.Reconciles(operation); got != want {
			t.Errorf("Reconciles(%q) = %v, want %v", operation, got, want)
		}
	}
}
