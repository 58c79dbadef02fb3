package charge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Provider charges cards, deduplicating by reference, and looks charges up.
type Provider interface {
	Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error)
	Lookup(ctx context.Context, reference string) (provider.Result, error)
	Guarantees() provider.Guarantees
	// Refund and LookupRefund do the same for refunds, by the refund's
	// own reference.
	Refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	LookupRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	// Capture and Cancel settle an authorization; State reads what the
	// provider holds of a payment, changing nothing.
	Capture(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	Cancel(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	State(ctx context.Context, charge string) (provider.Result, error)
}

// Replayer is a Provider that also looks a charge up by replaying its
// request under its reference while the provider still deduplicates it
// (provider.LookupRequest; the stripe adapter does). A replay must be the
// request as first sent, so with a Replayer the intent keeps the request's
// source. CheckSource refuses, before anything is stored, a source that is
// not a reference to a card the provider holds (a PaymentMethod id): card
// data is never kept.
type Replayer interface {
	LookupRequest(ctx context.Context, req provider.LookupRequest) (provider.Result, error)
	CheckSource(source string) error
}

// Preparer is a Provider with something to make ready before a command is
// claimed: its API key, read from Secrets Manager (package keyed). A
// provider that cannot be made ready fails the request with nothing
// claimed, so no key is left IN_FLIGHT for want of a secret.
type Preparer interface {
	Prepare(ctx context.Context) error
}

// ErrProviderNotReady: the provider could not be made ready (its API key
// could not be read); nothing was claimed or sent.
var ErrProviderNotReady = errors.New("charge: provider not ready, nothing claimed")

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
	// RefundCreated is the answer to a refund that succeeded.
	RefundCreated(r Refund) idem.Response
	// RefundDeclined is the answer to a refund the provider refused for
	// good.
	RefundDeclined(code string) idem.Response
	// RefundExceeds is the answer to a refund beyond what settled refunds
	// leave of the charge: final for its key.
	RefundExceeds() idem.Response
	// RefundLimit is the answer to a refund of a charge whose settled
	// refunds reach the limit: final for its key.
	RefundLimit() idem.Response
}

// Store is the idempotency store (idem.Backend): *dynamostore.Store is the
// deployed one; memstore serves the rules' tests.
type Store = idem.Backend

var _ Store = (*dynamostore.Store)(nil)

// Config holds a Service's dependencies. Clock defaults to time.Now.
type Config struct {
	Store        Store
	Rows         *Rows
	Provider     Provider
	Answers      Answers
	Queue        ReconcileQueue // may be nil in the reconcile function
	InflightWait time.Duration  // how long Create waits for an in-flight twin
	// CommitReserve is the part of the request's time the provider call
	// may not use. The request's last second (answerReserve) is kept for
	// queueing the outcome and answering; the rest records the outcome.
	// Default DefaultCommitReserve.
	CommitReserve time.Duration
	// RetryBase and RetryCap bound the reconciler's backoff per key: the
	// n-th failed attempt waits RetryBase·2ⁿ⁻¹, at most RetryCap.
	// Defaults DefaultRetryBase and DefaultRetryCap.
	RetryBase, RetryCap time.Duration
	// MaxRefunds is how many refunds a charge may have, settled or in
	// flight. Default DefaultMaxRefunds.
	MaxRefunds int
	// ReplayCache, if positive, is how many settled answers a process
	// keeps to replay without asking DynamoDB (idem.ReplayCache).
	ReplayCache int
	Clock       func() time.Time
	Logger      *slog.Logger
	// Tracer records the store's and the provider's calls as spans; nil
	// traces nothing.
	Tracer *tracing.Tracer
	// Fence says which tenants this Region serves (regions.go). Nil
	// serves them all.
	Fence Fence
}

// Defaults of the Config.
const (
	DefaultCommitReserve = 2 * time.Second
	DefaultRetryBase     = time.Minute
	DefaultRetryCap      = time.Hour
)

// Service creates, reads and reconciles charges.
type Service struct {
	cfg Config
	// backend is the store as the charge path uses it: timed into the
	// invocation's metrics, behind the replay cache if there is one.
	backend idem.Backend
	// ops are the operations the service runs, by the operation their
	// keys are scoped to.
	ops map[string]operation
}

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
	if cfg.MaxRefunds <= 0 {
		cfg.MaxRefunds = DefaultMaxRefunds
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var backend idem.Backend = timed{cfg.Store, cfg.Tracer}
	if cfg.ReplayCache > 0 {
		backend = idem.NewReplayCache(backend, cfg.ReplayCache)
	}
	s := &Service{cfg: cfg, backend: backend, ops: make(map[string]operation, len(operations))}
	for name, op := range operations {
		s.ops[name] = op(s)
	}
	return s, nil
}

// operations are the operations a Service runs, by the operation their
// keys are scoped to: the one place a new operation is registered.
var operations = map[string]func(*Service) operation{
	Operation:       func(s *Service) operation { return charges{s} },
	RefundOperation: func(s *Service) operation { return refunds{s} },
}

// Reconciles reports whether Reconcile resolves keys of operation: the
// operations the service runs, its notifications' records, and captures
// and cancels left unsettled.
func Reconciles(operation string) bool {
	_, ok := operations[operation]
	return ok || operation == NotificationOperation || operation == TransitionOperation
}

