package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/chargeonce/chargeonce/internal/regions"
)

// routeOutput is what the route commands print.
type routeOutput struct {
	Home     string   `json:"home"`
	ServedBy string   `json:"served_by"`
	Epoch    int64    `json:"epoch"`
	Since    string   `json:"since,omitempty"`
	Pending  []string `json:"pending,omitempty"`
}

// readRoute reads home's route from the deployment's routes table.
func (a *admin) readRoute(ctx context.Context, home string) (*regions.Routes, regions.Route, error) {
	r, err := regions.NewRoutes(a.clients.DynamoDB, a.cfg.RoutesTable)
	if err != nil {
		return nil, regions.Route{}, err
	}
	rt, err := r.Route(ctx, home)
	return r, rt, err
}

// route prints home's route: who serves its tenants, and since when. It
// lists the Regions not yet drained.
func (a *admin) route(ctx context.Context, args []string) error {
	_, rt, err := a.readRoute(ctx, args[0])
	if err != nil {
		return err
	}
	return a.printRoute(rt)
}

func (a *admin) printRoute(rt regions.Route) error {
	out := routeOutput{Home: rt.Home, ServedBy: rt.ServedBy, Epoch: rt.Epoch, Pending: rt.Pending}
	if rt.Epoch > 0 {
		out.Since = rt.Since.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	if a.json {
		return json.NewEncoder(a.stdout).Encode(out)
	}
	fmt.Fprintf(a.stdout, "home %s: served by %s, epoch %d", out.Home, out.ServedBy, out.Epoch)
	if out.Since != "" {
		fmt.Fprintf(a.stdout, ", since %s", out.Since)
	}
	if len(out.Pending) > 0 {
		fmt.Fprintf(a.stdout, "; not drained: %s", strings.Join(out.Pending, ", "))
	}
	fmt.Fprintln(a.stdout)
	return nil
}

// failover serves home's tenants from to, after the fence
// (docs/operations.md, "Failing a Region over").
func (a *admin) failover(ctx context.Context, args []string, yes bool) error {
	home, to := args[0], args[1]
	r, rt, err := a.readRoute(ctx, home)
	if err != nil {
		return err
	}
	if rt.ServedBy == to {
		return fmt.Errorf("%s already serves home %s: nothing written", to, home)
	}
	fmt.Fprintf(a.stderr, "home %s is served by %s; %s will serve it from %s on, and %s stays pending until drained\n",
		home, rt.ServedBy, to, regions.FenceDelay, rt.ServedBy)
	if err := a.typed(yes, home); err != nil {
		return err
	}
	next, err := r.Move(ctx, rt, to, a.clock(), regions.FenceDelay)
	if err != nil {
		return err
	}
	return a.printRoute(next)
}

// drained marks region drained for home: its writes have all replicated,
// or the operator writes them off.
func (a *admin) drained(ctx context.Context, args []string, yes bool) error {
	home, region := args[0], args[1]
	r, rt, err := a.readRoute(ctx, home)
	if err != nil {
		return err
	}
	if !slices.Contains(rt.Pending, region) {
		return fmt.Errorf("%s is not pending for home %s: nothing written", region, home)
	}
	// Until the failover takes effect, region's leases may still write.
	// Both clocks must be past it: a fast one must not drain early.
	now := a.clock()
	if !rt.Read.IsZero() && rt.Read.Before(now) {
		now = rt.Read
	}
	if now.Before(rt.Since) {
		return fmt.Errorf("the failover of home %s takes effect at %s; %s may write until then: nothing written",
			home, rt.Since.UTC().Format("2006-01-02T15:04:05.000Z"), region)
	}
	fmt.Fprintf(a.stderr, "home %s: %s's claims and records become the serving Region's to settle\n", home, region)
	if err := a.typed(yes, region); err != nil {
		return err
	}
	next, err := r.Drained(ctx, rt, region)
	if err != nil {
		return err
	}
	return a.printRoute(next)
}

// typed asks the operator to type want, unless yes. A route change moves
// every tenant of a home.
func (a *admin) typed(yes bool, want string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(a.stderr, "type %s to confirm: ", want)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the confirmation: %w", err)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("not confirmed (typed %q): nothing written", got)
	}
	return nil
}
