package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/metrics"
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
	// OutcomeLeaseLost: the outcome is unknown because the request's lease
	// was taken over before it could record it.
	OutcomeLeaseLost Outcome = "lease_lost"
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
	// OutcomeParked: the provider has no charge for a command older than
	// its dedup window. Releasing it would let a retry send its reference
	// again, which the provider would no longer deduplicate; it stays
	// IN_FLIGHT, comes back every RetryCap, and waits for an operator.
	OutcomeParked Outcome = "parked"
)

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
	// may not use: what recording the outcome (or queueing it for the
	// reconciler) needs. Default DefaultCommitReserve.
	CommitReserve time.Duration
	// RetryBase and RetryCap bound the reconciler's backoff per key: the
	// n-th failed attempt waits RetryBase·2ⁿ⁻¹, at most RetryCap.
	// Defaults DefaultRetryBase and DefaultRetryCap.
	RetryBase, RetryCap time.Duration
	// ReplayCache, if positive, is how many settled answers a process
	// keeps to replay without asking DynamoDB (idem.ReplayCache).
	ReplayCache int
	Clock       func() time.Time
	Logger      *slog.Logger
	// Tracer records the store's and the provider's calls as spans; nil
	// traces nothing.
	Tracer *tracing.Tracer
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var backend idem.Backend = timed{cfg.Store, cfg.Tracer}
	if cfg.ReplayCache > 0 {
		backend = idem.NewReplayCache(backend, cfg.ReplayCache)
	}
	return &Service{cfg: cfg, backend: backend}, nil
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
// source is kept only for a Replayer, which needs it to replay the request
// and has checked it is a reference, not card data.
type intent struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description,omitempty"`
	Source      string `json:"source,omitempty"`
}

// Create charges req once for the intent key names: a key of Operation,
// the client's CommandID within its tenant. fp is the fingerprint of the
// request as the client sent it; a later request with the same key and
// another fingerprint is refused.
func (s *Service) Create(ctx context.Context, key idem.Key, req Request, fp idem.Fingerprint) (Result, error) {
	if key.Operation() != Operation {
		return Result{}, fmt.Errorf("charge: create under a key of operation %q", key.Operation())
	}
	kept := intent{Amount: req.Money.Amount, Currency: req.Money.Currency, Description: req.Description}
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
		charged *Charge // what the provider charged, to record
		refused Outcome // why the provider did not act
	)
	res, err := idem.Do(ctx, s.backend, key, fp, in, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		if !s.deduplicated(l) {
			out, c, err := s.lookupStale(ctx, l, kept)
			charged = c
			return out, err
		}
		pres, err := s.charge(ctx, chargeRequest(key, l.CreatedAt, req.Money.Amount, req.Money.Currency, req.Source))
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
		out, c, err := s.verdict(l, kept, pres)
		charged = c
		return out, err
	}, func(o *idem.DoOptions) {
		o.Wait, o.Reserve = s.cfg.InflightWait, s.cfg.CommitReserve
	})
	// errors.AsType, not As: no target variable escapes on the way that
	// succeeds.
	if inflight, ok := errors.AsType[*idem.InFlightError](err); ok {
		return Result{Outcome: OutcomeConflict, RetryAt: inflight.LeaseExpiresAt, KeyExpiresAt: inflight.RecordExpiresAt}, nil
	}
	if mismatch, ok := errors.AsType[*idem.MismatchError](err); ok {
		return Result{Outcome: OutcomeMismatch, KeyExpiresAt: mismatch.RecordExpiresAt}, nil
	}
	if unknown, ok := errors.AsType[*idem.UnknownClaimError](err); ok {
		return s.unknownClaim(ctx, key, unknown)
	}
	switch {
	case res.Lease == nil && transient(err):
		// DynamoDB refused the claim unprocessed at every attempt (idem
		// returns any other failure as *UnknownClaimError): nothing is
		// stored and nothing reached the provider.
		return Result{Outcome: OutcomeBusy}, nil
	case res.Lease == nil && err != nil:
		return Result{}, err
	case res.Replayed:
		return Result{Outcome: OutcomeReplayed, Stored: &res.Response, Replayed: true, KeyExpiresAt: res.RecordExpiresAt}, nil
	case errors.Is(err, idem.ErrWriteCondition) && charged != nil:
		outcome, resp, err := s.rowExists(ctx, res.Lease, *charged)
		if err != nil {
			return s.ambiguous(ctx, res.Lease, err)
		}
		return Result{Outcome: outcome, Stored: &resp, KeyExpiresAt: res.Lease.RecordExpiresAt}, nil
	case err != nil || res.Status == idem.StatusInFlight:
		return s.ambiguous(ctx, res.Lease, err)
	case res.Status == idem.StatusReleased:
		return Result{Outcome: refused, KeyExpiresAt: res.RecordExpiresAt}, nil
	case res.Status == idem.StatusSucceeded:
		return Result{Outcome: OutcomeCreated, Stored: &res.Response, KeyExpiresAt: res.RecordExpiresAt}, nil
	default:
		return Result{Outcome: OutcomeDeclined, Stored: &res.Response, KeyExpiresAt: res.RecordExpiresAt}, nil
	}
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