// Result is what became of a request, for the HTTP layer to answer.
type Result struct {
	Outcome Outcome
	// Stored is the command's stored answer (created, declined, charge
	// conflict, and their replays), to send as it is.
	Stored   *idem.Response
	Replayed bool
	// Charge is the charge Get found, or the one a refund found in
	// another state (OutcomeStateConflict); Refund the refund GetRefund
	// found; Refunds the page ListRefunds found.
	Charge  *Charge
	Refund  *Refund
	Refunds *RefundList
	// KeyExpiresAt is until when the key deduplicates; zero when
	// nothing is stored. RetryAt is when a retry may find the
	// outcome settled. It is set for conflict, ambiguous and
	// failover pending.
	KeyExpiresAt, RetryAt time.Time
	// Region serves the tenant, when another than this one does
	// (OutcomeWrongRegion).
	Region string
}

// prepare makes the provider ready, if it is a Preparer, before a
// command is claimed or taken over.
func (s *Service) prepare(ctx context.Context) error {
	p, ok := s.cfg.Provider.(Preparer)
	if !ok {
		return nil
	}
	if err := p.Prepare(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrProviderNotReady, err)
	}
	return nil
}

// deduplicated reports whether the provider still deduplicates the
// reference of the command lease holds, with its margin to spare
// (provider.Guarantees.Deduplicates). Every path that sends a request to
// the provider asks this first: Create, a re-claim, the reconciler.
func (s *Service) deduplicated(lease *idem.Lease) bool {
	return s.cfg.Provider.Guarantees().Deduplicates(lease.CreatedAt, s.cfg.Clock())
}

// unknownClaim answers a claim that may have landed without its answer:
// the record may be IN_FLIGHT with the request, and the reconciler may
// charge it once its lease has run out, so the client hears "pending",
// never "nothing was charged". The reconcile message is queued as for an
// ambiguous charge; the sweeper finds the lease if that fails too.
func (s *Service) unknownClaim(ctx context.Context, key idem.Key, unknown *idem.UnknownClaimError) (Result, error) {
	s.cfg.Logger.WarnContext(ctx, "charge: claim outcome unknown; queued for reconciliation",
		"key_hash", key.LogHash(), "cause", ErrorClass(unknown.Err))
	s.enqueue(ctx, key, unknown.LeaseExpiresAt)
	return Result{Outcome: OutcomeAmbiguous, RetryAt: unknown.LeaseExpiresAt, KeyExpiresAt: unknown.RecordExpiresAt}, nil
}

// answered ends a provider call's span with the provider's status or the
// class of its failure.
func answered(span trace.Span, res provider.Result, err error) (provider.Result, error) {
	defer span.End()
	if err != nil {
		tracing.Error(span, ErrorClass(err))
	} else {
		tracing.Outcome(span, string(res.Status))
	}
	return res, err
}

// transient reports whether err is a failure of DynamoDB that a retry may
// not meet (idem.ErrUnavailable: the store and the charges table translate
// the SDK's errors), or time running out.
func transient(err error) bool {
	return errors.Is(err, idem.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// The end of a request's time that its store and provider calls leave.
// The reconcile message is sent in it, on its own time, then the answer
// leaves before the function's deadline: the gateway never answers for it.
const (
	enqueueTimeout = 750 * time.Millisecond
	answerReserve  = enqueueTimeout + 250*time.Millisecond
)

// answering is ctx less its last answerReserve, for the calls of one
// request.
func answering(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, deadline.Add(-answerReserve))
	}
	return context.WithCancel(ctx)
}

// recordReserve is the part of an answering context's time the provider
// call may not use: what recording its outcome needs.
func (s *Service) recordReserve() time.Duration {
	return max(s.cfg.CommitReserve-answerReserve, 0)
}

// providerEnd is end, or the end of an answering ctx less recordReserve if
// that is sooner: when a provider call must stop, as must a wait that may
// lead to one (as idem.Do's wait for a key does).
func (s *Service) providerEnd(ctx context.Context, end time.Time) time.Time {
	if deadline, ok := ctx.Deadline(); ok && deadline.Add(-s.recordReserve()).Before(end) {
		return deadline.Add(-s.recordReserve())
	}
	return end
}

// ambiguous answers when the charge may have happened but the record could
// not be completed: the record stays IN_FLIGHT and is queued for the
// reconciler once its lease has run out.
func (s *Service) ambiguous(ctx context.Context, lease *idem.Lease, cause error) (Result, error) {
	s.cfg.Logger.WarnContext(ctx, "charge outcome unknown; queued for reconciliation",
		"key_hash", lease.Key.LogHash(), "cause", ErrorClass(cause), "delay_ms", lease.ExpiresAt.Sub(s.cfg.Clock()).Milliseconds())
	s.enqueue(ctx, lease.Key, lease.ExpiresAt)
	outcome := OutcomeAmbiguous
	if errors.Is(cause, idem.ErrLeaseLost) {
		outcome = OutcomeLeaseLost
	}
	return Result{Outcome: outcome, RetryAt: lease.ExpiresAt, KeyExpiresAt: lease.RecordExpiresAt}, nil
}

// enqueue queues key for the reconciler once its lease ends at until.
func (s *Service) enqueue(ctx context.Context, key idem.Key, until time.Time) {
	if s.cfg.Queue == nil {
		return
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueTimeout)
	defer cancel()
	if err := s.cfg.Queue.EnqueueReconcile(qctx, key, until.Sub(s.cfg.Clock())); err != nil {
		// The sweeper will find the lease once it expires.
		s.cfg.Logger.ErrorContext(ctx, "enqueue reconcile failed", "key_hash", key.LogHash(), "error_class", ErrorClass(err))
	}
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
	case errors.Is(err, ErrProviderNotReady):
		return "provider_not_ready"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "deadline"
	case transient(err):
		return "store_unavailable"
	default:
		return "internal"
	}
}
