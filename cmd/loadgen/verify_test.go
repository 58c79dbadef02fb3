package main

import (
	"reflect"
	"testing"

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

func TestCheck(t *testing.T) {
	keys, refs := []string{"a", "b"}, []string{"ref-a", "ref-b"}
	created := []outcome{{sent: true, status: 201}}
	charged := providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusCharged}
	for _, tc := range []struct {
		name    string
		answers [][]outcome
		ledger  map[string]providersim.LedgerEntry
		rows    []string
		want    checked
	}{{
		name:    "all charged once",
		answers: [][]outcome{created, append(created, outcome{sent: true, status: 201, replayed: true})},
		ledger:  map[string]providersim.LedgerEntry{"ref-a": charged, "ref-b": charged, "other": charged},
		rows:    []string{"a", "b"},
		want:    checked{Check: benchout.Check{Logical: 2, Created: 2, LedgerCharges: 2, ProviderCalls: 2, Rows: 2, OK: true}},
	}, {
		name:    "provider called twice, two rows",
		answers: [][]outcome{created, created},
		ledger:  map[string]providersim.LedgerEntry{"ref-a": {Charges: 1, Calls: 2, Status: provider.StatusCharged}, "ref-b": charged},
		rows:    []string{"a", "a", "b"},
		want:    checked{Check: benchout.Check{Logical: 2, Created: 2, LedgerCharges: 2, ProviderCalls: 3, Rows: 3, Duplicates: 2}},
	}, {
		name:    "201 without a row, a row without a key",
		answers: [][]outcome{created, created},
		ledger:  map[string]providersim.LedgerEntry{"ref-a": charged, "ref-b": charged},
		rows:    []string{"a", "z"},
		want:    checked{Check: benchout.Check{Logical: 2, Created: 2, LedgerCharges: 2, ProviderCalls: 2, Rows: 2, Missing: 1, Stray: 1}, missing: []int{1}},
	}, {
		name:    "dropped and failed",
		answers: [][]outcome{{{}}, {{sent: true, failure: "timeout"}, {sent: true, status: 503}}},
		ledger:  map[string]providersim.LedgerEntry{},
		want:    checked{Check: benchout.Check{Logical: 2, Unanswered: 2}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := check(keys, refs, tc.answers, tc.ledger, tc.rows); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("check %+v, want %+v", got, tc.want)
			}
		})
	}
}
