package charge

import (
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

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
	// OutcomeCaptured and OutcomeCanceled: a capture or cancel answers
	// the charge in the state it set, by this request or an earlier one.
	OutcomeCaptured Outcome = "captured"
	OutcomeCanceled Outcome = "canceled"
	OutcomeError    Outcome = "error"
	// OutcomeChargeConflict: the charge row conflicts with the provider's
	// answer; stored as a permanent failure.
	OutcomeChargeConflict Outcome = "charge_conflict"
	// OutcomeStateConflict: the charge is in no state for the request
	// (a refund of a charge not captured); nothing is stored.
	OutcomeStateConflict Outcome = "state_conflict"
	// OutcomeRefundExceeds: the refund is more than settled refunds
	// leave; stored, final for its key. OutcomeRefundHeld: more than
	// refunds in flight leave; nothing stored, as they may yet fail.
	OutcomeRefundExceeds Outcome = "refund_exceeds"
	OutcomeRefundHeld    Outcome = "refund_held"
	// OutcomeRefundLimit: the charge's refunds reach the limit; stored,
	// final for its key. OutcomeRefundLimitHeld: refunds in flight fill
	// it; nothing stored, as they may yet fail.
	OutcomeRefundLimit     Outcome = "refund_limit"
	OutcomeRefundLimitHeld Outcome = "refund_limit_held"
	// Reconciliation outcomes.
	OutcomeNothingToDo Outcome = "nothing_to_do"
	OutcomeStillLeased Outcome = "still_leased"
	OutcomeResolved    Outcome = "resolved_charged"
	// OutcomeResolvedRefund: the reconciler recorded a refund the
	// provider made.
	OutcomeResolvedRefund Outcome = "resolved_refunded"
	OutcomeResolvedDec    Outcome = "resolved_declined"
	OutcomeReleased       Outcome = "released"
	// OutcomeResolvedCaptured and OutcomeResolvedCanceled: the reconciler
	// settled a capture or cancel as the provider's state of the payment
	// says. A capture may settle canceled: the authorization expired.
	OutcomeResolvedCaptured Outcome = "resolved_captured"
	OutcomeResolvedCanceled Outcome = "resolved_canceled"
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
	// OutcomeWrongRegion: another Region serves the tenant; nothing
	// was done. OutcomeFailoverPending: another Region may hold
	// unreplicated writes of the command or charge. Nothing was
	// done. A retry finds the outcome once they replicate.
	OutcomeWrongRegion     Outcome = "wrong_region"
	OutcomeFailoverPending Outcome = "failover_pending"
)

// metricOutcomes name the outcomes in the metrics' vocabulary, for every
// function that reports them (the charge API, the intake, the reconciler).
var metricOutcomes = map[Outcome]metrics.Outcome{
	OutcomeCreated:        metrics.OutcomeCreated,
	OutcomeReplayed:       metrics.OutcomeReplayed,
	OutcomeConflict:       metrics.OutcomeConflict,
	OutcomeMismatch:       metrics.OutcomeMismatch,
	OutcomeDeclined:       metrics.OutcomeDeclined,
	OutcomeUnavailable:    metrics.OutcomeUnavailable,
	OutcomeBusy:           metrics.OutcomeUnavailable,
	OutcomeRejected:       metrics.OutcomeRejected,
	OutcomeAmbiguous:      metrics.OutcomePending,
	OutcomeLeaseLost:      metrics.OutcomeLeaseLost,
	OutcomeInvalid:        metrics.OutcomeInvalid,
	OutcomeNotFound:       metrics.OutcomeNotFound,
	OutcomeCaptured:       metrics.OutcomeCaptured,
	OutcomeCanceled:       metrics.OutcomeCanceled,
	OutcomeChargeConflict: metrics.OutcomeError,
	OutcomeStateConflict:  metrics.OutcomeStateConflict,
	OutcomeRefundExceeds:  metrics.OutcomeRefundExceeds,
	// Refunds in flight hold the amount: like a conflict, a retry may
	// find it settled.
	OutcomeRefundHeld:       metrics.OutcomeConflict,
	OutcomeRefundLimit:      metrics.OutcomeRefundLimit,
	OutcomeRefundLimitHeld:  metrics.OutcomeConflict,
	OutcomeError:            metrics.OutcomeError,
	OutcomeResolved:         metrics.OutcomeResolvedCharged,
	OutcomeResolvedRefund:   metrics.OutcomeResolvedRefunded,
	OutcomeResolvedDec:      metrics.OutcomeResolvedDeclined,
	OutcomeReleased:         metrics.OutcomeReleased,
	OutcomeResolvedCaptured: metrics.OutcomeResolvedCaptured,
	OutcomeResolvedCanceled: metrics.OutcomeResolvedCanceled,
	OutcomeStillLeased:      metrics.OutcomeStillLeased,
	OutcomeNothingToDo:      metrics.OutcomeNothingToDo,
	OutcomeNotSettled:       metrics.OutcomeNotSettled,
	OutcomeDeferred:         metrics.OutcomeDeferred,
	OutcomeParked:           metrics.OutcomeParked,
	OutcomeWrongRegion:      metrics.OutcomeWrongRegion,
	OutcomeFailoverPending:  metrics.OutcomeFailoverPending,
}

// Metric is o's name in the metrics (the Outcome dimension of Requests).
func (o Outcome) Metric() metrics.Outcome { return metricOutcomes[o] }

// metricOperations name the operations keys are scoped to in the
// metrics' vocabulary.
var metricOperations = map[string]metrics.Operation{
	Operation:             metrics.OperationCharge,
	RefundOperation:       metrics.OperationRefund,
	NotificationOperation: metrics.OperationEvent,
	TransitionOperation:   metrics.OperationSettle,
}

// MetricOperation is the Operation dimension of the command key names:
// OperationNone for the zero key (a command refused before its key was
// read) or one of no operation the service runs, so that a forged key
// never adds a value.
func MetricOperation(key idem.Key) metrics.Operation {
	if op, ok := metricOperations[key.Operation()]; ok {
		return op
	}
	return metrics.OperationNone
}
