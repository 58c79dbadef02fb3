package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Provider charges cards, deduplicating by reference, and looks charges up.
type Provider interface {
	Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error)
	Lookup(ctx context.Context, reference string) (provider.Result, error)
	Guarantees() provider.Guarantees
}

// ReconcileQueue queues a key whose outcome is unknown, for the
// reconciler to resolve once its lease has run out.
type ReconcileQueue interface {
	EnqueueReconcile(ctx context.Context, key idem.Key, delay time.Duration) error
}

// Answers renders the answers a command stores: every retry replays them
// byte for byte, whoever settled the command (the handler or the
// reconciler). The HTTP layer provides them.
type Answers interface {
	// Created is the answer to a charge that succeeded.
	Created(c Charge) idem.Response
	// Declined is the answer to a declined card.
	Declined(declineCode string) idem.Response
	// Conflicting is the answer to a command whose charge row conflicts
	// with the provider's answer.
	Conflicting() idem.Response
}

// Outcome names what became of a request, for logs and metrics.
type Outcome string

// The outcomes.
const (
	OutcomeCreated     Outcome = "created"
	OutcomeReplayed    Outcome = "replayed"
	OutcomeConflict    Outcome = "conflict"
	OutcomeMismatch    Outcome = "mismatch"
	OutcomeDeclined    Outcome = "declined"
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomeBusy: the store was throttled or failing; nothing happened.
	OutcomeBusy      Outcome = "busy"
	OutcomeRejected  Outcome = "rejected"
	OutcomeAmbiguous Outcome = "ambiguous"
	OutcomeInvalid   Outcome = "invalid"
	OutcomeFound     Outcome = "found"
	OutcomeNotFound  Outcome = "not_found"
	OutcomeError     Outcome = "error"
	// OutcomeChargeConflict: the charge row conflicts with the provider's
	// answer; stored as a permanent failure.
	OutcomeChargeConflict Outcome = "charge_conflict"
	// Reconciliation outcomes.
	OutcomeNothingToDo Outcome = "nothing_to_do"
	OutcomeStillLeased Outcome = "still_leased"
	OutcomeResolved    Outcome = "resolved_charged"
	OutcomeResolvedDec Outcome = "resolved_declined"
	OutcomeReleased    Outcome = "released"
	// OutcomeNotSettled: the provider has no charge for the reference yet,
	// but its settle window has not passed; the key is looked at again
	// when it has.
	OutcomeNotSettled Outcome = "not_settled"
	// OutcomeDeferred: the provider could not be asked; the key is looked
	// at again after a backoff that grows with its attempts.
	OutcomeDeferred Outcome = "deferred"
)

// Config holds a Service's dependencies. Clock defaults to time.Now.
type Config struct {
	Store        *idem.Store
	Rows         *Rows
	Provider     Provider
	Answers      Answers
	Queue        ReconcileQueue // may be nil in the reconcile function
	InflightWait time.Duration  // how long Create waits for an in-flight twin
	// CommitReserve is the part of the request's time the provider call
	// may not use: what recording the outcome (or queueing it for the
	// reconciler) needs. Default DefaultCommitReserve.
	CommitReserve time.Duration
	// RetryBase and RetryCap bound the reconciler's backoff per key: the
	// n-th failed attempt waits RetryBase·2ⁿ⁻¹, at most RetryCap.
	// Defaults DefaultRetryBase and DefaultRetryCap.
	RetryBase, RetryCap time.Duration
	Clock               func() time.Time
	Logger              *slog.Logger
}

// Defaults of the Config.
const (
	DefaultCommitReserve = 2 * time.Second
	DefaultRetryBase     = time.Minute
	DefaultRetryCap      = time.Hour
)

// Service creates, reads and reconciles charges.
type Service struct{ cfg Config }

