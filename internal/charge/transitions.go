package charge

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Capturing and cancelling an authorization set a state; they append
// nothing. So they need no idempotency key and no record: the charge's row
// is the record. A conditional update moves it from StatusRequiresCapture
// to StatusCapturing (or StatusCanceling) with an attempt deadline, before
// the provider is asked. Only the request that made that move asks; any
// other waits for its outcome. One proven not made frees the row, and
// the other makes its own. A repeat of a settled one finds the state it
// set. The provider call carries a reference derived from the
// charge and the operation, so the provider deduplicates a re-sent one.
// A move left unsettled (a crash, a lost answer) is settled by reading
// the provider's state of the payment, never by a timer.

// TransitionOperation scopes the reconciler's keys for a charge whose
// capture or cancel is unsettled: tenant#settle-charge#<charge id>. No
// record is stored under it.
const TransitionOperation = "settle-charge"

// The charges table's sparse index of moves in flight.
const (
	IndexTransitions      = "transitions"
	AttrTransitionShard   = "transition_shard"
	AttrAttemptDeadline   = "attempt_deadline"
	attrTransitionAmount  = "transition_amount"
	attrTransitionWaited  = "transition_waited"
	attrTransitionAttempt = "transition_attempt"
	transitionShard       = "0" // one shard: moves in flight are few
)

// transitionLease is how long a move's attempt may take before another
// request or the reconciler may settle it from the provider's state.
const transitionLease = 30 * time.Second

// pending is a move in flight, as its row holds it. waited: its deadline
// was moved past the provider's settle window, which is then not waited
// for again.
type pending struct {
	amount   int64
	deadline time.Time
	waited   bool
	// attempt names the move's attempt, unchanged when its deadline is
	// postponed: a revert is proven of it alone. Empty on rows moved
	// before attempts were named.
	attempt string
}

// move is a state-setting operation: from its start state, through its
// transitional one, to its end.
type move struct {
	name, via, to string
	// done answers the move made, now or before.
	done Outcome
	call func(Provider, context.Context, provider.PaymentRequest) (provider.Result, error)
}

var (
	capture = move{"capture", StatusCapturing, StatusSucceeded, OutcomeCaptured, Provider.Capture}
	cancel  = move{"cancel", StatusCanceling, StatusCanceled, OutcomeCanceled, Provider.Cancel}
)

// TransitionReference is the provider reference of a charge's capture or
// cancel: one per charge and operation, so every attempt is deduplicated.
func TransitionReference(chargeID, operation string) string {
	k, _ := idem.NewKey("charge", operation, chargeID) // valid by construction
	return derive("mv_", "transition-reference", k, time.UnixMilli(0), 32)
}

// ErrAmountAboveAuthorized: a capture asked for more than the
// authorization holds.
var ErrAmountAboveAuthorized = &InvalidError{"amount", "more than the authorized amount"}

// Capture captures amount (zero: all) of tenant's authorized charge id.
// A repeat of a settled capture with the same amount or none answers the
// charge; one while it runs waits for it, up to InflightWait.
func (s *Service) Capture(ctx context.Context, tenant, id string, amount int64) (Result, error) {
	return s.transit(ctx, tenant, id, capture, amount)
}

// Cancel cancels tenant's authorized charge id, releasing the hold. A
// repeat answers the canceled charge.
func (s *Service) Cancel(ctx context.Context, tenant, id string) (Result, error) {
	return s.transit(ctx, tenant, id, cancel, 0)
}

