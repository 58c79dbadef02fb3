package charge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Provider charges cards, deduplicating by reference, and looks charges up.
type Provider interface {
	Charge(ctx context.Context, req provider.ChargeRequest) (provider.Result, error)
	Lookup(ctx context.Context, reference string) (provider.Result, error)
}

// Reconciler queues a key whose outcome is unknown for reconciliation once
// its lease has run out.
type Reconciler interface {
	EnqueueReconcile(ctx context.Context, key idem.Key, delay time.Duration) error
}

// ChargesReader reads the charges table.
type ChargesReader interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
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
	OutcomeAmbiguous   Outcome = "ambiguous"
	OutcomeInvalid     Outcome = "invalid"
	OutcomeFound       Outcome = "found"
	OutcomeNotFound    Outcome = "not_found"
	OutcomeError       Outcome = "error"
	// Reconciliation outcomes.
	OutcomeNothingToDo Outcome = "nothing_to_do"
	OutcomeStillLeased Outcome = "still_leased"
	OutcomeResolved    Outcome = "resolved_charged"
	OutcomeResolvedDec Outcome = "resolved_declined"
	OutcomeReleased    Outcome = "released"
)

// Config holds a Service's dependencies. Clock defaults to time.Now.
type Config struct {
	Store        *idem.Store
	Charges      ChargesReader
	ChargesTable string
	Provider     Provider
	Reconciler   Reconciler    // may be nil in the reconcile function
	InflightWait time.Duration // how long Create waits for an in-flight twin
	Clock        func() time.Time
	Logger       *slog.Logger
}

// Service creates, reads and reconciles charges.
type Service struct{ cfg Config }

// NewService checks the dependencies and returns a Service.
func NewService(cfg Config) (*Service, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("charge: nil idempotency store")
	case cfg.Charges == nil || cfg.ChargesTable == "":
		return nil, errors.New("charge: no charges table")
	case cfg.Provider == nil:
		return nil, errors.New("charge: nil provider")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}, nil
}

// Result is the answer to a request: the response to send, what happened,
// and until when the key deduplicates (zero when nothing is stored).
type Result struct {
	Response     idem.Response
	Outcome      Outcome
	Replayed     bool
	KeyExpiresAt time.Time
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
		resp := problem(ProblemInProgress, "Another request with this key is being processed. Retry after the indicated time.")
		resp.Headers["Retry-After"] = strconv.Itoa(retryAfter(s.cfg.Clock(), inflight.LeaseExpiresAt))
		return Result{Response: resp, Outcome: OutcomeConflict, KeyExpiresAt: inflight.RecordExpiresAt}, nil
	case errors.As(err, &mismatch):
		return Result{Response: problem(ProblemKeyReused, "This Idempotency-Key was used with a different request body. Use a new key for a new request."), Outcome: OutcomeMismatch, KeyExpiresAt: mismatch.RecordExpiresAt}, nil
	case err != nil:
		return Result{}, err
	case begun.Replay != nil:
		return Result{Response: *begun.Replay, Outcome: OutcomeReplayed, Replayed: true, KeyExpiresAt: begun.RecordExpiresAt}, nil
	}
	lease := begun.Lease
	res, err := s.cfg.Provider.Charge(ctx, provider.ChargeRequest{
		Reference: ProviderReference(key), Amount: req.Money.Amount, Currency: req.Money.Currency, Source: req.Source,
	})
	switch {
	case errors.Is(err, provider.ErrUnavailable) || errors.Is(err, provider.ErrRejected):
		// The provider did not act: the key goes back to ABSENT.
		if rerr := s.cfg.Store.Release(ctx, lease); rerr != nil {
			return s.ambiguous(ctx, lease, rerr)
		}
		if errors.Is(err, provider.ErrRejected) {
			return Result{}, fmt.Errorf("charge: provider rejected the request: %w", err)
		}
		resp := problem(ProblemUnavailable, "The card provider is unavailable. Nothing was charged; retry with the same key.")
		resp.Headers["Retry-After"] = "2"
		return Result{Response: resp, Outcome: OutcomeUnavailable}, nil
	case err != nil:
		return s.ambiguous(ctx, lease, err)
	}
	outcome, resp, err := s.complete(ctx, lease, res)
	if err != nil {
		return s.ambiguous(ctx, lease, err)
	}
	return Result{Response: resp, Outcome: outcome, KeyExpiresAt: lease.RecordExpiresAt}, nil
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

