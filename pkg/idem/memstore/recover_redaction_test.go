package memstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestRecoverErrorsNameNoClientKey: Recover's and Sweep's errors can be
// logged as they are, so a resolver's error that names the key the way a
// caller has it at hand, by its client part (an order number), is given
// the key's hash too; only the whole key string used to be replaced.
func TestRecoverErrorsNameNoClientKey(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(func(o *idem.Options) { o.Clock = clock.Now })
	k, _ := idem.NewKey("acme", "create-order", "ORDER-4242-secret")
	if _, err := s.Begin(context.Background(), k, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	resolve := func(_ context.Context, l *idem.Lease) (idem.Resolution, error) {
		return idem.Resolution{}, fmt.Errorf("warehouse API: no shipment for order %q", l.Key.ClientKey())
	}
	_, err := idem.Recover(context.Background(), s, k, resolve, func(o *idem.RecoverOptions) { o.Clock = clock.Now })
	t.Logf("Recover: %v", err)
	if err != nil && strings.Contains(err.Error(), k.ClientKey()) {
		t.Errorf("Recover's error carries the client key: %v", err)
	}
}