// transit runs m on tenant's charge id.
func (s *Service) transit(ctx context.Context, tenant, id string, m move, amount int64) (Result, error) {
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
	// The wait is real time, as idem.Do's: a test's frozen clock must not
	// make it endless.
	until := s.providerEnd(ctx, time.Now().Add(s.cfg.InflightWait))
	asked := false // the provider's state, once per request: asking again would spin
	mine := ""     // the attempt this request began, if it began one
	for {
		c, found, err := s.cfg.Rows.Get(ctx, tenant, id)
		if res, done, err := unread(found, err); done {
			return a.missing(res, s.cfg.Clock()), err
		}
		now := s.cfg.Clock()
		if res := a.unreplicated(c, now); res != nil {
			return *res, nil
		}
		switch {
		case mine != "" && c.Status == m.via && c.transition.attempt == mine:
			// This request's own move, its answer lost: it is not awaited.
			return s.send(ctx, c, m)
		case c.Status == m.to && (amount == 0 || amount == c.Money.Amount):
			return Result{Outcome: m.done, Charge: &c}, nil
		case c.Status == StatusCapturing || c.Status == StatusCanceling:
			// A move in flight is awaited. Made, it is this request's
			// answer. Proven not made, the row is back in
			// StatusRequiresCapture, and this request makes its own.
			if !now.Before(c.transition.deadline) && !asked {
				// Its attempt's time is up: settled from the provider's
				// state, then read again. A provider that cannot say
				// leaves it unknown for now.
				asked = true
				switch out, err := s.settleMove(ctx, c); {
				case out == OutcomeDeferred || transient(err):
					return Result{Outcome: OutcomeAmbiguous, RetryAt: now.Add(time.Second)}, nil
				case err != nil:
					return Result{}, err
				}
				continue
			}
			if left := time.Until(until); left > 0 {
				if err := pause(ctx, min(notifyPause, left)); err != nil {
					return Result{}, err
				}
				continue
			}
			return Result{Outcome: OutcomeConflict, RetryAt: c.transition.deadline}, nil
		case c.Status != StatusRequiresCapture:
			return Result{Outcome: OutcomeStateConflict, Charge: &c}, nil
		case amount > c.Money.Amount:
			return Result{Outcome: OutcomeInvalid, Charge: &c}, ErrAmountAboveAuthorized
		}
		// amount stays as the request named it: none matches a capture
		// another request makes first.
		want := amount
		if want == 0 {
			want = c.Money.Amount
		}
		if err := s.prepare(ctx); err != nil {
			return Result{}, err // before the move: nothing written
		}
		deadline := now.Add(transitionLease)
		mine = rand.Text()
		switch err := s.cfg.Rows.begin(ctx, c, m, pending{amount: want, deadline: deadline, attempt: mine}); {
		case errors.Is(err, errMoved):
			continue // moved first by another request, or by this one
		case errors.Is(err, errMoveUnknown):
			// Moved, maybe, with nothing sent: the provider's state settles it.
			s.cfg.Logger.WarnContext(ctx, "charge: "+m.name+" move unknown; queued for reconciliation", "charge_id", c.ID, "cause", ErrorClass(err))
			s.enqueue(ctx, transitionKey(c), deadline)
			return Result{Outcome: OutcomeAmbiguous, RetryAt: deadline}, nil
		case transient(err):
			return Result{Outcome: OutcomeBusy}, nil
		case err != nil:
			return Result{}, err
		}
		c.Status, c.transition = m.via, pending{amount: want, deadline: deadline, attempt: mine}
		return s.send(ctx, c, m)
	}
}

// send asks the provider to make c's move, begun by this request, and
// settles the row as it answers.
func (s *Service) send(ctx context.Context, c Charge, m move) (Result, error) {
	pctx, cancelCall := context.WithDeadline(ctx, s.providerEnd(ctx, c.transition.deadline.Add(-s.cfg.CommitReserve)))
	req := provider.PaymentRequest{Reference: TransitionReference(c.ID, m.name), Charge: c.ProviderChargeID, Amount: c.transition.amount}
	res, err := s.ask(pctx, "provider."+m.name, func(ctx context.Context) (provider.Result, error) { return m.call(s.cfg.Provider, ctx, req) })
	cancelCall()
	switch {
	case errors.Is(err, provider.ErrRejected):
		s.revert(ctx, c)
		return Result{Outcome: OutcomeRejected}, nil
	case errors.Is(err, provider.ErrUnavailable):
		s.revert(ctx, c)
		return Result{Outcome: OutcomeUnavailable}, nil
	case err != nil:
		until := c.transition.deadline.Add(s.cfg.Provider.Guarantees().SettleWindow)
		s.cfg.Logger.WarnContext(ctx, "charge: "+m.name+" outcome unknown; queued for reconciliation", "charge_id", c.ID, "cause", ErrorClass(err))
		s.enqueue(ctx, transitionKey(c), until)
		return Result{Outcome: OutcomeAmbiguous, RetryAt: c.transition.deadline}, nil
	}
	after, err := s.applyState(ctx, c, res)
	if err != nil {
		s.enqueue(ctx, transitionKey(c), c.transition.deadline)
		return Result{Outcome: OutcomeAmbiguous, RetryAt: c.transition.deadline}, nil
	}
	if after.Status != m.to {
		return Result{Outcome: OutcomeStateConflict, Charge: &after}, nil
	}
	return Result{Outcome: m.done, Charge: &after}, nil
}

