package charge

import (
	"context"
	"fmt"
	"slices"
	"strconv"
)

// A charge's refunds are read a page at a time, oldest first, so no
// answer grows with them. A charge embeds its first page; ListRefunds
// reads any other.
const (
	// EmbeddedRefunds is how many refunds a charge's answer embeds.
	EmbeddedRefunds = 10
	// DefaultRefundsLimit and MaxRefundsLimit bound a page of ListRefunds.
	DefaultRefundsLimit = 10
	MaxRefundsLimit     = 100
	// DefaultMaxRefunds is how many refunds a charge may have, settled or
	// in flight. It keeps a charge's read bounded, and its row, which
	// holds a hold per refund in flight, far below DynamoDB's 400 KB.
	DefaultMaxRefunds = 1000
)

// Page asks for a page of a charge's refunds: at most Limit, after the
// refund StartingAfter names, or from the oldest when it is empty.
type Page struct {
	Limit         int
	StartingAfter string
}

// ParsePage validates a list's query parameters: limit, from 1 to
// MaxRefundsLimit (DefaultRefundsLimit when absent), and starting_after,
// a refund's id. A parameter present but empty is refused.
func ParsePage(query map[string]string) (Page, error) {
	p := Page{Limit: DefaultRefundsLimit}
	if v, ok := query["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxRefundsLimit || strconv.Itoa(n) != v {
			return Page{}, &InvalidError{"limit", fmt.Sprintf("must be a whole number from 1 to %d", MaxRefundsLimit)}
		}
		p.Limit = n
	}
	if v, ok := query["starting_after"]; ok {
		if !IsRefundID(v) {
			return Page{}, &InvalidError{"starting_after", "must be the id of a refund of this charge"}
		}
		p.StartingAfter = v
	}
	return p, nil
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

// ListRefunds returns the page p of tenant's charge chargeID's refunds.
// Another tenant's charge is not found. A p.StartingAfter that names no
// refund of the charge is an *InvalidError: it names no place in the list.
func (s *Service) ListRefunds(ctx context.Context, tenant, chargeID string, p Page) (Result, error) {
	if !IsChargeID(chargeID) {
		return Result{Outcome: OutcomeNotFound}, nil
	}
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	c, found, err := s.cfg.Rows.GetWithRefunds(a.ctx, tenant, chargeID)
	if res, done, err := unread(found, err); done {
		return a.missing(res, s.cfg.Clock()), err
	}
	list, ok := p.of(c.Refunds)
	if !ok {
		return Result{}, &InvalidError{"starting_after", "names no refund of this charge"}
	}
	return Result{Outcome: OutcomeFound, Refunds: &list}, nil
}
