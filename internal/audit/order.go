package audit

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/chargeonce/chargeonce/internal/charge"
)

// What orders a history. A table's stream orders each item's changes by
// sequence number. Nothing orders one item's changes against another's
// but their time, which DynamoDB stamps to the second. So a history goes
// second by second. Within a second, it keeps each item's order and the
// links below, which how a command runs proves:
//   - A row is written in the transaction that settles its command. It
//     follows the command's claim, and is read before its settlement.
//   - A row's later changes follow that settlement.
//   - A charge's row that holds a refund's amount follows its claim. An
//     attempt places one hold at most: the n-th follows the n-th attempt.
//   - A refund is claimed once its charge's row reads succeeded. So it
//     follows the settlement of the charge's command.
//   - A provider's event follows the claim of the command it settles.
//   - An operator's note precedes the change that ended the lease it saw.
// Where nothing of these orders two entries, rows go before records, then
// each stream's sequence numbers decide. Links that contradict the
// streams, which real changes never do, yield to them.

// causal is entries in an order that keeps those rules. It takes
// O(n log n) time for n entries and the links between them.
func causal(entries []Entry) []Entry {
	o := newOrder(entries)
	out := make([]Entry, 0, len(entries))
	for _, group := range o.seconds() {
		for _, i := range o.sort(group) {
			out = append(out, entries[i])
		}
	}
	return out
}

// order is what orders entries: each one's second, its item's entry
// before and after it, and the entries it follows by the links.
type order struct {
	entries    []Entry
	sec        []int64
	prev, next []int
	after      [][]int
}

func newOrder(entries []Entry) *order {
	n := len(entries)
	o := &order{entries: entries, sec: make([]int64, n), prev: make([]int, n), next: make([]int, n), after: make([][]int, n)}
	for i, e := range entries {
		o.sec[i], o.prev[i], o.next[i] = e.At.Unix(), -1, -1
	}
	chains := o.chains()
	for _, chain := range chains {
		for k, i := range chain {
			if k > 0 {
				o.prev[i], o.next[chain[k-1]] = chain[k-1], i
			}
		}
	}
	o.links(chains)
	return o
}

// seconds is the entries by second, the seconds in order.
func (o *order) seconds() [][]int {
	by := map[int64][]int{}
	for i, s := range o.sec {
		by[s] = append(by[s], i)
	}
	out := make([][]int, 0, len(by))
	for _, s := range slices.Sorted(maps.Keys(by)) {
		out = append(out, by[s])
	}
	return out
}

// chains are each item's entries in its stream's order. An operator's
// note joins its record's chain, before the change that ended the lease
// it saw (ended). It is read in the second of a neighbour when its clock
// disagrees.
func (o *order) chains() [][]int {
	items := map[string][]int{}
	var notes []int
	for i, e := range o.entries {
		if e.Table == TableOperator {
			notes = append(notes, i)
			continue
		}
		items[itemOf(e)] = append(items[itemOf(e)], i)
	}
	for _, chain := range items {
		slices.SortFunc(chain, o.stream)
	}
	for _, i := range notes {
		note := o.entries[i]
		record := itemOf(Entry{Table: TableRecords, KeyHash: note.KeyHash})
		chain := items[record]
		at := ended(o.entries, chain, note.Lease)
		if at < 0 {
			items[note.Event] = []int{i}
			continue
		}
		if at > 0 {
			o.sec[i] = max(o.sec[i], o.sec[chain[at-1]])
		}
		if at < len(chain) {
			o.sec[i] = min(o.sec[i], o.sec[chain[at]])
		}
		items[record] = slices.Insert(chain, at, i)
	}
	return slices.Collect(maps.Values(items))
}

// ended is where in chain, a record's changes, a note on lease goes:
// before the first change that ends it. A settlement, a take-over or a
// deletion ends it. With none, it goes after the last change holding it.
// It is -1 when no change names lease.
func ended(entries []Entry, chain []int, lease string) int {
	if lease == "" {
		return -1
	}
	at := -1
	for k, j := range chain {
		switch e := entries[j]; {
		case e.What == WhatQueueMark: // the reconciler's, not the lease's
		case e.Lease == lease && (e.What == WhatClaimed || e.What == WhatLeaseMoved || e.What == WhatTakenOver):
			at = k + 1
		case e.Lease == lease || at >= 0:
			return k
		}
	}
	return at
}

