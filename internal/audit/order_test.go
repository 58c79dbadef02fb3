package audit

import (
	"slices"
	"testing"
	"time"

	"github.com/chargeonce/chargeonce/internal/charge"
)

// TestCausalKeepsEachItemsStreamAndEachCommandsSteps: changes stamped
// with one second read in the order they happened. A record's own
// changes keep its stream's order, whatever their steps. A row follows
// the claim of its own intent, and so does a provider's event. An
// operator's note precedes its take-over. Time still comes first.
func TestCausalKeepsEachItemsStreamAndEachCommandsSteps(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	created := at.Add(-time.Hour)
	record := func(seq, what string, attempts int) Entry {
		return Entry{Event: "r" + seq, Table: TableRecords, Seq: seq, At: at, What: what, Operation: charge.ChargeOperation,
			KeyHash: "k", Charge: "ch_1", Attempts: attempts, CreatedAt: created}
	}
	row := func(seq, what string) Entry {
		return Entry{Event: "c" + seq, Table: TableCharges, Seq: seq, At: at, What: what, KeyHash: "k", Charge: "ch_1", CreatedAt: created}
	}
	note := Entry{Event: "note", Table: TableOperator, Seq: "1", At: at.Add(900 * time.Millisecond), What: WhatOperatorSettles,
		KeyHash: "k", Charge: "ch_1", Attempts: 1, CreatedAt: created}
	event := Entry{Event: "event", Table: TableRecords, Seq: "5", At: at, What: WhatClaimed, Operation: charge.NotificationOperation,
		KeyHash: "e", Command: "k", Charge: "ch_1", CreatedAt: created}
	later := record("1", WhatExpired, 0)
	later.Event, later.At = "later", at.Add(24*time.Hour)

	tests := []struct {
		name string
		in   []Entry
		want []string
	}{
		{"released, then claimed again; then the row", []Entry{
			record("10", WhatClaimed, 0), record("11", WhatReleased, 0), record("12", WhatClaimed, 0),
			record("13", WhatSucceeded, 0), row("90", WhatRowWritten), row("91", WhatRowChanged),
		}, []string{"r10", "r11", "r12", "c90", "r13", "c91"}},
		{"an operator's note, before its take-over", []Entry{
			note, record("10", WhatClaimed, 0), record("11", WhatTakenOver, 1), record("12", WhatLeaseMoved, 1),
			record("13", WhatTakenOver, 2), record("14", WhatReleased, 2),
		}, []string{"r10", "r11", "r12", "note", "r13", "r14"}},
		{"a provider's event, after the claim of its command", []Entry{
			event, record("10", WhatClaimed, 0), record("11", WhatSucceeded, 0),
		}, []string{"r10", "event", "r11"}},
		{"a later second, whatever its step", []Entry{
			later, row("90", WhatRowWritten), record("10", WhatClaimed, 0), record("11", WhatSucceeded, 0),
		}, []string{"r10", "c90", "r11", "later"}},
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