// revert moves c back from its move, which the provider proved it did not
// make. If that fails the move stays, for the reconciler to settle from
// the provider's state.
func (s *Service) revert(ctx context.Context, c Charge) {
	if _, err := s.cfg.Rows.settle(ctx, c, StatusRequiresCapture, 0); err != nil && !errors.Is(err, errMoved) {
		s.cfg.Logger.WarnContext(ctx, "charge: reverting a move failed; left for the reconciler", "charge_id", c.ID, "error_class", ErrorClass(err))
		s.enqueue(ctx, transitionKey(c), c.transition.deadline)
	}
}

// applyState settles c's move as the provider's state res says, and
// returns the charge as it now is.
func (s *Service) applyState(ctx context.Context, c Charge, res provider.Result) (Charge, error) {
	var to string
	switch res.Status {
	case provider.StatusCharged:
		to = StatusSucceeded
	case provider.StatusCanceled:
		to = StatusCanceled
	case provider.StatusAuthorized:
		to = StatusRequiresCapture
	default:
		return Charge{}, fmt.Errorf("charge: unexpected provider state %q", res.Status)
	}
	after, err := s.cfg.Rows.settle(ctx, c, to, res.Amount)
	if errors.Is(err, errMoved) {
		// Settled meanwhile, by another request or the reconciler.
		after, _, err = s.cfg.Rows.Get(ctx, c.Tenant, c.ID)
	}
	return after, err
}

// settleMove settles a move whose attempt's time is up, from the
// provider's state of the payment. A payment still authorized is the
// move not made only once the provider's settle window has passed: a
// request in flight may still land before. Until then it waits, and so
// does the move.
func (s *Service) settleMove(ctx context.Context, c Charge) (Outcome, error) {
	if err := s.prepare(ctx); err != nil {
		return "", err
	}
	res, err := s.cfg.Provider.State(ctx, c.ProviderChargeID)
	if err != nil {
		return OutcomeDeferred, nil
	}
	if res.Status == provider.StatusAuthorized && !c.transition.waited {
		// Counted from the attempt's own deadline, once: a later visit
		// finds the window waited out.
		if settled := c.transition.deadline.Add(s.cfg.Provider.Guarantees().SettleWindow); s.cfg.Clock().Before(settled) {
			return OutcomeNotSettled, s.cfg.Rows.postpone(ctx, c, settled)
		}
	}
	if _, err := s.applyState(ctx, c, res); err != nil {
		return "", err
	}
	switch res.Status {
	case provider.StatusAuthorized:
		return OutcomeReleased, nil
	case provider.StatusCanceled:
		return OutcomeResolvedCanceled, nil
	}
	return OutcomeResolvedCaptured, nil
}

// reconcileMove is Reconcile for a key of TransitionOperation.
func (s *Service) reconcileMove(ctx context.Context, key idem.Key, a admitted) (Outcome, error) {
	c, found, err := s.cfg.Rows.Get(ctx, key.Tenant(), key.ClientKey())
	switch {
	case err != nil:
		return "", err
	case !found:
		return OutcomeNothingToDo, nil
	case a.unreplicated(c, s.cfg.Clock()) != nil:
		return OutcomeFailoverPending, nil
	case c.Status != StatusCapturing && c.Status != StatusCanceling:
		return OutcomeNothingToDo, nil
	case s.cfg.Clock().Before(c.transition.deadline):
		return OutcomeStillLeased, nil
	}
	return s.settleMove(ctx, c)
}

