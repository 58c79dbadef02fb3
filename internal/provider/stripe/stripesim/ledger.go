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
	// Authorized sums what the PaymentIntents with capture_method manual
	// held when authorized.
	Authorized int64
	// Captures counts the captures performed: more than one for a
	// PaymentIntent means it was captured twice. Captured sums what they
	// took.
	Captures int
	Captured int64
	// Canceled counts the canceled PaymentIntents, expired ones included.
	Canceled int
}

// add adds pi to e. The caller holds the lock.
func (s *Simulator) add(e *LedgerEntry, pi *intent) {
	switch {
	case pi.Status == "succeeded":
		e.Succeeded++
	case pi.LastPaymentError != nil:
		e.Declined++
	case pi.Status == "canceled":
		e.Canceled++
	}
	e.Amount = pi.Amount
	e.Refunded += s.refundedOf(pi.ID)
	if pi.CaptureMethod == "manual" && pi.LastPaymentError == nil {
		e.Authorized += pi.Amount
	}
	e.Captures += pi.captures
	if pi.captures > 0 {
		e.Captured += pi.AmountReceived
	}
}

// Intent returns what became of the PaymentIntent id, as a ledger entry
// of its own, and whether it exists.
func (s *Simulator) Intent(id string) (LedgerEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.opts.Clock())
	pi := s.intents[id]
	if pi == nil {
		return LedgerEntry{}, false
	}
	var e LedgerEntry
	s.add(&e, pi)
	return e, true
}

// Ledger returns, by idempotency key, what became of the PaymentIntents
// created under each key so far.
func (s *Simulator) Ledger() map[string]LedgerEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.opts.Clock())
	l := map[string]LedgerEntry{}
	for _, pi := range s.order {
		e := l[pi.idempotencyKey]
		s.add(&e, pi)
		l[pi.idempotencyKey] = e
	}
	for _, p := range s.pending {
		e := l[p.key]
		e.Pending = true
		l[p.key] = e
	}
	return l
}
