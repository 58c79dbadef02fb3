package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestTenantOf128Bytes: NewKey's doc says "The tenant is 1 to 128 bytes
// of printable UTF-8 text": 64 'é' are such a tenant, 65 are not.
func TestTenantOf128Bytes(t *testing.T) {
	t.Parallel()
	if _, err := idem.NewKey(strings.Repeat("é", 64), "create-charge", "k1"); err != nil {
		t.Fatalf("NewKey(64 × 'é', 128 bytes) = %v; want a key", err)
	}
	if _, err := idem.NewKey(strings.Repeat("é", 65), "create-charge", "k1"); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("NewKey(65 × 'é', 130 bytes) = %v; want ErrInvalidKey", err)
	}
}

// TestLeaseFromDeadlineOnAStoreClock: backend.go says a test gives
// its clock to the store alone, and every function reads time from Now.
// Here the store's clock is an hour ahead of real time (a test clock
// advanced by an hour). A caller's context has 30s left; the lease is to
// be "the context's deadline plus a margin" (LeaseUntil), and fn's context
// to end Reserve (1s) before the caller's deadline. The store measures
// the real deadline against its own clock: the lease is 5s, and fn gets 5s.
func TestLeaseFromDeadlineOnAStoreClock(t *testing.T) {
	t.Parallel()
	s := memstore.New(func(o *memstore.Options) { o.Clock = func() time.Time { return time.Now().Add(time.Hour) } })
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var left time.Duration
	res, err := idem.Do(c, s, idemtest.UniqueKey(t, "acme"), fpA, nil, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		d, _ := ctx.Deadline()
		left = time.Until(d)
		return idem.Succeeded(resp), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lease := res.Lease.ExpiresAt.Sub(res.Lease.CreatedAt)
	if left < 25*time.Second || lease < 30*time.Second {
		t.Fatalf("caller's context: 30s left; fn's context had %v, the lease %v; want about 29s and 35s (deadline less Reserve; deadline plus LeaseMargin)", left.Round(time.Second), lease)
	}
}
