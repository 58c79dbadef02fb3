package audit

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
)

// What orders a history. A table's stream orders each item's changes by
// sequence number. Nothing orders one item's changes against another's,
// or one table's against the other's, but their time. DynamoDB stamps it
// to the second only. Within a second, how a command runs says more:
//   - A row is written in the transaction that settles its command. So it
//     follows the command's claim. Its later changes follow that settlement.
//   - A refund is claimed once its charge's row reads succeeded. So it
//     follows the settlement of the charge's command.
//   - A provider's event follows the claim of the command it settles: the
//     command was sent to the provider after it.
//   - An operator's note precedes the take-over it announces.
// Otherwise a second's claims go first, then the leases' moves, the rows'
// changes, the settlements and the expiries.

// causal is entries in an order that keeps those rules.
func causal(entries []Entry) []Entry {
	slices.SortFunc(entries, preferred)
	chains, after := chainsOf(entries), causes(entries)
	done := make([]bool, len(entries))
	ready := func(i int) bool {
		for _, j := range after[i] {
			if !done[j] {
				return false
			}
		}
		return true
	}
	out := make([]Entry, 0, len(entries))
	for len(out) < len(entries) {
		// The preferred chain's head whose causes went before it. Causes
		// that contradict the streams leave none: then the preferred head.
		best, free := -1, false
		for c, chain := range chains {
			if len(chain) == 0 {
				continue
			}
			r := ready(chain[0])
			if best < 0 || r && !free || r == free && chain[0] < chains[best][0] {
				best, free = c, r
			}
		}
		i := chains[best][0]
		chains[best] = chains[best][1:]
		done[i] = true
		out = append(out, entries[i])
	}
	return out
}

// preferred orders entries by second, then by step, then by stream.
func preferred(a, b Entry) int {
	return cmp.Or(second(a).Compare(second(b)), cmp.Compare(step(a.What), step(b.What)),
		cmp.Compare(a.Table, b.Table), bySeq(a.Seq, b.Seq), cmp.Compare(a.Event, b.Event))
}

// second is the entry's time as DynamoDB stamps it.
func second(e Entry) time.Time { return e.At.Truncate(time.Second) }

// bySeq compares sequence numbers: decimal strings of any length.
func bySeq(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), cmp.Compare(a, b)) }

// step is where a change falls in a command's run.
func step(what string) int {
	switch what {
	case WhatClaimed:
		return 0
	case WhatLeaseMoved, WhatTakenOver, WhatOperatorSettles:
		return 1
	case WhatSucceeded, WhatFailed, WhatReleased:
		return 3
	case WhatExpired, WhatDeleted:
		return 4
	}
	return 2 // a row's change, or one not read
}

// chainsOf is each item's entries, as indexes in its stream's order. An
// operator's note joins its record's chain, just before its take-over.
// That take-over counts one attempt more than the note saw.
func chainsOf(entries []Entry) [][]int {
	items := map[string][]int{}
	for i, e := range entries {
		if e.Table != TableOperator {
			items[itemOf(e)] = append(items[itemOf(e)], i)
		}
	}
	for _, chain := range items {
		slices.SortFunc(chain, func(i, j int) int {
			return cmp.Or(second(entries[i]).Compare(second(entries[j])), bySeq(entries[i].Seq, entries[j].Seq))
		})
	}
	for i, note := range entries {
		if note.Table != TableOperator {
			continue
		}
		record := itemOf(Entry{Table: TableRecords, KeyHash: note.KeyHash})
		at := slices.IndexFunc(items[record], func(j int) bool {
			e := entries[j]
			return e.What == WhatTakenOver && e.Attempts == note.Attempts+1 && e.CreatedAt.Equal(note.CreatedAt)
		})
		if at < 0 {
			items[note.Event] = []int{i}
			continue
		}
		items[record] = slices.Insert(items[record], at, i)
	}
	return slices.Collect(maps.Values(items))
}

// itemOf names what an entry changed: a record by its key's hash, a row by
// its ids. An entry of nothing known is an item of its own.
func itemOf(e Entry) string {
	switch {
	case e.Table == TableRecords && e.KeyHash != "":
		return e.Table + " " + e.KeyHash
	case e.Table == TableCharges && e.Charge != "":
		return e.Table + " " + e.Tenant + " " + e.Charge + " " + e.Refund
	}
	return e.Event
}

// causes are, by index, the entries each entry follows across items.
func causes(entries []Entry) [][]int {
	type command struct{ key, charge, refund string }
	claims, settlements := map[command][]int{}, map[command][]int{}
	charged := map[string][]int{} // by charge id, its command's settlement
	for i, e := range entries {
		c := command{e.KeyHash, e.Charge, e.Refund}
		switch {
		case e.Table != TableRecords:
		case e.What == WhatClaimed:
			claims[c] = append(claims[c], i)
		case e.What == WhatSucceeded:
			settlements[c] = append(settlements[c], i)
			if e.Operation == charge.ChargeOperation {
				charged[e.Charge] = append(charged[e.Charge], i)
			}
		}
	}
	after := make([][]int, len(entries))
	for i, e := range entries {
		c := command{e.KeyHash, e.Charge, e.Refund}
		switch {
		case e.Table == TableCharges && e.What == WhatRowWritten:
			after[i] = claims[c]
		case e.Table == TableCharges && (e.What == WhatRowChanged || e.What == WhatRowDeleted):
			after[i] = settlements[c]
		case e.Table != TableRecords || e.What != WhatClaimed:
		case e.Operation == charge.RefundOperation:
			after[i] = charged[e.Charge]
		case e.Operation == charge.NotificationOperation:
			after[i] = claims[command{e.Command, e.Charge, e.Refund}]
		}
	}
	return after
}