// stream compares entries i and j of one stream: by second, then by
// sequence number.
func (o *order) stream(i, j int) int {
	return cmp.Or(cmp.Compare(o.sec[i], o.sec[j]), bySeq(o.entries[i].Seq, o.entries[j].Seq), cmp.Compare(i, j))
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

// links sets, by index, the entries each entry follows across items.
func (o *order) links(chains [][]int) {
	type command struct{ key, charge, refund string }
	claims, settlements, rows := map[command][]int{}, map[command][]int{}, map[command][]int{}
	charged := map[string][]int{} // by charge id, its command's settlement
	refunds := map[string][]int{} // by refund id, its attempts: claims and take-overs
	for i, e := range o.entries {
		c := command{e.KeyHash, e.Charge, e.Refund}
		switch {
		case e.Table == TableCharges && e.What == WhatRowWritten:
			rows[c] = append(rows[c], i)
		case e.Table != TableRecords:
		case e.What == WhatClaimed:
			claims[c] = append(claims[c], i)
			if e.Operation == charge.RefundOperation {
				refunds[e.Refund] = append(refunds[e.Refund], i)
			}
		case e.What == WhatTakenOver && e.Operation == charge.RefundOperation:
			refunds[e.Refund] = append(refunds[e.Refund], i)
		case e.What == WhatSucceeded:
			settlements[c] = append(settlements[c], i)
			if e.Operation == charge.ChargeOperation {
				charged[e.Charge] = append(charged[e.Charge], i)
			}
		}
	}
	for i, e := range o.entries {
		c := command{e.KeyHash, e.Charge, e.Refund}
		switch {
		case e.Table == TableCharges && e.What == WhatRowWritten:
			o.after[i] = claims[c]
		case e.Table == TableCharges && (e.What == WhatRowChanged || e.What == WhatRowDeleted):
			o.after[i] = settlements[c]
		case e.Table != TableRecords:
		case e.What == WhatSucceeded:
			o.after[i] = rows[c]
		case e.What != WhatClaimed:
		case e.Operation == charge.RefundOperation:
			o.after[i] = charged[e.Charge]
		case e.Operation == charge.NotificationOperation:
			o.after[i] = claims[command{e.Command, e.Charge, e.Refund}]
		}
	}
	// An attempt places its hold once. So the n-th change of the row that
	// holds it follows the refund's n-th attempt, not a later one.
	for _, attempts := range refunds {
		slices.SortFunc(attempts, o.stream)
	}
	for _, chain := range chains {
		if first := o.entries[chain[0]]; first.Table != TableCharges || first.Refund != "" {
			continue // not a charge's row
		}
		held, placed := map[string]bool{}, map[string]int{}
		for _, i := range chain {
			now := holds(o.entries[i].Row)
			for id := range now {
				if held[id] {
					continue
				}
				if n := placed[id]; n < len(refunds[id]) {
					o.after[i] = append(slices.Clip(o.after[i]), refunds[id][n]) // a copy: others share the slice
				}
				placed[id]++
			}
			held = now
		}
	}
}

// holds are the ids of the refunds a charge's row holds an amount for.
func holds(row json.RawMessage) map[string]bool {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(row, &fields)
	out := map[string]bool{}
	for name := range fields {
		if id, ok := strings.CutPrefix(name, charge.HoldPrefix); ok {
			out[id] = true
		}
	}
	return out
}

// sort is the entries of one second in an order that keeps their items'
// and their links'. It is Kahn's: the preferred entry whose predecessors
// went first goes next. When a cycle leaves none, links yield: the
// preferred entry whose item's previous change went goes next.
func (o *order) sort(group []int) []int {
	in := make(map[int]bool, len(group))
	for _, i := range group {
		in[i] = true
	}
	waits := make(map[int]int, len(group))
	then := map[int][]int{}
	for _, i := range group {
		if p := o.prev[i]; p >= 0 && in[p] {
			waits[i]++
			then[p] = append(then[p], i)
		}
		for _, j := range o.after[i] {
			if j != i && in[j] {
				waits[i]++
				then[j] = append(then[j], i)
			}
		}
	}
	ready, heads := &queue{o: o}, &queue{o: o}
	for _, i := range group {
		if waits[i] == 0 {
			heap.Push(ready, i)
		}
		if p := o.prev[i]; p < 0 || !in[p] {
			heap.Push(heads, i)
		}
	}
	done := make(map[int]bool, len(group))
	out := make([]int, 0, len(group))
	for len(out) < len(group) {
		i := pop(ready, done)
		if i < 0 {
			i = pop(heads, done)
		}
		done[i] = true
		out = append(out, i)
		for _, j := range then[i] {
			if waits[j]--; waits[j] == 0 {
				heap.Push(ready, j)
			}
		}
		if n := o.next[i]; n >= 0 && in[n] {
			heap.Push(heads, n)
		}
	}
	return out
}

// pop is q's preferred entry not done yet, or -1.
func pop(q *queue, done map[int]bool) int {
	for q.Len() > 0 {
		if i := heap.Pop(q).(int); !done[i] {
			return i
		}
	}
	return -1
}

// queue holds entries by preference: rows first, then records, then
// operators' notes; then by sequence number.
type queue struct {
	o  *order
	is []int
}

func (q *queue) Len() int      { return len(q.is) }
func (q *queue) Swap(i, j int) { q.is[i], q.is[j] = q.is[j], q.is[i] }
func (q *queue) Push(x any)    { q.is = append(q.is, x.(int)) }
func (q *queue) Pop() any {
	x := q.is[len(q.is)-1]
	q.is = q.is[:len(q.is)-1]
	return x
}
func (q *queue) Less(i, j int) bool {
	a, b := q.o.entries[q.is[i]], q.o.entries[q.is[j]]
	return cmp.Or(cmp.Compare(rank(a.Table), rank(b.Table)), bySeq(a.Seq, b.Seq), cmp.Compare(q.is[i], q.is[j])) < 0
}

// rank is where a table's entries go when nothing else decides.
func rank(table string) int {
	switch table {
	case TableCharges:
		return 0
	case TableRecords:
		return 1
	case TableOperator:
		return 2
	}
	return 3
}

// bySeq compares sequence numbers: decimal strings of any length.
func bySeq(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), cmp.Compare(a, b)) }
