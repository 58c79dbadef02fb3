package main

import (
	"fmt"
	"io"
	"time"
)

// report is a run's figures and checks.
type report struct {
	Seed     uint64  `json:"seed"`
	Duration string  `json:"duration"`
	Outage   string  `json:"outage"`
	Rate     float64 `json:"rate"`
	// Settings are the stack's settings the run chose (stackDefaults).
	Settings map[string]string `json:"settings"`
	// Requests counts the HTTP requests the clients sent, and Intents
	// the intents by kind. Keys counts the commands among them: charges,
	// authorizations and refunds, each its own idempotency key.
	Requests int            `json:"requests"`
	Intents  map[string]int `json:"intents"`
	Keys     int            `json:"keys"`
	// Ends counts the intents by how they ended.
	Ends map[string]int `json:"ends"`
	// Answers counts the answers by status and problem; NothingDone the
	// answers that say nothing was done.
	Answers     map[string]int `json:"answers"`
	NothingDone int            `json:"nothing_done"`
	// Faults counts the faults injected, by "target kind".
	Faults      map[string]int `json:"faults"`
	FaultsTotal int            `json:"faults_total"`
	// HealedAt is when the faults were taken away.
	HealedAt time.Time `json:"healed_at"`
	// SettleSeconds is the time from healing until every intent had its
	// final answer and nothing was in flight. Zero: that never came.
	SettleSeconds float64 `json:"settle_seconds"`
	// QueuePeak and QueueAtHeal are the reconcile queue's depth (waiting,
	// in flight and delayed), at its most and when the faults healed.
	QueuePeak   int          `json:"queue_peak"`
	QueueAtHeal int          `json:"queue_at_heal"`
	Queue       queueFigures `json:"reconcile"`
	Checks      []check      `json:"checks"`
	Passed      bool         `json:"passed"`
}

// figures counts what the intents sent and received, and the faults.
func (rep *report) figures(intents []*intent, faults []fault) {
	rep.Intents, rep.Ends, rep.Answers, rep.Faults = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, in := range intents {
		rep.Intents[in.Kind]++
		rep.Ends[in.End]++
		if in.ID != "" {
			rep.Keys++
		}
		for _, a := range in.recorded() {
			rep.Requests++
			rep.Answers[a.name()]++
			if a.nothingDone() {
				rep.NothingDone++
			}
		}
	}
	for _, f := range faults {
		rep.Faults[f.Target+" "+f.Kind]++
	}
	rep.FaultsTotal = len(faults)
}

func (rep report) print(w io.Writer) {
	fmt.Fprintf(w, "chaos: %d requests, %d intents %v, %d keys; ends %v\n", rep.Requests, sum(rep.Intents), rep.Intents, rep.Keys, rep.Ends)
	fmt.Fprintf(w, "chaos: %d faults %v\n", rep.FaultsTotal, rep.Faults)
	fmt.Fprintf(w, "chaos: answers %v; %d said nothing was done\n", rep.Answers, rep.NothingDone)
	q := rep.Queue
	fmt.Fprintf(w, "chaos: reconcile queue at most %d deep, %d at healing; %d messages for %d keys (%.2f a key, at most %d), delivered %d times, %d of them after healing, %d finding nothing to do; sweeps queued %d keys and passed over %d queued already\n",
		rep.QueuePeak, rep.QueueAtHeal, q.Messages, q.Keys, q.PerKey, q.MostKey, q.Deliveries, q.AfterHeal, q.NothingToDo, q.SweepQueued, q.SweepSkipped)
	if rep.SettleSeconds > 0 {
		fmt.Fprintf(w, "chaos: settled %.1f s after healing\n", rep.SettleSeconds)
	} else {
		fmt.Fprintln(w, "chaos: NOT settled")
	}
	for _, c := range rep.Checks {
		verdict := "ok"
		if c.Failed > 0 {
			verdict = fmt.Sprintf("FAILED %d", c.Failed)
		}
		fmt.Fprintf(w, "chaos: %-40s %6d checked  %s\n", c.Name, c.Checked, verdict)
		for _, e := range c.Examples {
			fmt.Fprintf(w, "chaos:     %s\n", e)
		}
	}
	if q.InternalErrors > 0 {
		fmt.Fprintf(w, "chaos: the stack logged %d errors of class internal\n", q.InternalErrors)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
