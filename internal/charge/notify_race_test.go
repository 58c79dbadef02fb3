package charge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// claimingStore, once armed, runs then after the next Get of key returns:
// the moment between a settlement's check of the record and its Preempt.
type claimingStore struct {
	charge.Store
	mu   sync.Mutex
	key  idem.Key
	then func(rec *idem.Record)
}

func (s *claimingStore) Get(ctx context.Context, key idem.Key) (*idem.Record, error) {
	rec, err := s.Store.Get(ctx, key)
	s.mu.Lock()
	then := s.then
	if key == s.key && err == nil {
		s.then = nil
	}
	s.mu.Unlock()
	if then != nil && key == s.key && err == nil {
		then(rec)
	}
	return rec, err
}

// TestNotificationForAnExpiredCommandSettlesNotItsSuccessor: a provider's
// notification is checked against the command the record holds, a
// released one here. If that record expires and a new intent claims the
// key before the settlement preempts it, the old charge must not be
// recorded as the new intent's: the preemption is of the command checked.
func TestNotificationForAnExpiredCommandSettlesNotItsSuccessor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := testkit.NewClock(time.Now())
	d := testkit.Deploy(t)
	mem := memstore.New(func(o *memstore.Options) { o.Clock = clock.Now })
	mem.DeclareKey(d.ChargesTable, charge.AttrTenant, charge.AttrID)
	store := &claimingStore{Store: mem}
	prov := &unavailableProvider{store: store}
	rows, err := charge.NewRows(testkit.Clients(t).DynamoDB, d.ChargesTable)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Config{Store: store, Rows: rows, Provider: prov, Answers: httpapi.Answers{}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.NewHandler(svc)
	if err != nil {
		t.Fatal(err)
	}
	clientKey := newKey()
	key, err := idem.NewKey("acme", charge.ChargeOperation, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	prov.expect(key)
	if resp, err := h.Handle(ctx, post("acme", clientKey, visa)); err != nil || resp.StatusCode != 503 {
		t.Fatalf("first request: %d, %v; want 503 provider-unavailable (released)", resp.StatusCode, err)
	}
	old, err := store.Get(ctx, key)
	if err != nil || old.Status != idem.StatusReleased {
		t.Fatalf("record %+v, %v; want RELEASED", old, err)
	}
	var successor time.Time
	store.mu.Lock()
	store.key, store.then = key, func(rec *idem.Record) {
		clock.Advance(72 * time.Hour) // the release expires
		begun, err := store.Store.Begin(ctx, key, idem.FingerprintOf([]byte("the new intent")), rec.Intent)
		if err != nil || begun.Lease == nil {
			t.Errorf("the new intent's claim: %+v, %v", begun, err)
			return
		}
		successor = begun.Lease.CreatedAt
	}
	store.mu.Unlock()
	n := charge.Notification{
		Provider: "stripe", EventID: "evt_" + clientKey, Command: key,
		Reference: charge.ProviderReference(key, old.CreatedAt),
		Result:    provider.Result{Status: provider.StatusCharged, ChargeID: "pi_old"},
	}
	if _, err := svc.Notify(ctx, n); err != nil {
		t.Fatalf("notify: %v", err)
	}
	rec, err := store.Get(ctx, key)
	if err != nil || !rec.CreatedAt.Equal(successor) || rec.Status != idem.StatusInFlight {
		t.Fatalf("the new intent's record %+v, %v; want it IN_FLIGHT, untouched by the old command's charge", rec, err)
	}
}
