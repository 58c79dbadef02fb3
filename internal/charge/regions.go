package charge

import (
	"context"
	"errors"
	"time"

	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Fence says which Region serves each tenant, for a deployment in several
// Regions (docs/regions.md). A Service without one serves every tenant, as
// in one Region, and makes no call for it.
type Fence interface {
	Serving(ctx context.Context, tenant string) (Serving, error)
}

// Serving is this Region's standing for one tenant (regions.Serving).
type Serving = regions.Serving

// admitted is a request this Region may act on, or the answer it gets
// instead (refused).
type admitted struct {
	Serving
	ctx     context.Context
	cancel  context.CancelFunc
	refused *Result
}

// admit checks that this Region serves tenant now. The admitted context
// ends with the Fence's lease, so no call outlives it.
func (s *Service) admit(ctx context.Context, tenant string) admitted {
	if s.cfg.Fence == nil {
		return admitted{Serving: Serving{Here: true}, ctx: ctx, cancel: func() {}}
	}
	sv, err := s.cfg.Fence.Serving(ctx, tenant)
	now := s.cfg.Store.Now()
	switch {
	case err != nil:
		// Nothing was done: the store of homes could not be read.
		s.cfg.Logger.WarnContext(ctx, "charge: the Region's fence could not be read", "error_class", ErrorClass(err))
		return admitted{refused: &Result{Outcome: OutcomeBusy}}
	case sv.Here:
		c, cancel := context.WithDeadline(ctx, time.Now().Add(sv.Until.Sub(now)))
		return admitted{Serving: sv, ctx: c, cancel: cancel}
	case sv.Since.After(now):
		return admitted{refused: &Result{Outcome: OutcomeFailoverPending, RetryAt: sv.Since}}
	}
	return admitted{refused: &Result{Outcome: OutcomeWrongRegion, Region: sv.Region}}
}

// Serves reports whether this Region serves tenant now. If not, the
// Result answers the request: nothing was done. The charge function asks
// before it counts the tenant's limits.
func (s *Service) Serves(ctx context.Context, tenant string) (Result, bool) {
	a := s.admit(ctx, tenant)
	if a.refused != nil {
		return *a.refused, false
	}
	a.cancel()
	return Result{}, true
}

// MaySettle reports whether this Region may settle the command key
// created at created now. It must serve the tenant, and no Region pending
// a drain may hold newer writes of the command. If not, the Result says
// why: nothing was done. An operator asks before settling a command.
func (s *Service) MaySettle(ctx context.Context, key idem.Key, created time.Time) (Result, bool) {
	a, refused := s.admitCommand(ctx, key, created)
	if refused != nil {
		return *refused, false
	}
	a.cancel()
	return Result{}, true
}

// admitCommand is admit for the command key created at created. It
// refuses a command another Region may have changed since.
func (s *Service) admitCommand(ctx context.Context, key idem.Key, created time.Time) (admitted, *Result) {
	a := s.admit(ctx, key.Tenant())
	if a.refused != nil {
		return a, a.refused
	}
	if res := a.unreplicated(created, s.cfg.Store.Now()); res != nil {
		a.cancel()
		return a, res
	}
	return a, nil
}

// unreplicated answers a request about a charge or refund created at
// created, which another Region may have changed since. Its copy here
// may be stale: nothing is done, and nothing read, until its writes
// replicate.
func (a admitted) unreplicated(created, now time.Time) *Result {
	if a.Unreplicated.IsZero() || !created.Before(a.Unreplicated) {
		return nil
	}
	return &Result{Outcome: OutcomeFailoverPending, RetryAt: now.Add(failoverRetry)}
}

// missing answers a read that found nothing during a failover. Another
// Region may hold the charge unreplicated, so "not found" may be false.
func (a admitted) missing(res Result, now time.Time) Result {
	if res.Outcome == OutcomeNotFound && !a.Unreplicated.IsZero() {
		return Result{Outcome: OutcomeFailoverPending, RetryAt: now.Add(failoverRetry)}
	}
	return res
}

// failoverRetry is when a request refused during a failover may try again.
const failoverRetry = time.Minute

// claimedElsewhere answers a command another Region claimed, whose
// outcome there is not known here: nothing was written.
func (s *Service) claimedElsewhere(ctx context.Context, key idem.Key, err error) (Result, bool) {
	if !errors.Is(err, idem.ErrClaimedElsewhere) {
		return Result{}, false
	}
	s.cfg.Logger.WarnContext(ctx, "charge: the command was claimed in another Region; awaiting its replication", "key_hash", key.LogHash())
	return Result{Outcome: OutcomeFailoverPending, RetryAt: s.cfg.Store.Now().Add(failoverRetry)}, true
}