// NewService checks the dependencies and returns a Service.
func NewService(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("charge: nil idempotency store")
	case cfg.Rows == nil:
		return nil, errors.New("charge: no charges table")
	case cfg.Provider == nil:
		return nil, errors.New("charge: nil provider")
	case cfg.Answers == nil:
		return nil, errors.New("charge: nil answers")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.CommitReserve <= 0 {
		cfg.CommitReserve = DefaultCommitReserve
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.RetryCap <= 0 {
		cfg.RetryCap = DefaultRetryCap
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}, nil
}

// Result is what became of a request, for the HTTP layer to answer.
type Result struct {
	Outcome Outcome
	// Stored is the command's stored answer (created, declined, charge
	// conflict, and their replays), to send as it is.
	Stored   *idem.Response
	Replayed bool
	// Charge is the charge Get found.
	Charge *Charge
	// KeyExpiresAt is until when the key deduplicates (zero when nothing
	// is stored); RetryAt when a retry may find the outcome settled
	// (conflict, ambiguous).
	KeyExpiresAt, RetryAt time.Time
}

// intent is what a record keeps of the request, for the reconciler. The card
// source is not kept.
type intent struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description,omitempty"`
}

// Create charges req once for the intent id names within tenant. fp is the
// fingerprint of the request as the client sent it; a later request with
// the same id and another fingerprint is refused.
func (s *Service) Create(ctx context.Context, tenant string, id CommandID, req Request, fp idem.Fingerprint) (Result, error) {
	key, err := idem.NewKey(tenant, Operation, string(id))
	if err != nil {
		return Result{}, fmt.Errorf("charge: %w", err)
	}
	in, _ := json.Marshal(intent{req.Money.Amount, req.Money.Currency, req.Description})
	begun, err := s.begin(ctx, key, fp, in)
	var (
		inflight *idem.InFlightError
		mismatch *idem.MismatchError
	)
	switch {
	case errors.As(err, &inflight):
		return Result{Outcome: OutcomeConflict, RetryAt: inflight.LeaseExpiresAt, KeyExpiresAt: inflight.RecordExpiresAt}, nil
	case errors.As(err, &mismatch):
		return Result{Outcome: OutcomeMismatch, KeyExpiresAt: mismatch.RecordExpiresAt}, nil
	case transient(err):
		// Nothing reached the provider: the key may be retried at once.
		return Result{Outcome: OutcomeBusy}, nil
	case err != nil:
		return Result{}, err
	case begun.Replay != nil:
		return Result{Outcome: OutcomeReplayed, Stored: begun.Replay, Replayed: true, KeyExpiresAt: begun.RecordExpiresAt}, nil
	}
	lease := begun.Lease
	res, err := s.charge(ctx, provider.ChargeRequest{
		Reference: ProviderReference(key, lease.CreatedAt), Amount: req.Money.Amount, Currency: req.Money.Currency, Source: req.Source,
	})
	switch {
	case errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrRejected):
		// The provider did not act: the key is released for a retry of the
		// same request.
		if rerr := s.cfg.Store.Release(ctx, lease); rerr != nil {
			return s.ambiguous(ctx, lease, rerr)
		}
		if errors.Is(err, provider.ErrRejected) {
			s.cfg.Logger.ErrorContext(ctx, "provider rejected the charge request", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
			return Result{Outcome: OutcomeRejected}, nil
		}
		return Result{Outcome: OutcomeUnavailable}, nil
	case err != nil:
		return s.ambiguous(ctx, lease, err)
	}
	outcome, resp, err := s.complete(ctx, lease, res)
	if err != nil {
		return s.ambiguous(ctx, lease, err)
	}
	return Result{Outcome: outcome, Stored: &resp, KeyExpiresAt: lease.RecordExpiresAt}, nil
}

// charge calls the provider with what is left of the request's time minus
// CommitReserve, so an answer that comes in time can still be recorded.
func (s *Service) charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-s.cfg.CommitReserve))
		defer cancel()
	}
	return s.cfg.Provider.Charge(ctx, req)
}

// transient reports whether err is a failure of DynamoDB that a retry may
// not meet: throttling, a transaction conflict, a server error, or time
// running out.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var (
		api  smithy.APIError
		resp *awshttp.ResponseError
	)
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
			"TransactionConflictException", "TransactionInProgressException", "InternalServerError",
			"InternalFailure", "ServiceUnavailable":
			return true
		}
	}
	if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// begin claims the key, waiting up to InflightWait (and never past the