// charge calls the provider, timed into the invocation's metrics and
// traced as the span provider.Charge.
func (s *Service) charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error) {
	ctx, span := s.cfg.Tracer.Start(ctx, "provider.Charge")
	defer since(ctx, metrics.ProviderLatency, time.Now())
	res, err := s.cfg.Provider.Charge(ctx, req)
	return answered(span, res, err)
}

// lookup asks the provider what became of the command lease holds, timed
// likewise and traced as the span provider.Lookup: by replaying its
// request (rebuilt from in) if rp is not nil, else by looking its
// reference up, which sends nothing.
func (s *Service) lookup(ctx context.Context, lease *idem.Lease, in intent, rp Replayer) (provider.Result, error) {
	ctx, span := s.cfg.Tracer.Start(ctx, "provider.Lookup")
	defer since(ctx, metrics.ProviderLatency, time.Now())
	if rp == nil {
		res, err := s.cfg.Provider.Lookup(ctx, ProviderReference(lease.Key, lease.CreatedAt))
		return answered(span, res, err)
	}
	res, err := rp.LookupRequest(ctx, provider.LookupRequest{
		ChargeRequest: chargeRequest(lease.Key, lease.CreatedAt, in.Amount, in.Currency, in.Source),
		FirstSent:     lease.CreatedAt,
	})
	return answered(span, res, err)
}

