package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestAdminFailoverAndDrain: an operator reads a home's route, fails it
// over once they type the home's name, then marks the Region it left
// drained once they type that Region's; a drain of a Region not pending,
// or before the failover takes effect, writes nothing.
func TestAdminFailoverAndDrain(t *testing.T) {
	s := newAdminStack(t)
	name, drop, err := testkit.NewTable(t.Context(), regions.TableInput(testkit.UniqueName("routes")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
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
