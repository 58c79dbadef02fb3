package charge

import (
	"context"
	"slices"
)

// Get returns tenant's charge id with its oldest refunds, read strongly
// consistently so a charge just answered 201 is found. Another tenant's
// charge is not found.
func (s *Service) Get(ctx context.Context, tenant, id string) (Result, error) {
	if !IsChargeID(id) {
		return Result{Outcome: OutcomeNotFound, Idle: true}, nil
	}
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	c, found, err := s.cfg.Rows.GetWithRefunds(ctx, tenant, id)
	if res, done, err := unread(found, err); done {
		return a.missing(res, s.cfg.Store.Now()), err
	}
	if res := a.unreplicated(c.CreatedAt, s.cfg.Store.Now()); res != nil {
		return *res, nil
	}
	first, _ := Page{Limit: EmbeddedRefunds}.of(c.Refunds)
	c.Refunds, c.MoreRefunds = first.Refunds, first.HasMore
	return Result{Outcome: OutcomeFound, Charge: &c}, nil
}

// GetRefund returns tenant's refund refundID of the charge chargeID.
func (s *Service) GetRefund(ctx context.Context, tenant, chargeID, refundID string) (Result, error) {
	if !IsChargeID(chargeID) || !IsRefundID(refundID) {
		return Result{Outcome: OutcomeNotFound, Idle: true}, nil
	}
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	rf, found, err := s.cfg.Rows.GetRefund(ctx, tenant, chargeID, refundID)
	if res, done, err := unread(found, err); done {
		return a.missing(res, s.cfg.Store.Now()), err
	}
	if res := a.unreplicated(rf.CreatedAt, s.cfg.Store.Now()); res != nil {
		return *res, nil
	}
	return Result{Outcome: OutcomeFound, Refund: &rf}, nil
}

// ListRefunds returns the page p of tenant's charge chargeID's refunds.
// Another tenant's charge is not found. A p.StartingAfter that names no
// refund of the charge is an *InvalidError: it names no place in the list.
func (s *Service) ListRefunds(ctx context.Context, tenant, chargeID string, p Page) (Result, error) {
	if !IsChargeID(chargeID) {
		return Result{Outcome: OutcomeNotFound, Idle: true}, nil
	}
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	c, found, err := s.cfg.Rows.GetWithRefunds(a.ctx, tenant, chargeID)
	if res, done, err := unread(found, err); done {
		return a.missing(res, s.cfg.Store.Now()), err
	}
	if res := a.unreplicated(c.CreatedAt, s.cfg.Store.Now()); res != nil {
		return *res, nil
	}
	list, ok := p.of(c.Refunds)
	if !ok {
		return Result{}, &InvalidError{"starting_after", "names no refund of this charge"}
	}
	return Result{Outcome: OutcomeFound, Refunds: &list}, nil
}

// unread answers a read of the charges table that gives nothing to act
// on: the store busy, a failure, or nothing found. done is false when the
// read found its row.
func unread(found bool, err error) (res Result, done bool, _ error) {
	switch {
	case transient(err):
		return Result{Outcome: OutcomeBusy}, true, nil
	case err != nil:
		return Result{}, true, err
	case !found:
		return Result{Outcome: OutcomeNotFound}, true, nil
	}
	return Result{}, false, nil
}

// A charge's refunds are read a page at a time, oldest first, so no
// answer grows with them. A charge embeds its first page; ListRefunds
// reads any other.
const (
	// EmbeddedRefunds is how many refunds a charge's answer embeds.
	EmbeddedRefunds = 10
	// DefaultRefundsLimit and MaxRefundsLimit bound a page of ListRefunds.
	DefaultRefundsLimit = 10
	MaxRefundsLimit     = 100
)

// Page asks for a page of a charge's refunds: at most Limit, after the
// refund StartingAfter names, or from the oldest when it is empty.
type Page struct {
	Limit         int
	StartingAfter string
}

// RefundList is a page of a charge's refunds, oldest first. HasMore says
// that more follow its last.
type RefundList struct {
	Refunds []Refund
	HasMore bool
}

// of is the page of refunds, oldest first, that p asks for; false if
// p.StartingAfter is none of them.
func (p Page) of(refunds []Refund) (RefundList, bool) {
	start := 0
	if p.StartingAfter != "" {
		i := slices.IndexFunc(refunds, func(r Refund) bool { return r.ID == p.StartingAfter })
		if i < 0 {
			return RefundList{}, false
		}
		start = i + 1
	}
	end := min(start+p.Limit, len(refunds))
	return RefundList{Refunds: refunds[start:end], HasMore: end < len(refunds)}, true
}