// context's deadline) for an in-flight twin to finish.
func (s *Service) begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, in []byte) (idem.Begun, error) {
	waitUntil := time.Now().Add(s.cfg.InflightWait)
	if d, ok := ctx.Deadline(); ok && d.Add(-time.Second).Before(waitUntil) {
		waitUntil = d.Add(-time.Second)
	}
	pause := 50 * time.Millisecond
	for {
		begun, err := s.cfg.Store.Begin(ctx, key, fp, in)
		if !errors.Is(err, idem.ErrInFlight) || time.Now().Add(pause).After(waitUntil) {
			return begun, err
		}
		select {
		case <-ctx.Done():
			return begun, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 400*time.Millisecond)
	}
}

// enqueueTimeout bounds the reconcile message's send on the ambiguous
// path, which runs on its own time: the request's may be spent.
const enqueueTimeout = 2 * time.Second

// ambiguous answers when the charge may have happened but the record could
// not be completed: the record stays IN_FLIGHT and is queued for the
// reconciler once its lease has run out.
func (s *Service) ambiguous(ctx context.Context, lease *idem.Lease, cause error) (Result, error) {
	delay := lease.ExpiresAt.Sub(s.cfg.Clock())
	s.cfg.Logger.WarnContext(ctx, "charge outcome unknown; queued for reconciliation",
		"key_hash", lease.Key.LogHash(), "cause", ErrorClass(cause), "delay_ms", delay.Milliseconds())
	if s.cfg.Queue != nil {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueTimeout)
		defer cancel()
		if err := s.cfg.Queue.EnqueueReconcile(qctx, lease.Key, delay); err != nil {
			// The sweeper will find the lease once it expires.
			s.cfg.Logger.ErrorContext(ctx, "enqueue reconcile failed", "key_hash", lease.Key.LogHash(), "error_class", ErrorClass(err))
		}
	}
	return Result{Outcome: OutcomeAmbiguous, RetryAt: lease.ExpiresAt, KeyExpiresAt: lease.RecordExpiresAt}, nil
}

// ErrorClass names an error for logs and metrics without its text, which
// may carry request details. Every function uses this one vocabulary.
func ErrorClass(err error) string {
	switch {
	case errors.Is(err, provider.ErrAmbiguous):
		return "provider_ambiguous"
	case errors.Is(err, provider.ErrUnavailable):
		return "provider_unavailable"
	case errors.Is(err, provider.ErrRejected):
		return "provider_rejected"
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "deadline"
	case transient(err):
		return "store_unavailable"
	default:
		return "internal"
	}
}

// complete records the provider's verdict on the lease holder's command:
// SUCCEEDED with the charge row in one transaction, or FAILED_PERMANENT for
// a decline. The handler and the reconciler both finish commands here.
func (s *Service) complete(ctx context.Context, lease *idem.Lease, res provider.Result) (Outcome, idem.Response, error) {
	var in intent
	if err := json.Unmarshal(lease.Intent, &in); err != nil {
		return "", idem.Response{}, fmt.Errorf("charge: stored intent: %w", err)
	}
	switch res.Status {
	case provider.StatusCharged:
		c := Charge{
			ID: ChargeID(lease.Key, lease.CreatedAt), Tenant: lease.Key.Tenant(),
			Money:       Money{Amount: in.Amount, Currency: in.Currency},
			Description: in.Description, ProviderReference: ProviderReference(lease.Key, lease.CreatedAt),
			ProviderChargeID: res.ChargeID, IdempotencyKey: CommandID(lease.Key.ClientKey()),
			CreatedAt: lease.CreatedAt,
		}
		resp := s.cfg.Answers.Created(c)
		err := s.cfg.Store.Commit(ctx, lease, resp, s.cfg.Rows.Insert(c))
		if errors.Is(err, idem.ErrWriteConditionFailed) {
			return s.rowExists(ctx, lease, c)
		}
		if err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeCreated, resp, nil
	case provider.StatusDeclined:
		resp := s.cfg.Answers.Declined(res.DeclineCode)
		if err := s.cfg.Store.Fail(ctx, lease, resp); err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeDeclined, resp, nil
	default:
		return "", idem.Response{}, fmt.Errorf("charge: unexpected provider status %q", res.Status)
	}
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
		if err := s.cfg.Store.Commit(ctx, lease, resp); err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeCreated, resp, nil
	}
	s.cfg.Logger.ErrorContext(ctx, "charge row conflicts with the provider's answer; stored as a permanent error",
		"key_hash", lease.Key.LogHash(), "charge_id", c.ID)
	resp := s.cfg.Answers.Conflicting()
	if err := s.cfg.Store.Fail(ctx, lease, resp); err != nil {
		return "", idem.Response{}, err
	}
	return OutcomeChargeConflict, resp, nil
}

