package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/chargeonce/chargeonce/internal/benchout"
)

// isolationSection reads loadgen isolation's summary. It sets out tenant B
// in each phase, and A, then what the ledger says of both.
func isolationSection(summary string) (string, error) {
	b, err := os.ReadFile(summary)
	if err != nil {
		return "", err
	}
	var s benchout.Isolation
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("%s: %w", summary, err)
	}
	return isolationTable(s), nil
}

func isolationTable(s benchout.Isolation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Started %s, load average %s; %s, %d rounds of three %.0f s phases: tenant B alone, beside tenant A at its limit, beside A at %d times it.\n\n",
		orNone(s.Started), orNone(s.LoadAvg), orNone(s.Tool), s.Rounds, s.PhaseSeconds, int(s.ARate)/max(s.ALimit, 1))
	b.WriteString("| requests | offered | sent | answers | admitted | p50 / p95 / p99 | ÷ B alone, p50 / p99 | ÷ B beside A at its limit |\n")
	b.WriteString("|---|---:|---:|---|---:|---|---|---|\n")
	row := func(name string, rate float64, r benchout.TenantRun, ratios ...string) {
		ratios = append(ratios, "", "")
		fmt.Fprintf(&b, "| %s | %.0f req/s | %d | %s | %.1f req/s | %s | %s | %s |\n", name, rate, r.Requests, counts(r.Answers), r.AdmittedPerSecond, percentiles(r.Latency), ratios[0], ratios[1])
	}
	limitRate := float64(s.ALimit)
	row("B alone", s.BRate, s.BAlone)
	row("B beside A at its limit", s.BRate, s.BBesideLimit,
		fmt.Sprintf("%.2f× / %.2f×", s.BBesideLimit.Latency.P50/s.BAlone.Latency.P50, s.BBesideLimit.Latency.P99/s.BAlone.Latency.P99))
	row("B beside A's flood", s.BRate, s.BBesideFlood,
		fmt.Sprintf("**%.2f× / %.2f×**", s.P50Ratio, s.P99Ratio), fmt.Sprintf("%.2f× / %.2f×", s.ExcessP50Ratio, s.ExcessP99Ratio))
	row("A at its limit", limitRate, s.AAtLimit)
	row("A's flood", s.ARate, s.AFlood)
	b.WriteString("\n| the ledger and the rows, all phases | A | B |\n|---|---:|---:|\n")
	for _, r := range []struct {
		name string
		v    func(benchout.Check) int
	}{
		{"keys sent", func(c benchout.Check) int { return c.Logical }},
		{"answered 201", func(c benchout.Check) int { return c.Created }},
		{"charges on the provider's ledger", func(c benchout.Check) int { return c.LedgerCharges }},
		{"charge requests the provider received", func(c benchout.Check) int { return c.ProviderCalls }},
		{"rows in the charges table", func(c benchout.Check) int { return c.Rows }},
		{"duplicates, missing, stray rows", func(c benchout.Check) int { return c.Duplicates + c.Missing + c.Stray }},
	} {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", r.name, r.v(s.ACheck), r.v(s.BCheck))
	}
	fmt.Fprintf(&b, "| keys answered 429 that have a record | %d | – |\n\n", s.ARefusedStored)
	var rounds []string
	for _, r := range s.RoundP99s {
		rounds = append(rounds, fmt.Sprintf("%s / %s / %s", num(r[0]), num(r[1]), num(r[2])))
	}
	if len(rounds) > 0 {
		fmt.Fprintf(&b, "B's p99 round by round, alone / beside A at its limit / beside A's flood, in ms: %s.\n\n", strings.Join(rounds, "; "))
	}
	fmt.Fprintf(&b, "Every check held: **%s**.\n", map[bool]string{true: "yes", false: "no"}[s.OK])
	return b.String()
}
