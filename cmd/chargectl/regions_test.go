package main

import (
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// TestAdminFailoverAndDrain: an operator reads a home's route, fails it
// over once they type the home's name, then marks the Region it left
// drained once they type that Region's; a drain of a Region not pending
// writes nothing.
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
	code, out, _ = s.admin(t, "drained", "--yes", "--json", "us-east-1", "us-east-1")
	if code != exitOK || !strings.Contains(out, `"served_by":"us-west-2","epoch":2`) || strings.Contains(out, "pending") {
		t.Fatalf("drained: exit %d, %q", code, out)
	}
}
