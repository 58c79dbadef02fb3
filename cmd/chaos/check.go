package main

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/pkg/client"
)

// check is one property checked of every intent it applies to.
type check struct {
	Name    string `json:"name"`
	Checked int    `json:"checked"`
	Failed  int    `json:"failed"`
	// Examples are the first failures.
	Examples []string `json:"examples,omitempty"`
}

func (c *check) fail(format string, args ...any) {
	c.Failed++
	if len(c.Examples) < 5 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// ledger is the provider's ledger, indexed as the checks read it.
type ledger struct {
	// charges are the references charged or authorized, by amount: each
	// charge intent's amount is its own.
	charges map[int64][]string
	entries map[string]providersim.LedgerEntry
	// refunds counts the refunds made, by the charge's reference and the
	// refund's amount. A refund intent's amount is its own among its
	// charge's.
	refunds map[refundOf]int
}

type refundOf struct {
	charge string
	amount int64
}

func indexLedger(l providersim.Ledger) ledger {
	x := ledger{charges: map[int64][]string{}, entries: l.References, refunds: map[refundOf]int{}}
	for ref, e := range l.References {
		if e.Charges == 1 && e.Status != provider.StatusDeclined {
			x.charges[e.Amount] = append(x.charges[e.Amount], ref)
		}
	}
	for _, r := range l.Refunds {
		x.refunds[refundOf{r.Charge, r.Amount}] += r.Refunds
	}
	return x
}

// effects is how many times the ledger shows in done: a charge or a
// refund made, a capture or a cancel applied.
func (x ledger) effects(in *intent) int {
	switch in.Kind {
	case kindCharge, kindAuthorize:
		return len(x.charges[in.Amount])
	case kindRefund:
		return x.refunds[refundOf{in.parent.charge.ProviderReference, in.Amount}]
	case kindCapture:
		return x.entries[in.parent.charge.ProviderReference].Captures
	case kindCancel:
		if e := x.entries[in.parent.charge.ProviderReference]; e.Canceled && e.Captures == 0 {
			return 1
		}
	}
	return 0
}

// checkOnce: no intent has more than one effect, and no effect belongs
// to no intent.
func checkOnce(intents []*intent, x ledger) check {
	c := check{Name: "at most one effect per intent"}
	charges := map[int64]bool{}
	refunds := map[refundOf]bool{}
	for _, in := range intents {
		c.Checked++
		if n := x.effects(in); n > 1 {
			c.fail("%s %d (%s): %d effects", in.Kind, in.N, in.ID, n)
		}
		switch in.Kind {
		case kindCharge, kindAuthorize:
			charges[in.Amount] = true
		case kindRefund:
			refunds[refundOf{in.parent.charge.ProviderReference, in.Amount}] = true
		}
	}
	for amount, refs := range x.charges {
		if !charges[amount] {
			c.fail("the ledger charged %v (amount %d), which no intent asked for", refs, amount)
		}
	}
	for r, n := range x.refunds {
		if n > 0 && !refunds[r] {
			c.fail("the ledger refunded %d of %s, which no intent asked for", r.amount, r.charge)
		}
	}
	return c
}

// checkTrue: an intent answered done was done, as its answer says. One
// that ended told that nothing was done has no effect: a final refusal,
// or every answer of a client that gave up.
func checkTrue(intents []*intent, x ledger) check {
	c := check{Name: "every answer true"}
	for _, in := range intents {
		n := x.effects(in)
		switch in.End {
		case endDone:
			c.Checked++
			if msg := doneAsAnswered(in, x); n != 1 || msg != "" {
				c.fail("%s %d (%s) answered done: %d effects in the ledger %s", in.Kind, in.N, in.ID, n, msg)
			}
		case endRefused, endAbandoned:
			c.Checked++
			if n != 0 {
				c.fail("%s %d (%s) %s (%s) yet the ledger shows %d effects", in.Kind, in.N, in.ID, in.End, in.Err, n)
			}
		}
	}
	return c
}

// doneAsAnswered is what in's done answer says that the ledger does not,
// or "".
func doneAsAnswered(in *intent, x ledger) string {
	switch in.Kind {
	case kindCharge, kindAuthorize:
		if refs := x.charges[in.Amount]; len(refs) != 1 || refs[0] != in.charge.ProviderReference {
			return fmt.Sprintf("under %v, answered %s", refs, in.charge.ProviderReference)
		}
	case kindCapture:
		e := x.entries[in.parent.charge.ProviderReference]
		want := in.Amount
		if want == 0 {
			want = e.Authorized
		}
		if e.Captured != want || in.charge.Status != client.StatusSucceeded || in.charge.Amount != want {
			return fmt.Sprintf("captured %d of %d asked, answered %s %d", e.Captured, want, in.charge.Status, in.charge.Amount)
		}
	case kindCancel:
		if in.charge.Status != client.StatusCanceled {
			return fmt.Sprintf("answered %s", in.charge.Status)
		}
	}
	return ""
}

// checkReplays: every stored answer of a command, its first and each
// replay, is the same status and the same bytes.
func checkReplays(intents []*intent) check {
	c := check{Name: "replays identical"}
	for _, in := range intents {
		var first *answer
		for _, a := range in.recorded() {
			if !a.stored() {
				continue
			}
			if first == nil {
				first = &a
				continue
			}
			c.Checked++
			if a.Status != first.Status || !bytes.Equal(a.Body, first.Body) || !a.Replayed {
				c.fail("%s %d (%s): %d %s (replayed %t) after %d %s", in.Kind, in.N, in.ID, a.Status, a.Body, a.Replayed, first.Status, first.Body)
			}
		}
	}
	return c
}

// checkRepeats: a capture or a cancel made again once everything settled
// answers as it did, byte for byte.
func checkRepeats(intents []*intent) check {
	c := check{Name: "captures and cancels repeated identical"}
	for _, in := range intents {
		if in.repeat.At.IsZero() {
			continue
		}
		c.Checked++
		if in.repeat.Status != in.final.Status || !bytes.Equal(in.repeat.Body, in.final.Body) {
			c.fail("%s %d: %d %s, first %d %s", in.Kind, in.N, in.repeat.Status, in.repeat.Body, in.final.Status, in.final.Body)
		}
	}
	return c
}

// checkNo500: no answer is a 500, the service's internal-error or
// charge-conflict, or the gateway's own for a function that died.
func checkNo500(intents []*intent) check {
	c := check{Name: "no 500"}
	for _, in := range intents {
		for _, a := range in.recorded() {
			c.Checked++
			if a.Status == http.StatusInternalServerError {
				c.fail("%s %d (%s) at %s: 500 %s", in.Kind, in.N, in.ID, a.At.Format("15:04:05.000"), a.Body)
			}
		}
	}
	return c
}

// checkCharges: every charge the clients were answered reads as the
// ledger has it. Its status, its amount and its refunds are checked. got
// are the charges as GET /charges/{id} read them, by intent.
func checkCharges(got map[*intent]client.Charge, x ledger) check {
	c := check{Name: "charges as the ledger has them"}
	for in, ch := range got {
		c.Checked++
		e := x.entries[in.charge.ProviderReference]
		status, amount := client.StatusSucceeded, e.Amount
		switch {
		case in.Kind == kindCharge:
		case e.Captures > 0:
			amount = e.Captured
		case e.Canceled:
			status, amount = client.StatusCanceled, e.Authorized
		default:
			status = client.StatusRequiresCapture
		}
		if ch.Status != status || ch.Amount != amount || ch.AmountRefunded != e.Refunded {
			c.fail("%s %d (%s): %s %d, %d refunded; the ledger: %s %d, %d refunded", in.Kind, in.N, ch.ID, ch.Status, ch.Amount, ch.AmountRefunded, status, amount, e.Refunded)
		}
	}
	return c
}

// checkSettled: every intent ended, and no command or move is left in
// flight.
func checkSettled(intents []*intent, inFlight []string) check {
	c := check{Name: "nothing left in flight"}
	for _, in := range intents {
		c.Checked++
		if in.End == endUnfinished || in.End == "" {
			c.fail("%s %d (%s) has no final answer: %s", in.Kind, in.N, in.ID, in.Err)
		}
	}
	for _, k := range inFlight {
		c.Checked++
		c.fail("%s is still in flight", k)
	}
	return c
}