// transitionKey is the reconciler's key for c's move.
func transitionKey(c Charge) idem.Key {
	k, _ := idem.NewKey(c.Tenant, TransitionOperation, c.ID) // the row's tenant and id are valid
	return k
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("charge: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// errMoved: the row was not in the state a conditional move expected.
// errMoveUnknown: the write of a move failed, and may have landed.
var (
	errMoved       = errors.New("charge: the charge moved meanwhile")
	errMoveUnknown = errors.New("charge: a move's write failed, and may have landed")
)

// begin moves c from StatusRequiresCapture into m's transitional state,
// as attempt p, only if it is still there.
func (r *Rows) begin(ctx context.Context, c Charge, m move, p pending) error {
	var tries dynamostore.Attempts
	err := r.update(ctx, c, "SET #status = :via, #amount = :amount, #deadline = :deadline, #shard = :shard, #attempt = :attempt",
		"#status = :from", map[string]types.AttributeValue{
			":via": str(m.via), ":from": str(StatusRequiresCapture), ":amount": number(p.amount),
			":deadline": number(p.deadline.UnixMilli()), ":shard": str(transitionShard), ":attempt": str(p.attempt),
		}, tries.Option)
	if err != nil && !errors.Is(err, errMoved) && !tries.Refused() {
		return fmt.Errorf("%w: %w", errMoveUnknown, err)
	}
	return err
}

// settle ends c's move in status to, if the row is still in that move;
// captured, if not zero, is the amount the provider captured.
func (r *Rows) settle(ctx context.Context, c Charge, to string, captured int64) (Charge, error) {
	set, cond := "SET #status = :to", "#status = :via"
	values := map[string]types.AttributeValue{":to": str(to), ":via": str(c.Status)}
	if to == StatusSucceeded && captured > 0 {
		set += ", #money = :captured"
		values[":captured"] = number(captured)
	}
	switch {
	case to != StatusRequiresCapture:
	case c.transition.attempt != "":
		// "Not made" is proven of one attempt only: a late revert leaves
		// a newer move alone.
		cond += " AND #attempt = :attempt"
		values[":attempt"] = str(c.transition.attempt)
	default:
		// A move begun before attempts were named: its deadline stands in.
		cond += " AND #deadline = :deadline"
		values[":deadline"] = number(c.transition.deadline.UnixMilli())
	}
	if err := r.update(ctx, c, set+" REMOVE #amount, #deadline, #shard, #waited, #attempt", cond, values); err != nil {
		return Charge{}, err
	}
	c.Status, c.transition = to, pending{}
	if to == StatusSucceeded && captured > 0 {
		c.Money.Amount = captured
	}
	return c, nil
}

// postpone moves c's attempt deadline to until, the end of the provider's
// settle window, so the sweeper finds it again then.
func (r *Rows) postpone(ctx context.Context, c Charge, until time.Time) error {
	err := r.update(ctx, c, "SET #deadline = :until, #waited = :waited", "#status = :via AND #deadline = :deadline", map[string]types.AttributeValue{
		":until": number(until.UnixMilli()), ":via": str(c.Status), ":deadline": number(c.transition.deadline.UnixMilli()),
		":waited": &types.AttributeValueMemberBOOL{Value: true},
	})
	if errors.Is(err, errMoved) {
		return nil
	}
	return err
}

// moveNames are the attribute names a move's expressions use.
var moveNames = map[string]string{
	"#id": AttrID, "#status": "status", "#amount": attrTransitionAmount, "#deadline": AttrAttemptDeadline,
	"#shard": AttrTransitionShard, "#money": "amount", "#waited": attrTransitionWaited, "#attempt": attrTransitionAttempt,
}

// update applies expr to c's row if cond holds, else errMoved.
func (r *Rows) update(ctx context.Context, c Charge, expr, cond string, values map[string]types.AttributeValue, optFns ...func(*dynamodb.Options)) error {
	cond = "attribute_exists(#id) AND " + cond
	names := map[string]string{}
	for name, attr := range moveNames {
		// DynamoDB refuses a name the expressions do not use.
		if strings.Contains(expr+cond, name) {
			names[name] = attr
		}
	}
	_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 r.tableName,
		Key:                       rowKey(c.Tenant, c.ID),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, optFns...)
	if _, moved := errors.AsType[*types.ConditionalCheckFailedException](err); moved {
		return errMoved
	}
	if err != nil {
		return fmt.Errorf("charge: move: %w", dynamostore.AsUnavailable(err))
	}
	return nil
}

// Shards is the number of shards of the index of moves in flight.
func (r *Rows) Shards() int { return 1 }

// StuckLeases yields the moves whose attempt deadline passed before
// before, as records of TransitionOperation for the sweeper.
func (r *Rows) StuckLeases(ctx context.Context, _ int, before time.Time) iter.Seq2[idem.Record, error] {
	return func(yield func(idem.Record, error) bool) {
		in := &dynamodb.QueryInput{
			TableName:                r.tableName,
			IndexName:                aws.String(IndexTransitions),
			KeyConditionExpression:   aws.String("#shard = :shard AND #deadline < :before"),
			ExpressionAttributeNames: map[string]string{"#shard": AttrTransitionShard, "#deadline": AttrAttemptDeadline},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":shard": str(transitionShard), ":before": number(before.UnixMilli()),
			},
		}
		for {
			out, err := r.db.Query(ctx, in)
			if err != nil {
				yield(idem.Record{}, fmt.Errorf("charge: moves in flight: %w", dynamostore.AsUnavailable(err)))
				return
			}
			for _, item := range out.Items {
				if !yield(movedRecord(item)) {
					return
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				return
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
}

// movedRecord is an index item as the sweeper reads a stuck lease.
func movedRecord(item map[string]types.AttributeValue) (idem.Record, error) {
	tenant, _ := item[AttrTenant].(*types.AttributeValueMemberS)
	id, _ := item[AttrID].(*types.AttributeValueMemberS)
	deadline, _ := item[AttrAttemptDeadline].(*types.AttributeValueMemberN)
	if tenant == nil || id == nil || deadline == nil {
		return idem.Record{}, fmt.Errorf("%w: a move in flight without its keys", idem.ErrUnreadableRecord)
	}
	ms, err := strconv.ParseInt(deadline.Value, 10, 64)
	k, kerr := idem.NewKey(tenant.Value, TransitionOperation, id.Value)
	if err != nil || kerr != nil {
		return idem.Record{}, fmt.Errorf("%w: a move in flight", idem.ErrUnreadableRecord)
	}
	return idem.Record{Key: k, Status: idem.StatusInFlight, LeaseExpiresAt: time.UnixMilli(ms)}, nil
}

// ParseCaptureBody reads a capture's body: empty, {}, or {"amount": n}.
// Zero means all that the authorization holds.
func ParseCaptureBody(body []byte) (int64, error) {
	if len(body) > MaxBodyBytes {
		return 0, &BodyError{reasonTooLarge}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return 0, nil
	}
	canonical, err := idem.CanonicalJSON(body)
	if err != nil {
		return 0, &BodyError{reasonJSON}
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(canonical, &fields) != nil || fields == nil {
		return 0, &BodyError{reasonCaptureShape}
	}
	var amount int64
	for name, value := range fields {
		if c := value[0]; name != "amount" || c != '-' && (c < '0' || c > '9') {
			return 0, &BodyError{reasonCaptureShape}
		}
		if amount, err = ParseAmount(json.Number(value)); err != nil {
			return 0, err
		}
		if amount < MinAmount || amount > MaxAmount {
			return 0, &InvalidError{"amount", fmt.Sprintf("must be between %d and %d minor units", MinAmount, MaxAmount)}
		}
	}
	return amount, nil
}

// reasonCaptureShape is the *BodyError of a capture body of another shape.
const reasonCaptureShape = "The body must be empty or an object with an optional number amount, and no other fields."
