package main

import (
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/client"
)

// charged is an intent ended end, answered with the charge under ref.
func charged(n int, amount int64, end, ref string) *intent {
	return &intent{Kind: kindCharge, N: n, ID: client.CommandID(ref), Amount: amount, End: end,
		charge: client.Charge{ID: "ch_" + ref, ProviderReference: ref, Status: client.StatusSucceeded, Amount: amount}}
}

func entry(amount int64) providersim.LedgerEntry {
	return providersim.LedgerEntry{Charges: 1, Calls: 1, Status: provider.StatusCharged, Amount: amount}
}

// TestChecksFindWhatTheLedgerContradicts: each check fails on the case it
// is for, and passes on a run that kept the contract.
func TestChecksFindWhatTheLedgerContradicts(t *testing.T) {
	t.Parallel()
	good := charged(1, 1001, endDone, "co_a")
	refund := &intent{Kind: kindRefund, N: 2, ID: "r", Amount: 1, End: endDone, parent: good}
	told := charged(3, 1003, endAbandoned, "co_c") // told nothing was done
	refused := charged(4, 1004, endRefused, "co_d")
	twice := charged(5, 1005, endDone, "co_e")
	l := providersim.Ledger{
		References: map[string]providersim.LedgerEntry{
			"co_a": entry(1001), "co_c": entry(1003),
			"co_e": entry(1005), "co_e2": entry(1005), // one intent, two charges
			"co_x": entry(7777), // no intent's
		},
		Refunds: map[string]providersim.LedgerRefund{"rf_a": {Refunds: 1, Charge: "co_a", Amount: 1}},
	}
	l.References["co_a"] = providersim.LedgerEntry{Charges: 1, Status: provider.StatusCharged, Amount: 1001, Refunded: 1}
	x := indexLedger(l)
	intents := []*intent{good, refund, told, refused, twice}

	once := checkOnce(intents, x)
	if once.Failed != 2 || !strings.Contains(strings.Join(once.Examples, "\n"), "2 effects") || !strings.Contains(strings.Join(once.Examples, "\n"), "7777") {
		t.Errorf("at most once: %+v, want the double charge and the stray one", once)
	}
	answered := checkTrue(intents, x)
	if answered.Failed != 2 || !strings.Contains(strings.Join(answered.Examples, "\n"), "abandoned") {
		t.Errorf("answers true: %+v, want the abandoned intent charged and the one charged twice", answered)
	}
	ch := checkCharges(map[*intent]client.Charge{good: {ID: "ch_co_a", Status: client.StatusSucceeded, Amount: 1001, AmountRefunded: 0}}, x)
	if ch.Failed != 1 {
		t.Errorf("charges: %+v, want the refund missing from the charge", ch)
	}

	good.record(answer{Status: 201, Body: []byte(`{"id":"ch_co_a"}`)})
	good.record(answer{Status: 201, Replayed: true, Body: []byte(`{"id":"ch_co_a"}`)})
	good.record(answer{Status: 201, Replayed: true, Body: []byte(`{"id":"ch_co_a" }`)})
	good.record(answer{Status: 500, Problem: "internal-error"})
	if r := checkReplays(intents); r.Checked != 2 || r.Failed != 1 {
		t.Errorf("replays: %+v, want one of two replays differing", r)
	}
	if c := checkNo500(intents); c.Failed != 1 {
		t.Errorf("no 500: %+v", c)
	}
	if s := checkSettled(append(intents, &intent{Kind: kindCapture, End: endUnfinished}), []string{"acme#create-charge#k"}); s.Failed != 2 {
		t.Errorf("settled: %+v, want the unfinished intent and the key in flight", s)
	}

	fine := []*intent{charged(1, 1001, endDone, "co_a")}
	fine[0].record(answer{Status: 201, Body: []byte(`{"id":"ch_co_a"}`)})
	fine[0].record(answer{Status: 201, Replayed: true, Body: []byte(`{"id":"ch_co_a"}`)})
	fx := indexLedger(providersim.Ledger{References: map[string]providersim.LedgerEntry{"co_a": entry(1001)}})
	for _, c := range []check{checkOnce(fine, fx), checkTrue(fine, fx), checkReplays(fine), checkNo500(fine), checkSettled(fine, nil)} {
		if c.Failed != 0 || c.Checked == 0 {
			t.Errorf("%s on a run that kept the contract: %+v", c.Name, c)
		}
	}
}

func TestMovesAreCheckedAgainstTheAuthorization(t *testing.T) {
	t.Parallel()
	auth := &intent{Kind: kindAuthorize, N: 1, Amount: 2000, End: endDone, charge: client.Charge{ID: "ch_1", ProviderReference: "co_1"}}
	capture := &intent{Kind: kindCapture, N: 2, Amount: 1000, End: endDone, parent: auth, charge: client.Charge{Status: client.StatusSucceeded, Amount: 1000}}
	x := indexLedger(providersim.Ledger{References: map[string]providersim.LedgerEntry{
		"co_1": {Charges: 1, Status: provider.StatusAuthorized, Amount: 2000, Authorized: 2000, Captures: 1, Captured: 1000},
	}})
	if c := checkTrue([]*intent{auth, capture}, x); c.Failed != 0 {
		t.Fatalf("a capture as the ledger has it: %+v", c)
	}
	capture.charge.Amount = 2000
	if c := checkTrue([]*intent{capture}, x); c.Failed != 1 {
		t.Fatalf("a capture answered with another amount: %+v", c)
	}
	cancel := &intent{Kind: kindCancel, N: 3, End: endRefused, parent: auth}
	if c := checkTrue([]*intent{cancel}, x); c.Failed != 0 {
		t.Fatalf("a cancel refused of a captured authorization: %+v", c)
	}
}