// chargeRequest is the provider request of the command key names, claimed
// at created. Create sends it and a replay sends it again, built here in
// one place: the provider replays a key only for the same parameters.
func chargeRequest(key idem.Key, created time.Time, amount int64, currency, source string) provider.ChargeRequest {
	return provider.ChargeRequest{
		Reference: ProviderReference(key, created), Amount: amount, Currency: currency, Source: source, Command: key.String(),
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

// deduplicated reports whether the provider still deduplicates the
// reference of the command lease holds, with its margin to spare
// (provider.Guarantees.Deduplicates). Every path that sends a request to
// the provider asks this first: Create, a re-claim, the reconciler.
func (s *Service) deduplicated(lease *idem.Lease) bool {
	return s.cfg.Provider.Guarantees().Deduplicates(lease.CreatedAt, s.cfg.Clock())
}

// lookupStale settles, without sending anything, a command re-claimed
// after the provider stopped deduplicating its reference: a request sent
// now would be a new charge if the first one landed. The provider is asked
// by reference; a charge or decline settles the command, anything else
// leaves it IN_FLIGHT for the reconciler, which parks it.
func (s *Service) lookupStale(ctx context.Context, lease *idem.Lease, in intent) (idem.Outcome, *Charge, error) {
	s.cfg.Logger.WarnContext(ctx, "charge: reference past the provider's dedup window; looked up, not sent",
		"key_hash", lease.Key.LogHash(), "created_at", lease.CreatedAt)
	res, err := s.lookup(ctx, lease, in, nil)
	switch {
	case err != nil:
		return idem.Unknown(idem.Response{}), nil, err
	case res.Status == provider.StatusNotFound:
		return idem.Unknown(idem.Response{}), nil, nil
	}
	return s.verdict(lease, in, res)
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

// enqueueTimeout bounds the reconcile message's send on the ambiguous
// path, which runs on its own time: the request's may be spent.
const enqueueTimeout = 2 * time.Second

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

// verdict is what the provider's answer means for the command the lease
// holds, whose intent is in: a charge to commit together with its row
// (returned, to record), or a decline to store. The handler and the
// reconciler both decide here.
func (s *Service) verdict(lease *idem.Lease, in intent, res provider.Result) (idem.Outcome, *Charge, error) {
	switch res.Status {
	case provider.StatusCharged:
		c := Charge{
			ID: ChargeID(lease.Key, lease.CreatedAt), Tenant: lease.Key.Tenant(),
			Money:       Money{Amount: in.Amount, Currency: in.Currency},
			Description: in.Description, ProviderReference: ProviderReference(lease.Key, lease.CreatedAt),
			ProviderChargeID: res.ChargeID, IdempotencyKey: CommandID(lease.Key.ClientKey()),
			CreatedAt: lease.CreatedAt,
		}
		return idem.Succeeded(s.cfg.Answers.Created(c), s.cfg.Rows.Insert(c)), &c, nil
	case provider.StatusDeclined:
		return idem.Failed(s.cfg.Answers.Declined(res.DeclineCode)), nil, nil
	default:
		return idem.Outcome{}, nil, fmt.Errorf("charge: unexpected provider status %q", res.Status)
	}
}

// storedIntent reads the intent Begin stored with the command.
func storedIntent(lease *idem.Lease) (intent, error) {
	var in intent
	if err := json.Unmarshal(lease.Intent, &in); err != nil {
		return intent{}, fmt.Errorf("charge: stored intent: %w", err)
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

// Get returns tenant's charge id, read strongly consistently so a charge
// just answered 201 is found. Another tenant's charge is not found.
func (s *Service) Get(ctx context.Context, tenant, id string) (Result, error) {
	if !IsChargeID(id) {
		return Result{Outcome: OutcomeNotFound}, nil
	}
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
// charging and recording, however old it is, by asking the provider what
// became of its reference once its lease has run out (idem.Recover, with
// the provider lookup as the resolver): the table in the package
// documentation says what each answer leads to.
func (s *Service) Reconcile(ctx context.Context, key idem.Key) (Outcome, error) {
	r := &reconciling{Service: s}
	resolve := r.resolve
	if key.Operation() == NotificationOperation {
		resolve = releaseEvent
	} else if err := s.prepare(ctx); err != nil {
		// Before the take-over: the message is delivered again, and
		// the record stays as it was.
		return "", err
	}
	rec, err := idem.Recover(ctx, s.backend, key, resolve)
	switch {
	case rec.Lease == nil && err != nil:
		return "", err
	case rec.Lease == nil && rec.Status == idem.StatusInFlight:
		return OutcomeStillLeased, nil
	case rec.Lease == nil:
		return OutcomeNothingToDo, nil
	case err == nil && r.found != "":
		return r.found, nil
	}
	return s.settled(ctx, rec.Lease, rec.Status, r.charged, err)
}

// reconciling is one Reconcile's resolver, with what it found that the
// record's status will not say: why the command stays IN_FLIGHT, and the
// charge its outcome commits.
type reconciling struct {
	*Service
	found   Outcome
	charged *Charge
}

// resolve asks the provider what became of the charge of the command
// lease holds, taken over from its dead attempt (idem.Resolver).
func (r *reconciling) resolve(ctx context.Context, lease *idem.Lease) (idem.Outcome, error) {
	s, key := r.Service, lease.Key
	in, err := storedIntent(lease)
	if err != nil {
		return idem.Outcome{}, err
	}
	rp := s.replayer(lease, in)
	if rp != nil {
		// A replay is a send: the heartbeat moves the attempt deadline,
		// from which a later "not found" waits out the settle window.
		switch err := s.cfg.Store.Heartbeat(ctx, lease); {
		case errors.Is(err, idem.ErrLeaseLost):
			r.found = OutcomeStillLeased
			return idem.Outcome{}, nil
		case err != nil:
			return idem.Outcome{}, err
		}
	}
	tracing.Int(trace.SpanFromContext(ctx), tracing.AttrAttempts, lease.Attempts)
	res, err := s.lookup(ctx, lease, in, rp)
	if errors.Is(err, provider.ErrRejected) {
		// The replay was refused in a way that proves it cannot succeed
		// (provider.LookupRequest): nothing was or will be charged, and
		// a retry is answered provider-rejected once it asks again.
		s.cfg.Logger.WarnContext(ctx, "reconcile: the provider refused the replayed request; released",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err))
		return idem.NotApplied(idem.Response{}), nil
	}
	if err != nil {
		until := s.cfg.Clock().Add(s.backoff(lease.Attempts))
		s.cfg.Logger.WarnContext(ctx, "reconcile: provider lookup failed; postponed",
			"key_hash", key.LogHash(), "error_class", ErrorClass(err), "attempts", lease.Attempts, "until", until)
		r.found = OutcomeDeferred
		return idem.Postponed(until), nil
	}
	if res.Status != provider.StatusNotFound {
		out, charged, err := s.verdict(lease, in, res)
		r.charged = charged
		return out, err
	}
	if settled := lease.AttemptDeadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Clock().Before(settled) {
		r.found = OutcomeNotSettled
		return idem.Postponed(settled), nil
	}
	if !s.deduplicated(lease) {
		s.cfg.Logger.ErrorContext(ctx, "reconcile: no charge found for a command older than the provider's dedup window; parked for an operator, not released",
			"key_hash", key.LogHash(), "created_at", lease.CreatedAt, "attempts", lease.Attempts)
		r.found = OutcomeParked
		return idem.Postponed(s.cfg.Clock().Add(s.cfg.RetryCap)), nil
	}
	return idem.NotApplied(idem.Response{}), nil
}

// settle completes a command taken over from its first attempt (by
// Notify, or an operator) as out says; charged is the charge out commits,
// if any.
func (s *Service) settle(ctx context.Context, lease *idem.Lease, out idem.Outcome, charged *Charge) (Outcome, error) {
	status, err := idem.Settle(ctx, s.backend, lease, out)
	return s.settled(ctx, lease, status, charged, err)
}

// settled names what became of a command whose settlement under lease
// left it in status, or failed with err: a charge row already there
// (charged, its own) is recorded by rowExists.
func (s *Service) settled(ctx context.Context, lease *idem.Lease, status idem.Status, charged *Charge, err error) (Outcome, error) {
	switch {
	case errors.Is(err, idem.ErrWriteCondition) && charged != nil:
		outcome, _, err := s.rowExists(ctx, lease, *charged)
		if outcome == OutcomeCreated {
			outcome = OutcomeResolved
		}
		return outcome, err
	case err != nil:
		return "", err
	case status == idem.StatusReleased:
		return OutcomeReleased, nil
	case status == idem.StatusSucceeded:
		return OutcomeResolved, nil
	default:
		return OutcomeResolvedDec, nil
	}
}

// backoff is how long a key waits after its n-th failed attempt.
func (s *Service) backoff(attempts int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempts && d < s.cfg.RetryCap; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryCap)
}
