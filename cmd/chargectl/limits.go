package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/limit"
)

// limitsOutput is one tenant's override, as limits list and set print it;
// a zero limit keeps the functions' default.
type limitsOutput struct {
	Tenant string `json:"tenant"`
	limit.Limits
}

func (a *admin) limitsTable() (*limit.Table, error) {
	return limit.NewTable(a.clients.DynamoDB, a.cfg.LimitsTable)
}

// limitsList prints every override, by tenant.
func (a *admin) limitsList(ctx context.Context) error {
	t, err := a.limitsTable()
	if err != nil {
		return err
	}
	m, err := t.Overrides(ctx)
	if err != nil {
		return err
	}
	out := []limitsOutput{}
	for _, tenant := range slices.Sorted(maps.Keys(m)) {
		out = append(out, limitsOutput{Tenant: tenant, Limits: m[tenant]})
	}
	if a.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "%d tenants with limits of their own; the others have the defaults (%s, %s):\n", len(out), app.EnvTenantRate, app.EnvTenantConcurrency)
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tRATE (/s)\tCONCURRENCY")
	for _, o := range out {
		fmt.Fprintf(w, "%s\t%s\t%s\n", o.Tenant, orDefault(o.Rate), orDefault(o.Concurrency))
	}
	return w.Flush()
}

func orDefault(n int) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

// limitsSet sets tenant's override, or with zero limits removes it. The
// functions read the overrides again within LIMITS_MAX_AGE.
func (a *admin) limitsSet(ctx context.Context, tenant string, l limit.Limits) error {
	t, err := a.limitsTable()
	if err != nil {
		return err
	}
	if l == (limit.Limits{}) {
		err = t.DeleteOverride(ctx, tenant)
	} else {
		err = t.SetOverride(ctx, tenant, l)
	}
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(limitsOutput{Tenant: tenant, Limits: l})
	}
	fmt.Fprintf(a.stdout, "%s: rate %s a second, concurrency %s; every charge function applies it within %s (default 1m)\n",
		tenant, orDefault(l.Rate), orDefault(l.Concurrency), app.EnvLimitsMaxAge)
	return nil
}
