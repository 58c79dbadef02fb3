package audit

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
)

// TestCausalKeepsEachItemsStreamAndEachCommandsSteps: changes stamped
// with one second read in the order they happened. A record's own
// changes keep its stream's order, whatever their steps. A row follows
// the claim of its own intent, and so does a provider's event. A hold
// follows its refund's claim. An operator's note precedes the take-over
// of the lease it saw. Time still comes first.
func TestCausalKeepsEachItemsStreamAndEachCommandsSteps(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	created := at.Add(-time.Hour)
	record := func(seq, what, lease string) Entry {
		return Entry{Event: "r" + seq, Table: TableRecords, Seq: seq, At: at, What: what, Operation: charge.ChargeOperation,
			KeyHash: "k", Charge: "ch_1", Lease: lease, CreatedAt: created}
	}
	row := func(seq, what string) Entry {
		return Entry{Event: "c" + seq, Table: TableCharges, Seq: seq, At: at, What: what, KeyHash: "k", Charge: "ch_1", CreatedAt: created}
	}
	note := Entry{Event: "note", Table: TableOperator, Seq: "1", At: at.Add(900 * time.Millisecond), What: WhatOperatorSettles,
		KeyHash: "k", Charge: "ch_1", Lease: "b", CreatedAt: created}
	event := Entry{Event: "event", Table: TableRecords, Seq: "5", At: at, What: WhatClaimed, Operation: charge.NotificationOperation,
		KeyHash: "e", Command: "k", Charge: "ch_1", CreatedAt: created}
	later := record("1", WhatExpired, "a")
	later.Event, later.At = "later", at.Add(24*time.Hour)
	// The settled record's queue mark removed a second later, filed as a
	// settlement: a refund's claim must not wait for it.
	unmarked := record("14", WhatSucceeded, "a")
	unmarked.Event, unmarked.At = "unmarked", at.Add(time.Second)
	refund := func(seq, what, id string) Entry {
		return Entry{Event: id + " " + what, Table: TableRecords, Seq: seq, At: at, What: what, Operation: charge.RefundOperation,
			KeyHash: id, Charge: "ch_1", Refund: id, CreatedAt: created}
	}
	held := func(seq string, refunds ...string) Entry {
		e := row(seq, WhatRowChanged)
		e.Row = []byte(`{"status":"succeeded"}`)
		for _, id := range refunds {
			e.Row = []byte(`{"status":"succeeded","` + "hold_" + id + `":500}`)
		}
		return e
	}
	refundRow := func(seq, id string) Entry {
		return Entry{Event: "c" + seq, Table: TableCharges, Seq: seq, At: at, What: WhatRowWritten, KeyHash: id, Charge: "ch_1", Refund: id}
	}

	tests := []struct {
		name string
		in   []Entry
		want []string
	}{
		{"released, then claimed again; then the row", []Entry{
			record("10", WhatClaimed, "a"), record("11", WhatReleased, "a"), record("12", WhatClaimed, "b"),
			record("13", WhatSucceeded, "b"), row("90", WhatRowWritten), row("91", WhatRowChanged),
		}, []string{"r10", "r11", "r12", "c90", "r13", "c91"}},
		{"an operator's note, before its take-over", []Entry{
			note, record("10", WhatClaimed, "a"), record("11", WhatTakenOver, "b"), record("12", WhatLeaseMoved, "b"),
			record("13", WhatTakenOver, "c"), record("14", WhatReleased, "c"),
		}, []string{"r10", "r11", "r12", "note", "r13", "r14"}},
		{"an operator's note, before the take-over of the lease it saw, after a reclaim", []Entry{
			note, record("10", WhatClaimed, "a"), record("11", WhatTakenOver, "x"), record("12", WhatReleased, "x"),
			record("13", WhatClaimed, "b"), record("14", WhatLeaseMoved, "b"), record("15", WhatTakenOver, "c"), record("16", WhatReleased, "c"),
		}, []string{"r10", "r11", "r12", "r13", "r14", "note", "r15", "r16"}},
		{"a provider's event, after the claim of its command", []Entry{
			event, record("10", WhatClaimed, "a"), record("11", WhatSucceeded, "a"),
		}, []string{"r10", "event", "r11"}},
		{"a later second, whatever its step", []Entry{
			later, row("90", WhatRowWritten), record("10", WhatClaimed, "a"), record("11", WhatSucceeded, "a"),
		}, []string{"r10", "c90", "r11", "later"}},
		{"a later second, whatever a link says", []Entry{
			unmarked, refund("12", WhatClaimed, "re_1"), record("11", WhatSucceeded, "a"), row("90", WhatRowWritten), record("10", WhatClaimed, "a"),
		}, []string{"r10", "c90", "r11", "re_1 claimed", "unmarked"}},
		{"links that contradict the streams yield to them", []Entry{
			record("11", WhatClaimed, "b"), row("90", WhatRowWritten), record("10", WhatSucceeded, "a"),
		}, []string{"c90", "r10", "r11"}},
		{"two refunds, one after the other", []Entry{
			refund("12", WhatClaimed, "re_1"), refund("13", WhatSucceeded, "re_1"), refund("14", WhatClaimed, "re_2"), refund("15", WhatSucceeded, "re_2"),
			record("10", WhatClaimed, "a"), record("11", WhatSucceeded, "a"), row("90", WhatRowWritten),
			held("91", "re_1"), refundRow("92", "re_1"), held("93"), held("94", "re_2"), refundRow("95", "re_2"), held("96"),
		}, []string{
			"r10", "c90", "r11",
			"re_1 claimed", "c91", "c92", "c93", "re_1 succeeded",
			"re_2 claimed", "c94", "c95", "c96", "re_2 succeeded",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, e := range causal(tt.in) {
				got = append(got, e.Event)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}

// BenchmarkCausal orders 24,003 entries in one second: a charge and 4,800
// refunds of it, one after the other, shuffled as the archive's objects
// may hand them over.
func BenchmarkCausal(b *testing.B) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	seq := 0
	next := func() string { seq++; return strconv.Itoa(100000 + seq) }
	entry := func(table, what, key, refund string) Entry {
		s := next()
		return Entry{Event: table + s, Table: table, Seq: s, At: at, What: what, KeyHash: key, Charge: "ch_1", Refund: refund,
			Operation: map[bool]string{true: charge.ChargeOperation, false: charge.RefundOperation}[refund == ""]}
	}
	in := []Entry{entry(TableRecords, WhatClaimed, "k", ""), entry(TableCharges, WhatRowWritten, "k", ""), entry(TableRecords, WhatSucceeded, "k", "")}
	for r := range 4800 {
		id := "re_" + strconv.Itoa(r)
		held := entry(TableCharges, WhatRowChanged, "k", "")
		held.Row = []byte(`{"` + charge.HoldPrefix + id + `":500}`)
		in = append(in, entry(TableRecords, WhatClaimed, id, id), held, entry(TableCharges, WhatRowWritten, id, id),
			entry(TableCharges, WhatRowChanged, "k", ""), entry(TableRecords, WhatSucceeded, id, id))
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
	for b.Loop() {
		causal(slices.Clone(in))
	}
}

// TestCausalPutsANoteBeforeTheChangeThatEndedItsLease: chargectl admin
// settle notes lease "a", then finds its holder settled the record under
// it meanwhile. A day later TTL deletes the record, whose old image still
// names "a". The note reads before the settlement, not after the expiry.
func TestCausalPutsANoteBeforeTheChangeThatEndedItsLease(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	rec := func(seq, what string, when time.Time) Entry {
		return Entry{Event: "r" + seq, Table: TableRecords, Seq: seq, At: when, What: what, Operation: charge.ChargeOperation,
			KeyHash: "k", Charge: "ch_1", Lease: "a", CreatedAt: at}
	}
	note := Entry{Event: "note", Table: TableOperator, Seq: "1", At: at.Add(5 * time.Second), What: WhatOperatorSettles,
		KeyHash: "k", Charge: "ch_1", Lease: "a", CreatedAt: at}
	in := []Entry{rec("10", WhatClaimed, at), note, rec("11", WhatSucceeded, at.Add(6*time.Second)), rec("12", WhatExpired, at.Add(24*time.Hour))}
	var got []string
	for _, e := range causal(in) {
		got = append(got, e.Event)
	}
	if n := slices.Index(got, "note"); n < slices.Index(got, "r10") || n > slices.Index(got, "r11") {
		t.Errorf("order %v: the operator's note (12:00:05) is not between the claim and the settlement of the lease it saw", got)
	}
}

// TestCausalLinksAHoldToTheClaimOfItsOwnAttempt: a refund claimed places
// its hold, frees it, and is released; claimed again in the same second,
// it holds again. The first hold follows the first claim alone: it reads
// before the release, not as if the second attempt placed it.
func TestCausalLinksAHoldToTheClaimOfItsOwnAttempt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	record := func(seq, what, key, refund, op string) Entry {
		return Entry{Event: "r" + seq, Table: TableRecords, Seq: seq, At: at, What: what, Operation: op, KeyHash: key, Charge: "ch_1", Refund: refund, CreatedAt: at}
	}
	row := func(seq, what, body string) Entry {
		return Entry{Event: "c" + seq, Table: TableCharges, Seq: seq, At: at, What: what, KeyHash: "k", Charge: "ch_1", CreatedAt: at, Row: []byte(body)}
	}
	in := []Entry{
		record("10", WhatClaimed, "k", "", charge.ChargeOperation), row("90", WhatRowWritten, `{"status":"succeeded"}`), record("11", WhatSucceeded, "k", "", charge.ChargeOperation),
		record("20", WhatClaimed, "rk", "re_1", charge.RefundOperation),
		row("91", WhatRowChanged, `{"status":"succeeded","hold_re_1":500}`), // attempt a's hold
		row("92", WhatRowChanged, `{"status":"succeeded"}`),                 // freed before the release
		record("21", WhatReleased, "rk", "re_1", charge.RefundOperation),
		record("22", WhatClaimed, "rk", "re_1", charge.RefundOperation),
		row("93", WhatRowChanged, `{"status":"succeeded","hold_re_1":500}`), // attempt b's hold
	}
	var got []string
	for _, e := range causal(in) {
		got = append(got, e.Event)
	}
	if slices.Index(got, "c91") > slices.Index(got, "r21") {
		t.Errorf("order %v: attempt a's hold (c91) and its freeing read after a's release (r21) and b's claim (r22)", got)
	}
}

// TestCausalKeepsEveryEntryOnceInOneOrder: with a
// cycle in the links, shuffled input, causal keeps each entry once, each
// item's stream order, and gives one order whatever the input's order.
func TestCausalKeepsEveryEntryOnceInOneOrder(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	rec := func(seq, what, lease string) Entry {
		return Entry{Event: "r" + seq, Table: TableRecords, Seq: seq, At: at, What: what, Operation: charge.ChargeOperation, KeyHash: "k", Charge: "ch_1", Lease: lease}
	}
	row := func(seq, what string) Entry {
		return Entry{Event: "c" + seq, Table: TableCharges, Seq: seq, At: at, What: what, KeyHash: "k", Charge: "ch_1"}
	}
	refund := func(seq, what string) Entry {
		return Entry{Event: "f" + seq, Table: TableRecords, Seq: seq, At: at, What: what, Operation: charge.RefundOperation, KeyHash: "rk", Charge: "ch_1", Refund: "re_1"}
	}
	note := Entry{Event: "note", Table: TableOperator, Seq: "5", At: at, What: WhatOperatorSettles, KeyHash: "k", Lease: "a"}
	base := []Entry{
		// a cycle: the row waits for r12's claim, r11's success for the row, r12 follows r11 in its stream
		rec("11", WhatSucceeded, "a"), rec("12", WhatClaimed, "b"), row("90", WhatRowWritten), row("91", WhatRowChanged),
		refund("30", WhatClaimed), refund("31", WhatSucceeded), note, rec("13", WhatTakenOver, "c"),
	}
	var first []string
	r := rand.New(rand.NewPCG(7, 9))
	for n := range 200 {
		in := slices.Clone(base)
		r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		var got []string
		for _, e := range causal(in) {
			got = append(got, e.Event)
		}
		sorted := slices.Sorted(slices.Values(got))
		want := []string{"c90", "c91", "f30", "f31", "note", "r11", "r12", "r13"}
		if !slices.Equal(sorted, want) {
			t.Fatalf("entries %v, want each of %v once", got, want)
		}
		for _, pair := range [][2]string{{"r11", "r12"}, {"r12", "r13"}, {"c90", "c91"}, {"f30", "f31"}} {
			if slices.Index(got, pair[0]) > slices.Index(got, pair[1]) {
				t.Fatalf("order %v breaks %s before %s", got, pair[0], pair[1])
			}
		}
		if n == 0 {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("order %v, then %v, from the same entries", first, got)
		}
	}
	t.Logf("order %v", first)
}