// Get returns tenant's charge id, read strongly consistently so a charge
// just answered 201 is found. Another tenant's charge is not found.
func (s *Service) Get(ctx context.Context, tenant, id string) (Result, error) {
	c, found, err := s.cfg.Rows.Get(ctx, tenant, id)
	switch {
	case transient(err):
		return Result{Outcome: OutcomeBusy}, nil
	case err != nil:
		return Result{}, err
	case !found:
		return Result{Outcome: OutcomeNotFound}, nil
	}
	return Result{Outcome: OutcomeFound, Charge: &c}, nil
}

// Reconcile resolves a command whose first attempt may have died between
// charging and recording, however old it is: if its lease has run out, it
// takes the lease over and asks the provider what happened to the
// command's reference. A charge is committed with the exact 201 the API
// would have answered; a decline is stored as the 402. "Not found"
// releases the key only once the provider's settle window has passed
// since the last attempt had to be sent; before that the key is postponed
// to then. If the provider cannot be asked, the key is postponed by a
// backoff that grows with its attempts. Postponed keys come back through
// the sweeper, never through redelivery of the message. Errors are left
// for the message to be retried (the lease simply runs out again).
func (s *Service) Reconcile(ctx context.Context, key idem.Key) (Outcome, error) {
	rec, err := s.cfg.Store.Get(ctx, key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return OutcomeNothingToDo, nil
	case err != nil:
		return "", err
	case rec.Status != idem.StatusInFlight:
		return OutcomeNothingToDo, nil
	case rec.LeaseExpiresAt.After(s.cfg.Clock()):
		return OutcomeStillLeased, nil
	}
	lease, err := s.cfg.Store.TakeOver(ctx, key)
	switch {
	case errors.Is(err, idem.ErrInFlight):
		return OutcomeStillLeased, nil
	case errors.Is(err, idem.ErrNotFound) || errors.Is(err, idem.ErrCompleted):
		return OutcomeNothingToDo, nil
	case err != nil:
		return "", err
	}
	res, err := s.cfg.Provider.Lookup(ctx, ProviderReference(key, lease.CreatedAt))
	if err != nil {
		until := s.cfg.Clock().Add(s.backoff(lease.Attempts))
		s.cfg.Logger.WarnContext(ctx, "reconcile: provider lookup failed; postponed",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err), "attempts", lease.Attempts, "until", until)
		return s.postpone(ctx, lease, until, OutcomeDeferred)
	}
	if res.Status == provider.StatusNotFound {
		if settled := lease.AttemptDeadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Clock().Before(settled) {
			return s.postpone(ctx, lease, settled, OutcomeNotSettled)
		}
		if err := s.cfg.Store.Release(ctx, lease); err != nil {
			return "", err
		}
		return OutcomeReleased, nil
	}
	outcome, _, err := s.complete(ctx, lease, res)
	switch {
	case err != nil:
		return "", err
	case outcome == OutcomeDeclined:
		return OutcomeResolvedDec, nil
	case outcome == OutcomeCreated:
		return OutcomeResolved, nil
	}
	return outcome, nil
}

func (s *Service) postpone(ctx context.Context, lease *idem.Lease, until time.Time, outcome Outcome) (Outcome, error) {
	if err := s.cfg.Store.Postpone(ctx, lease, until); err != nil {
		return "", err
	}
	return outcome, nil
}

// backoff is how long a key waits after its n-th failed attempt.
func (s *Service) backoff(attempts int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempts && d < s.cfg.RetryCap; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryCap)
}
