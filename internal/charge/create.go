package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// intent is what a record keeps of the request, for the reconciler. The card
// source is kept only for a Replayer, which needs it to replay the request
// and has checked it is a reference, not card data.
type intent struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description,omitempty"`
	Source      string `json:"source,omitempty"`
	// AuthorizeOnly: the charge is to be captured later.
	AuthorizeOnly bool `json:"authorize_only,omitempty"`
}

// Create charges req once for the intent key names: a key of Operation,
// the client's CommandID within its tenant. fp is the fingerprint of the
// request as the client sent it; a later request with the same key and
// another fingerprint is refused.
func (s *Service) Create(ctx context.Context, key idem.Key, req Request, fp idem.Fingerprint) (Result, error) {
	if key.Operation() != Operation {
		return Result{}, fmt.Errorf("charge: create under a key of operation %q", key.Operation())
	}
	a := s.admit(ctx, key.Tenant())
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	kept := intent{Amount: req.Money.Amount, Currency: req.Money.Currency, Description: req.Description, AuthorizeOnly: req.AuthorizeOnly}
	if rp, ok := s.cfg.Provider.(Replayer); ok {
		if err := rp.CheckSource(req.Source); err != nil {
			s.cfg.Logger.ErrorContext(ctx, "provider rejected the charge request", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
			return Result{Outcome: OutcomeRejected}, nil
		}
		kept.Source = req.Source
	}
	if err := s.prepare(ctx); err != nil {
		return Result{}, err
	}
	in, _ := json.Marshal(kept)
	var (
		answer  *provider.Result // the provider's answer, if the outcome's writes fail
		refused Outcome          // why the provider did not act
	)
	res, err := idem.Do(ctx, s.backend, key, fp, in, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		if !s.deduplicated(l) {
			out, pres, err := s.lookupStale(ctx, l, kept)
			answer = pres
			return out, err
		}
		pres, err := s.charge(ctx, chargeRequest(key, l.CreatedAt, kept, req.Source))
		switch {
		case errors.Is(err, provider.ErrRejected):
			refused = OutcomeRejected
			s.cfg.Logger.ErrorContext(ctx, "provider rejected the charge request", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
			return idem.NotApplied(idem.Response{}), nil
		case errors.Is(err, provider.ErrUnavailable):
			refused = OutcomeUnavailable
			return idem.NotApplied(idem.Response{}), nil
		case err != nil:
			return idem.Unknown(idem.Response{}), err
		}
		answer = &pres
		return s.verdict(l, kept, pres)
	}, func(o *idem.DoOptions) {
		o.Wait, o.Reserve = s.cfg.InflightWait, s.recordReserve()
	})
	return s.answer(ctx, key, charges{s}, res, answer, refused, err)
}

// ask makes one provider call, timed into the invocation's metrics and
// traced as the span name. Every call the service makes goes through it.
func (s *Service) ask(ctx context.Context, name string, call func(context.Context) (provider.Result, error)) (provider.Result, error) {
	ctx, span := s.cfg.Tracer.Start(ctx, name)
	defer since(ctx, metrics.ProviderLatency, time.Now())
	res, err := call(ctx)
	return answered(span, res, err)
}

// charge calls the provider, traced as the span provider.Charge.
func (s *Service) charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	return s.ask(ctx, "provider.Charge", func(ctx context.Context) (provider.Result, error) { return s.cfg.Provider.Charge(ctx, req) })
}

// lookup asks the provider what became of the command lease holds,
// traced as the span provider.Lookup: by replaying its request (rebuilt
// from in) if rp is not nil, else by looking its reference up, which
// sends nothing.
func (s *Service) lookup(ctx context.Context, lease *idem.Lease, in intent, rp Replayer) (provider.Result, error) {
	return s.ask(ctx, "provider.Lookup", func(ctx context.Context) (provider.Result, error) {
		if rp == nil {
			return s.cfg.Provider.Lookup(ctx, ProviderReference(lease.Key, lease.CreatedAt))
		}
		return rp.LookupRequest(ctx, provider.LookupRequest{
			ChargeRequest: chargeRequest(lease.Key, lease.CreatedAt, in, in.Source),
			FirstSent:     lease.CreatedAt,
		})
	})
}

// chargeRequest is the provider request of the command key names, claimed
// at created. Create sends it and a replay sends it again, built here in
// one place: the provider replays a key only for the same parameters.
func chargeRequest(key idem.Key, created time.Time, in intent, source string) provider.ChargeRequest {
	return provider.ChargeRequest{
		Reference: ProviderReference(key, created), Amount: in.Amount, Currency: in.Currency, Source: source,
		Command: key.String(), Row: ChargeID(key, created), AuthorizeOnly: in.AuthorizeOnly,
	}
}

