package stripesim

// LedgerEntry is what became of the PaymentIntents created under one
// idempotency key.
type LedgerEntry struct {
	// Succeeded counts the succeeded PaymentIntents: more than one means
	// a charge was duplicated.
	Succeeded int
	// Declined counts the PaymentIntents declined with a card error.
	Declined int
	// Amount is the last PaymentIntent's.
	Amount int64
	// Pending: a pm_sim_late request under the key has not landed yet.
	Pending bool
	// Refunded sums the refunds, failed ones left out, of the
	// PaymentIntents created under the key.
	Refunded int64
}

// Ledger returns, by idempotency key, what became of the PaymentIntents
// created under each key so far.
func (s *Simulator) Ledger() map[string]LedgerEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := map[string]LedgerEntry{}
	for _, pi := range s.order {
		e := l[pi.idempotencyKey]
		switch {
		case pi.Status == "succeeded":
			e.Succeeded++
		case pi.LastPaymentError != nil:
			e.Declined++
		}
		e.Amount = pi.Amount
		e.Refunded += s.refundedOf(pi.ID)
		l[pi.idempotencyKey] = e
	}
	for _, p := range s.pending {
		e := l[p.key]
		e.Pending = true
		l[p.key] = e
	}
	return l
}