// ambiguous answers when the charge may have happened but the record could
// not be completed: the record stays IN_FLIGHT and is queued for the
// reconciler once its lease has run out.
func (s *Service) ambiguous(ctx context.Context, lease *idem.Lease, cause error) (Result, error) {
	delay := lease.ExpiresAt.Sub(s.cfg.Clock())
	s.cfg.Logger.WarnContext(ctx, "charge outcome unknown; queued for reconciliation",
		"key_hash", KeyHash(lease.Key), "cause", errorClass(cause), "delay_ms", delay.Milliseconds())
	if s.cfg.Reconciler != nil {
		if err := s.cfg.Reconciler.EnqueueReconcile(ctx, lease.Key, delay); err != nil {
			// The sweeper will find the lease once it expires.
			s.cfg.Logger.ErrorContext(ctx, "enqueue reconcile failed", "key_hash", KeyHash(lease.Key), "error", err.Error())
		}
	}
	resp := problem(ProblemOutcomePending, "The outcome is not known yet. Retry with the same key; you will not be charged twice.")
	resp.Headers["Retry-After"] = strconv.Itoa(retryAfter(s.cfg.Clock(), lease.ExpiresAt))
	return Result{Response: resp, Outcome: OutcomeAmbiguous, KeyExpiresAt: lease.RecordExpiresAt}, nil
}

// errorClass names an error for logs without its text, which may carry
// request details.
func errorClass(err error) string {
	switch {
	case errors.Is(err, provider.ErrAmbiguous):
		return "provider_ambiguous"
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	default:
		return "store_error"
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
			ID: ChargeID(lease.Key), Tenant: lease.Key.Tenant(),
			Money:       Money{Amount: in.Amount, Currency: in.Currency},
			Description: in.Description, ProviderReference: ProviderReference(lease.Key),
			ProviderChargeID: res.ChargeID, IdempotencyKey: CommandID(lease.Key.ClientKey()),
			CreatedAt: lease.CreatedAt,
		}
		resp := createdResponse(c)
		if err := s.cfg.Store.Commit(ctx, lease, resp, putRow(s.cfg.ChargesTable, c)); err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeCreated, resp, nil
	case provider.StatusDeclined:
		resp := declinedResponse(res.DeclineCode)
		if err := s.cfg.Store.Fail(ctx, lease, resp); err != nil {
			return "", idem.Response{}, err
		}
		return OutcomeDeclined, resp, nil
	default:
		return "", idem.Response{}, fmt.Errorf("charge: unexpected provider status %q", res.Status)
	}
}

// Get returns tenant's charge id. Another tenant's charge is not found.
func (s *Service) Get(ctx context.Context, tenant, id string) (Result, error) {
	out, err := s.cfg.Charges.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.cfg.ChargesTable),
		Key:       map[string]types.AttributeValue{AttrTenant: attrS(tenant), AttrID: attrS(id)},
	})
	if err != nil {
		return Result{}, fmt.Errorf("charge: get: %w", err)
	}
	if len(out.Item) == 0 {
		return Result{Response: problem(ProblemNotFound, ""), Outcome: OutcomeNotFound}, nil
	}
	c, err := rowCharge(out.Item)
	if err != nil {
		return Result{}, fmt.Errorf("charge: stored row: %w", err)
	}
	return Result{Response: idem.Response{Status: 200, Headers: map[string]string{"Content-Type": ContentTypeJSON}, Body: c.body()}, Outcome: OutcomeFound}, nil
}

// Reconcile resolves a command whose first attempt may have died between
// charging and recording: if its lease has run out, it takes the lease over
// and asks the provider what happened to the command's reference. A charge
// is committed with the exact 201 the API would have answered; a decline is
// stored as the 402; nothing at all releases the key. A provider error is
// returned, to be retried; the lease simply runs out again.
func (s *Service) Reconcile(ctx context.Context, key idem.Key) (Outcome, error) {
	rec, err := s.cfg.Store.Get(ctx, key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return OutcomeNothingToDo, nil
	case err != nil:
		return "", err
	case rec.Status.Terminal():
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
	res, err := s.cfg.Provider.Lookup(ctx, ProviderReference(key))
	if err != nil {
		return "", fmt.Errorf("charge: reconcile lookup: %w", err)
	}
	if res.Status == provider.StatusNotFound {
		if err := s.cfg.Store.Release(ctx, lease); err != nil {
			return "", err
		}
		return OutcomeReleased, nil
	}
	outcome, _, err := s.complete(ctx, lease, res)
	if err != nil {
		return "", err
	}
	if outcome == OutcomeDeclined {
		return OutcomeResolvedDec, nil
	}
	return OutcomeResolved, nil
}