// replayer is the provider as a Replayer if the command lease holds is to
// be looked up by replaying it: the intent kept its source, and the
// provider still deduplicates its reference (counted from the record's
// creation, at or before the first send). Otherwise nil.
func (s *Service) replayer(lease *idem.Lease, in intent) Replayer {
	if rp, ok := s.cfg.Provider.(Replayer); ok && in.Source != "" && s.deduplicated(lease) {
		return rp
	}
	return nil
}

// lookupStale settles, without sending anything, a command re-claimed
// after the provider stopped deduplicating its reference: a request sent
// now would be a new charge if the first one landed. The provider is asked
// by reference; a charge or decline settles the command, anything else
// leaves it IN_FLIGHT for the reconciler, which parks it.
func (s *Service) lookupStale(ctx context.Context, lease *idem.Lease, in intent) (idem.Outcome, *provider.Result, error) {
	s.cfg.Logger.WarnContext(ctx, "charge: reference past the provider's dedup window; looked up, not sent",
		"key_hash", lease.Key.LogHash(), "created_at", lease.CreatedAt)
	res, err := s.lookup(ctx, lease, in, nil)
	switch {
	case err != nil:
		return idem.Unknown(idem.Response{}), nil, err
	case res.Status == provider.StatusNotFound:
		return idem.Unknown(idem.Response{}), nil, nil
	}
	out, err := s.verdict(lease, in, res)
	return out, &res, err
}

// verdict is what the provider's answer means for the charge command
// the lease holds, whose intent is in: a charge to commit together with its
// row, or a decline to store. The handler and the reconciler both decide
// here.
func (s *Service) verdict(lease *idem.Lease, in intent, res provider.Result) (idem.Outcome, error) {
	switch res.Status {
	case provider.StatusCharged, provider.StatusAuthorized, provider.StatusCanceled:
		c := s.charged(lease, in, res)
		return idem.Succeeded(s.cfg.Answers.Created(c), s.cfg.Rows.Insert(c)), nil
	case provider.StatusDeclined:
		return idem.Failed(s.cfg.Answers.Declined(res.DeclineCode)), nil
	default:
		return idem.Outcome{}, fmt.Errorf("charge: unexpected provider status %q", res.Status)
	}
}

// charged is the charge the command lease holds made, as the provider
// answered res: authorized to capture later, or charged.
func (s *Service) charged(lease *idem.Lease, in intent, res provider.Result) Charge {
	c := Charge{
		ID: ChargeID(lease.Key, lease.CreatedAt), Tenant: lease.Key.Tenant(),
		Money:       Money{Amount: in.Amount, Currency: in.Currency},
		Description: in.Description, ProviderReference: ProviderReference(lease.Key, lease.CreatedAt),
		ProviderChargeID: res.ChargeID, IdempotencyKey: CommandID(lease.Key.ClientKey()),
		CreatedAt: lease.CreatedAt, Status: StatusSucceeded,
	}
	if in.AuthorizeOnly {
		c.AmountAuthorized = in.Amount
		c.Status = StatusRequiresCapture
		switch {
		case res.Status == provider.StatusCharged && res.Amount > 0:
			// Captured already, at the provider itself.
			c.Status, c.Money.Amount = StatusSucceeded, res.Amount
		case res.Status == provider.StatusCanceled:
			// Authorized, then ended before it was recorded (expired).
			c.Status = StatusCanceled
		}
	}
	return c
}

// storedIntent reads the intent Begin stored with the command.
func storedIntent[T any](lease *idem.Lease) (T, error) {
	var in T
	if err := json.Unmarshal(lease.Intent, &in); err != nil {
		return in, fmt.Errorf("charge: stored intent: %w", err)
	}
	return in, nil
}

