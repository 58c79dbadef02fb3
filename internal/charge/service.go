package charge

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

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
	// Refund and LookupRefund do the same for refunds, by their own
	// reference.
	Refund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	LookupRefund(ctx context.Context, req provider.RefundRequest) (provider.Result, error)
	// Capture and Cancel settle an authorization. State reads what the
	// provider holds of a payment, changing nothing.
	Capture(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	Cancel(ctx context.Context, req provider.PaymentRequest) (provider.Result, error)
	State(ctx context.Context, charge string) (provider.Result, error)
}

// Replayer is a Provider that also looks a charge up by replaying its
// request (provider.LookupRequest). It replays under the charge's
// reference, while the provider still deduplicates it. The stripe adapter
// is one. A replay must be the request as first sent. So with a Replayer
// the intent keeps the request's source. CheckSource refuses, before
// anything is stored, a source that is not a reference to a card. A
// PaymentMethod id is one. Card data is never kept.
type Replayer interface {
	LookupRequest(ctx context.Context, req provider.LookupRequest) (provider.Result, error)
	CheckSource(source string) error
}

// Preparer is a Provider with something to make ready before a command is
// claimed. That is its API key, read from Secrets Manager (package keyed).
// A provider that cannot be made ready fails the request with nothing
// claimed. So no key is left IN_FLIGHT for want of a secret.
type Preparer interface {
	Prepare(ctx context.Context) error
}

// ErrProviderNotReady: the provider could not be made ready, its API key
// unread. Nothing was claimed or sent.
var ErrProviderNotReady = errors.New("charge: provider not ready, nothing claimed")

// ReconcileQueue queues a key whose outcome is unknown. The reconciler
// resolves it once its lease has run out.
type ReconcileQueue interface {
	EnqueueReconcile(ctx context.Context, key idem.Key, delay time.Duration) error
}

// Answers renders the answers a command stores. Every retry replays them
// byte for byte, whoever settled the command. The HTTP layer provides
// them.
type Answers interface {
	// Created is the answer to a charge that succeeded.
	Created(c Charge) idem.Response
	// Declined is the answer to a declined card.
	Declined(declineCode string) idem.Response
	// Conflicting answers a command whose charge row conflicts with the
	// provider's answer.
	Conflicting() idem.Response
	// RefundCreated is the answer to a refund that succeeded.
	RefundCreated(r Refund) idem.Response
	// RefundDeclined is the answer to a refund the provider refused for
	// good.
	RefundDeclined(code string) idem.Response
	// RefundExceeds answers a refund beyond what settled refunds leave. It
	// is final for its key.
	RefundExceeds() idem.Response
	// RefundLimit answers a refund of a charge whose settled refunds reach
	// the limit. It is final for its key.
	RefundLimit() idem.Response
}

// Store is the idempotency store. *dynamostore.Store is the deployed one.
// memstore serves the rules' tests. SettleClaim is optional to
// idem.Recover, required here: a wrapper cannot hide it from the reconciler.
type Store interface {
	idem.Backend
	// SettleClaim settles a command's claim on the Ledger again
	// (dynamostore.Store.SettleClaim). idem.Recover calls it.
	SettleClaim(ctx context.Context, key idem.Key, created time.Time) error
}

var _ Store = (*dynamostore.Store)(nil)

// Config holds a Service's dependencies. Its clock is the store's: Store.Now.
type Config struct {
	Store        Store
	Rows         *Rows
	Provider     Provider
	Answers      Answers
	Queue        ReconcileQueue // may be nil in the reconcile function
	InflightWait time.Duration  // how long Create waits for an in-flight twin
	// CommitReserve is the part of the request's time the provider call
	// may not use. The request's last second (answerReserve) queues the
	// outcome and answers. The rest records the outcome. Default
	// DefaultCommitReserve.
	CommitReserve time.Duration
	// RetryBase and RetryCap bound the reconciler's backoff per key: the
	// n-th failed attempt waits RetryBase·2ⁿ⁻¹, at most RetryCap.
	// Defaults DefaultRetryBase and DefaultRetryCap.
	RetryBase, RetryCap time.Duration
	// MaxRefunds is how many refunds a charge may have, settled or in
	// flight. Default DefaultMaxRefunds.
	MaxRefunds int
	// ReplayCache, if positive, is how many settled answers a process
	// keeps (idem.ReplayCache). It replays them without asking DynamoDB.
	ReplayCache int
	Logger      *slog.Logger
	// Tracer records the store's and the provider's calls as spans. Nil
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
	// DefaultMaxRefunds is how many refunds a charge may have, settled or
	// in flight. It keeps a charge's read bounded. Its row holds a hold
	// per refund in flight, and stays far below DynamoDB's 400 KB.
	DefaultMaxRefunds = 1000
)

// Service creates, reads and reconciles charges.
type Service struct {
	cfg Config
	// backend is the store as the charge path uses it (wrap).
	backend Store
	// ops are the operations the service runs, by their keys' scope.
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
	s := &Service{cfg: cfg, backend: wrap(cfg), ops: make(map[string]operation, len(operations))}
	for name, op := range operations {
		s.ops[name] = op(s)
	}
	return s, nil
}

// wrap is cfg's store as the charge path uses it. Its calls are timed into
// the metrics, behind the replay cache if there is one. Each wrapper is a
// Store: it passes SettleClaim on.
func wrap(cfg Config) Store {
	var backend Store = timed{cfg.Store, cfg.Tracer}
	if cfg.ReplayCache > 0 {
		backend = idem.NewReplayCache(backend, cfg.ReplayCache)
	}
	return backend
}

// Result is what became of a request, for the HTTP layer to answer.
type Result struct {
	Outcome Outcome
	// Stored is the command's stored answer, to send as it is. Created,
	// declined and charge conflicts have one, and so do their replays.
	Stored   *idem.Response
	Replayed bool
	// Idle: the request did no new work, so it does not count against its
	// tenant's rate. It found its answer: a replay, a key in progress or
	// reused with another body, a move made or in progress, a charge in
	// another state.
	Idle bool
	// Charge is the charge Get found, or one a refund found in another
	// state (OutcomeStateConflict). Refund is the refund GetRefund found.
	// Refunds is the page ListRefunds found.
	Charge  *Charge
	Refund  *Refund
	Refunds *RefundList
	// KeyExpiresAt is until when the key deduplicates, zero when nothing
	// is stored. RetryAt is when a retry may find the outcome settled,
	// after a conflict, an ambiguous outcome or a pending failover.
	KeyExpiresAt, RetryAt time.Time
	// Region serves the tenant, when another than this one does
	// (OutcomeWrongRegion).
	Region string
}

// transient reports whether err is a DynamoDB failure a retry may not
// meet, or time running out. The store and the charges table translate the
// SDK's errors to idem.ErrUnavailable.
func transient(err error) bool {
	return errors.Is(err, idem.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// sqsFailed reports whether err is an SQS call that failed: a reconcile
// message the queue may not have taken.
func sqsFailed(err error) bool {
	var op *smithy.OperationError
	return errors.As(err, &op) && op.ServiceID == sqs.ServiceID
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
	case transient(err), errors.Is(err, idem.ErrUnknownClaim):
		// A claim unanswered is a store fault: its write may have landed.
		return "store_unavailable"
	case sqsFailed(err):
		return "queue_unavailable"
	default:
		return "internal"
	}
}
