package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestAdminFailoverAndDrain: an operator reads a home's route, fails it
// over once they type the home's name, then marks the Region it left
// drained once they type that Region's; a drain of a Region not pending,
// or before the failover takes effect, writes nothing.
func TestAdminFailoverAndDrain(t *testing.T) {
	s := newAdminStack(t)
	name := testkit.TempTable(t, regions.TableInput("routes"))
	s.env[app.EnvRoutesTable] = name

	if code, out, _ := s.admin(t, "route", "us-east-1"); code != exitOK || !strings.Contains(out, "home us-east-1: served by us-east-1, epoch 0") {
		t.Fatalf("route before any move: exit %d, %q", code, out)
	}
	if code, _, errOut := s.adminTyping(t, strings.NewReader("us-east-2\n"), "failover", "us-east-1", "us-west-2"); code != exitFailed || !strings.Contains(errOut, "not confirmed") {
		t.Fatalf("failover confirmed with the wrong name: exit %d, %q", code, errOut)
	}
	code, out, _ := s.adminTyping(t, strings.NewReader("us-east-1\n"), "failover", "us-east-1", "us-west-2")
	if code != exitOK || !strings.Contains(out, "served by us-west-2, epoch 1") || !strings.Contains(out, "not drained: us-east-1") {
		t.Fatalf("failover: exit %d, %q", code, out)
	}
	if code, _, errOut := s.admin(t, "drained", "--yes", "us-east-1", "us-west-2"); code != exitFailed || !strings.Contains(errOut, "not pending") {
		t.Fatalf("drain of a Region not pending: exit %d, %q", code, errOut)
	}
	// us-east-1's leases may write until the failover takes effect.
	if code, _, errOut := s.admin(t, "drained", "--yes", "us-east-1", "us-east-1"); code != exitFailed || !strings.Contains(errOut, "takes effect at") {
		t.Fatalf("drain before the failover takes effect: exit %d, %q", code, errOut)
	}
	s.clock = func() time.Time { return time.Now().Add(time.Hour) } // a fast operator clock
	if code, _, errOut := s.admin(t, "drained", "--yes", "us-east-1", "us-east-1"); code != exitFailed || !strings.Contains(errOut, "takes effect at") {
		t.Fatalf("drain on a fast clock before the table's: exit %d, %q", code, errOut)
	}
	s.clock = nil
	// The same failover, as if made a minute ago: it has taken effect.
	routes, err := regions.NewRoutes(s.clients.DynamoDB, name)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := routes.Route(t.Context(), "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	rt.Read = time.Time{}
	if _, err := routes.Move(t.Context(), rt, "us-west-2", time.Now().Add(-time.Minute), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	code, out, _ = s.admin(t, "drained", "--yes", "--json", "us-east-1", "us-east-1")
	if code != exitOK || !strings.Contains(out, `"served_by":"us-west-2","epoch":3`) || strings.Contains(out, "pending") {
		t.Fatalf("drained: exit %d, %q", code, out)
	}
}

// inTwoRegions configures chargectl admin as Region region of a
// deployment in r1 and r2, with every tenant homed in r1. It returns the
// routes, and r1's store, which claims in the ledger.
func (s *adminStack) inTwoRegions(t *testing.T, region string) (*regions.Routes, *dynamostore.Store) {
	t.Helper()
	tables := [2]string{testkit.TempTable(t, regions.TableInput("routes")), testkit.TempTable(t, regions.TableInput("ledger"))}
	s.env[app.EnvRoutesTable], s.env[app.EnvLedgerTable] = tables[0], tables[1]
	s.env[app.EnvHomeRegion], s.env[app.EnvAWSRegion] = "r1", region
	routes, err := regions.NewRoutes(s.clients.DynamoDB, tables[0])
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := dynamostore.NewLedger(s.clients.DynamoDB, tables[1])
	if err != nil {
		t.Fatal(err)
	}
	r1, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable, func(o *dynamostore.Options) { o.Region, o.Ledger = "r1", ledger })
	if err != nil {
		t.Fatal(err)
	}
	return routes, r1
}

// TestAdminSettleOnlyWhereTheRegionMayWrite: in two Regions, settle
// refuses, writing nothing, in a Region not serving the tenant, and for
// a command older than a failover not yet drained. The serving Region
// settles, as its functions would.
func TestAdminSettleOnlyWhereTheRegionMayWrite(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	routes, r1 := s.inTwoRegions(t, "r2")
	held := s.parkedIn(t, r1, "order-7001")
	unchanged := func(when string) {
		t.Helper()
		rec, err := r1.Get(t.Context(), held.Key)
		if err != nil || rec.Status != idem.StatusInFlight || rec.LeaseToken != held.Token {
			t.Fatalf("%s: %+v (%v), want it IN_FLIGHT under its holder's lease", when, rec, err)
		}
	}
	code, _, errOut := s.admin(t, "settle", "--yes", "--released", "acme", "order-7001")
	if code != exitFailed || !strings.Contains(errOut, "r1 serves tenant acme") || !strings.Contains(errOut, "nothing written") {
		t.Fatalf("settle in r2, which does not serve acme: exit %d, %q", code, errOut)
	}
	unchanged("after a settle in r2")

	s.env[app.EnvAWSRegion] = "r1"
	s.parkedIn(t, r1, "order-7002")
	if code, out, _ := s.admin(t, "settle", "--yes", "--charged", "pc_operator_7002", "acme", "order-7002"); code != exitOK || !strings.Contains(out, "status SUCCEEDED") {
		t.Fatalf("settle in r1, which serves acme: exit %d, %q", code, out)
	}

	// acme fails over to r2; r1 is not drained, and its copy may be newer.
	rt, err := routes.Route(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routes.Move(t.Context(), rt, "r2", time.Now(), regions.FenceDelay); err != nil {
		t.Fatal(err)
	}
	s.clock = func() time.Time { return time.Now().Add(time.Minute) } // past the fence
	s.env[app.EnvAWSRegion] = "r2"
	code, _, errOut = s.admin(t, "settle", "--yes", "--released", "acme", "order-7001")
	if code != exitFailed || !strings.Contains(errOut, "failover") || !strings.Contains(errOut, "nothing written") {
		t.Fatalf("settle in r2 of a command r1 made before the failover: exit %d, %q", code, errOut)
	}
	unchanged("after a settle in r2 before r1 is drained")
}

// TestAdminSettleReleasedFreesTheKeyItSaysItFrees: settle --released of
// a parked command past its release retention says "the key is free: its
// next request is a new command". In two Regions the ledger's claim of
// the parked command lasts a retention past its lease, a month. The
// release's end, recorded on the claim, ends it: the next request is a
// new command.
func TestAdminSettleReleasedFreesTheKeyItSaysItFrees(t *testing.T) {
	t.Parallel()
	s := newAdminStack(t)
	_, r1 := s.inTwoRegions(t, "r1")
	parked := s.parkedIn(t, r1, "order-7101")
	later := func() time.Time { return time.Now().Add(25 * time.Hour) } // past the release's retention
	s.clock = later
	code, out, errOut := s.admin(t, "settle", "--yes", "--released", "acme", "order-7101")
	if code != exitOK || !strings.Contains(out, "the key is free: its next request is a new command") {
		t.Fatalf("settle --released: exit %d, %q, %q", code, out, errOut)
	}
	ledger, err := dynamostore.NewLedger(s.clients.DynamoDB, s.env[app.EnvLedgerTable])
	if err != nil {
		t.Fatal(err)
	}
	next, err := dynamostore.New(s.clients.DynamoDB, s.IdempotencyTable, func(o *dynamostore.Options) { o.Region, o.Ledger, o.Clock = "r1", ledger, later })
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"amount":1,"currency":"EUR"}`)
	begun, err := next.Begin(t.Context(), s.key(t, "order-7101"), idem.FingerprintOf(body), body)
	if err != nil || begun.Lease == nil || !begun.Lease.CreatedAt.After(parked.CreatedAt) {
		t.Fatalf("the key's next request, after settle said the key is free: %+v, %v; want a new command", begun, err)
	}
}
