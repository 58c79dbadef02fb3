package charge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chargeonce/chargeonce/internal/actor"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Create charges req once for the intent key names. key is of
// ChargeOperation: the client's CommandID within its tenant. fp is the
// fingerprint of the request as the client sent it. A later request under
// the key with another fingerprint is refused.
func (s *Service) Create(ctx context.Context, key idem.Key, req Request, fp idem.Fingerprint) (Result, error) {
	if key.Operation() != ChargeOperation {
		return Result{}, fmt.Errorf("charge: create under a key of operation %q", key.Operation())
	}
	a := s.admit(ctx, key.Tenant())
	if a.refused != nil {
		return *a.refused, nil
	}
	defer a.cancel()
	ctx, cancel := answering(a.ctx)
	defer cancel()
	kept := intent{Amount: req.Money.Amount, Currency: req.Money.Currency, Description: req.Description, AuthorizeOnly: req.AuthorizeOnly, By: claimant(ctx)}
	if rp, ok := s.cfg.Provider.(Replayer); ok {
		if err := rp.CheckSource(req.Source); err != nil {
			s.cfg.Logger.ErrorContext(ctx, "provider rejected the charge request", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
			return Result{Outcome: OutcomeRejected, Idle: true}, nil
		}
		kept.Source = req.Source
	}
	if err := s.prepare(ctx); err != nil {
		return Result{}, err
	}
	return s.run(ctx, key, fp, kept, steps{op: charges{s}, noun: "charge",
		send: func(ctx context.Context, l *idem.Lease) (provider.Result, error) {
			return s.charge(ctx, chargeRequest(l, kept, req.Source))
		},
	})
}

// intent is what a record keeps of the request, for the reconciler. The
// card source is kept only for a Replayer. It needs the source to replay
// the request, and has checked it is a reference, not card data.
type intent struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description,omitempty"`
	Source      string `json:"source,omitempty"`
	// AuthorizeOnly: the charge is to be captured later.
	AuthorizeOnly bool `json:"authorize_only,omitempty"`
	// By is who asked, for the audit trail (actor.go).
	By *actor.Actor `json:"by,omitempty"`
}

// charges is the operation of creating a charge, as the shared paths see
// it.
type charges struct{ *Service }

func (charges) reference(key idem.Key, created time.Time) string {
	return ProviderReference(key, created)
}

// lookup replays the request while the provider deduplicates it (a
// Replayer). Otherwise it looks the reference up, which sends nothing.
func (c charges) lookup(ctx context.Context, lease *idem.Lease) (provider.Result, error) {
	in, err := storedIntent[intent](lease.Intent)
	if err != nil {
		return provider.Result{}, err
	}
	rp := c.replayer(lease, in)
	if rp != nil {
		// A replay is a send. The heartbeat moves the attempt deadline,
		// from which a later "not found" waits out the settle window.
		switch err := c.cfg.Store.Heartbeat(ctx, lease); {
		case errors.Is(err, idem.ErrLeaseLost):
			return provider.Result{}, errStillLeased
		case err != nil:
			return provider.Result{}, fmt.Errorf("%w: %w", errStore, err)
		}
	}
	return c.ask(ctx, "provider.Lookup", func(ctx context.Context) (provider.Result, error) {
		if rp == nil {
			return c.cfg.Provider.Lookup(ctx, ProviderReference(lease.Key, lease.CreatedAt))
		}
		return rp.LookupRequest(ctx, provider.LookupRequest{ChargeRequest: chargeRequest(lease, in, in.Source), FirstSent: lease.CreatedAt})
	})
}

// verdict is a charge to commit with its row, or a decline to store.
func (c charges) verdict(_ context.Context, lease *idem.Lease, res provider.Result) (idem.Outcome, error) {
	in, err := storedIntent[intent](lease.Intent)
	if err != nil {
		return idem.Outcome{}, err
	}
	switch res.Status {
	case provider.StatusCharged, provider.StatusAuthorized, provider.StatusCanceled:
		ch := c.made(lease, in, res)
		return idem.Succeeded(c.cfg.Answers.Created(ch), c.cfg.Rows.Insert(ch)), nil
	case provider.StatusDeclined:
		return idem.Failed(c.cfg.Answers.Declined(res.DeclineCode)), nil
	default:
		return idem.Outcome{}, fmt.Errorf("charge: unexpected provider status %q", res.Status)
	}
}