// rowExists settles a command whose charge row is already there. Rows are
// named by the command's key and CreatedAt, so that is this command's own
// charge, recorded by an earlier attempt: if it names the provider's
// charge, the command succeeds with the row's answer. Anything else is a
// conflict no retry can mend: it is stored as a permanent 500 and logged
// for an operator, never left IN_FLIGHT to cycle through the reconciler.
func (s *Service) rowExists(ctx context.Context, lease *idem.Lease, c Charge) (Outcome, idem.Response, error) {
	row, found, err := s.cfg.Rows.Get(ctx, c.Tenant, c.ID)
	if err != nil {
		return "", idem.Response{}, err
	}
	if found && row.ProviderChargeID == c.ProviderChargeID && row.ProviderReference == c.ProviderReference {
		resp := s.cfg.Answers.Created(row)
		if err := s.backend.Commit(ctx, lease, resp); err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeCreated, resp, nil
	}
	s.cfg.Logger.ErrorContext(ctx, "charge row conflicts with the provider's answer; stored as a permanent error",
		"key_hash", lease.Key.LogHash(), "charge_id", c.ID)
	resp := s.cfg.Answers.Conflicting()
	if err := s.backend.Fail(ctx, lease, resp); err != nil {
		return "", idem.Response{}, err
	}
	return OutcomeChargeConflict, resp, nil
}

// Get returns tenant's charge id with its oldest refunds, read strongly
// consistently so a charge just answered 201 is found. Another tenant's
// charge is not found.
func (s *Service) Get(ctx context.Context, tenant, id string) (Result, error) {
	if !IsChargeID(id) {
		return Result{Outcome: OutcomeNotFound}, nil
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
		return a.missing(res, s.cfg.Clock()), err
	}
	first, _ := Page{Limit: EmbeddedRefunds}.of(c.Refunds)
	c.Refunds, c.MoreRefunds = first.Refunds, first.HasMore
	return Result{Outcome: OutcomeFound, Charge: &c}, nil
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

// charges is the operation of creating a charge, as the shared paths see
// it.
type charges struct{ *Service }

func (charges) reference(key idem.Key, created time.Time) string {
	return ProviderReference(key, created)
}

// lookup replays the request while the provider deduplicates it (a
// Replayer), else looks its reference up.
func (c charges) lookup(ctx context.Context, lease *idem.Lease) (provider.Result, error) {
	in, err := storedIntent[intent](lease)
	if err != nil {
		return provider.Result{}, err
	}
	rp := c.replayer(lease, in)
	if rp != nil {
		// A replay is a send: the heartbeat moves the attempt deadline,
		// from which a later "not found" waits out the settle window.
		switch err := c.cfg.Store.Heartbeat(ctx, lease); {
		case errors.Is(err, idem.ErrLeaseLost):
			return provider.Result{}, errStillLeased
		case err != nil:
			return provider.Result{}, fmt.Errorf("%w: %w", errStore, err)
		}
	}
	return c.Service.lookup(ctx, lease, in, rp)
}

func (c charges) verdict(_ context.Context, lease *idem.Lease, res provider.Result) (idem.Outcome, error) {
	in, err := storedIntent[intent](lease)
	if err != nil {
		return idem.Outcome{}, err
	}
	return c.Service.verdict(lease, in, res)
}

func (charges) done() (provider.Status, Outcome) { return provider.StatusCharged, OutcomeResolved }

func (charges) row(rec *idem.Record) (string, error) { return ChargeID(rec.Key, rec.CreatedAt), nil }

// notified settles, as the provider's word n says, a charge made but not
// settled: an authorization whose capture or cancel is in flight, or one
// the provider itself captured or canceled (an authorization that
// expired). A charge in its final state is left as it is.
func (c charges) notified(ctx context.Context, n Notification, row string) (Outcome, bool, error) {
	if !IsChargeID(row) {
		return "", false, nil
	}
	ch, found, err := c.cfg.Rows.Get(ctx, n.Command.Tenant(), row)
	switch {
	case err != nil || !found || ch.ProviderReference != n.Reference:
		return "", false, err
	case ch.Status == StatusSucceeded || ch.Status == StatusCanceled:
		return OutcomeNothingToDo, true, nil
	}
	switch n.Result.Status {
	case provider.StatusCharged:
		_, err = c.applyState(ctx, ch, n.Result)
		return OutcomeResolvedCaptured, true, err
	case provider.StatusCanceled:
		_, err = c.applyState(ctx, ch, n.Result)
		return OutcomeResolvedCanceled, true, err
	}
	return OutcomeNothingToDo, true, nil
}

// undo has nothing to take back: a charge writes only when it settles.
func (charges) undo(context.Context, *idem.Lease) error { return nil }

func (c charges) rewrite(ctx context.Context, lease *idem.Lease, res provider.Result) (Outcome, idem.Response, error) {
	in, err := storedIntent[intent](lease)
	if err != nil {
		return "", idem.Response{}, err
	}
	return c.rowExists(ctx, lease, c.charged(lease, in, res))
}