// undo has nothing to take back: a charge writes only when it settles.
func (charges) undo(context.Context, *idem.Lease) error { return nil }

// rewrite settles a charge whose row is already there. Rows are named by
// the command's key and CreatedAt. So the row is this command's own
// charge, recorded by an earlier attempt. If it names the provider's
// charge, the command succeeds with the row's answer. Anything else is a
// conflict no retry can mend. It is stored as a permanent 500 and logged
// for an operator. It is never left IN_FLIGHT to cycle through the
// reconciler.
func (c charges) rewrite(ctx context.Context, lease *idem.Lease, res provider.Result) (Outcome, idem.Response, error) {
	in, err := storedIntent[intent](lease.Intent)
	if err != nil {
		return "", idem.Response{}, err
	}
	ch := c.made(lease, in, res)
	row, found, err := c.cfg.Rows.Get(ctx, ch.Tenant, ch.ID)
	if err != nil {
		return "", idem.Response{}, err
	}
	if found && row.ProviderChargeID == ch.ProviderChargeID && row.ProviderReference == ch.ProviderReference {
		resp := c.cfg.Answers.Created(row)
		if err := c.backend.Commit(ctx, lease, resp); err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeCreated, resp, nil
	}
	c.cfg.Logger.ErrorContext(ctx, "charge row conflicts with the provider's answer; stored as a permanent error",
		"key_hash", lease.Key.LogHash(), "charge_id", ch.ID)
	resp := c.cfg.Answers.Conflicting()
	if err := c.backend.Fail(ctx, lease, resp); err != nil {
		return "", idem.Response{}, err
	}
	return OutcomeChargeConflict, resp, nil
}

func (charges) done() provider.Status { return provider.StatusCharged }

func (charges) resolved() Outcome { return OutcomeResolvedCharged }

func (charges) row(rec *idem.Record) (string, error) { return ChargeID(rec.Key, rec.CreatedAt), nil }

// notified settles a charge made but not settled, as the provider's word n
// says. That is an authorization whose capture or cancel is in flight. It
// is also one the provider itself captured or canceled, as when it
// expired. A charge in its final state is left as it is.
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
	outcome, ok := eventOutcomes[n.Result.Status]
	if !ok {
		return OutcomeNothingToDo, true, nil
	}
	_, err = c.applyState(ctx, ch, n.Result)
	return outcome, true, err
}

// eventOutcomes are the provider's states that settle a charge's row, and
// what settling it by an event is called.
var eventOutcomes = map[provider.Status]Outcome{
	provider.StatusCharged:  OutcomeResolvedCaptured,
	provider.StatusCanceled: OutcomeResolvedCanceled,
}

// made is the charge the command lease holds made, as the provider
// answered res. It is authorized to capture later, or charged.
func (charges) made(lease *idem.Lease, in intent, res provider.Result) Charge {
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

// chargeRequest is the provider request of the charge lease holds. Create
// sends it and a replay sends it again. It is built in one place: the
// provider replays a key only for the same parameters.
func chargeRequest(lease *idem.Lease, in intent, source string) provider.ChargeRequest {
	return provider.ChargeRequest{
		Reference: ProviderReference(lease.Key, lease.CreatedAt), Amount: in.Amount, Currency: in.Currency, Source: source,
		Command: lease.Key.String(), Row: ChargeID(lease.Key, lease.CreatedAt), AuthorizeOnly: in.AuthorizeOnly,
	}
}

// replayer is the provider as a Replayer, if the command lease holds is to
// be looked up by replaying it. The intent must have kept its source. The
// provider must still deduplicate its reference, counted from the record's
// creation. Otherwise replayer is nil.
func (c charges) replayer(lease *idem.Lease, in intent) Replayer {
	if rp, ok := c.cfg.Provider.(Replayer); ok && in.Source != "" && c.deduplicated(lease) {
		return rp
	}
	return nil
}

// charge calls the provider, traced as the span provider.Charge.
func (s *Service) charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	return s.ask(ctx, "provider.Charge", func(ctx context.Context) (provider.Result, error) { return s.cfg.Provider.Charge(ctx, req) })
}
