package charge

import (
	"strings"

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
	// OutcomeLeaseLost: the outcome is unknown. The request's lease was
	// taken over before it could record it.
	OutcomeLeaseLost Outcome = "lease_lost"
	OutcomeInvalid   Outcome = "invalid"
	OutcomeFound     Outcome = "found"
	OutcomeNotFound  Outcome = "not_found"
	// OutcomeCaptured and OutcomeCanceled: a capture or cancel answers the
	// charge in the state it set. This request set it, or an earlier one.
	OutcomeCaptured Outcome = "captured"
	OutcomeCanceled Outcome = "canceled"
	OutcomeError    Outcome = "error"
	// OutcomeChargeConflict: the charge row conflicts with the provider's
	// answer; stored as a permanent failure.
	OutcomeChargeConflict Outcome = "charge_conflict"
	// OutcomeStateConflict: the charge is in no state for the request, as
	// a refund of a charge not captured. Nothing is stored.
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
	OutcomeNothingToDo     Outcome = "nothing_to_do"
	OutcomeStillLeased     Outcome = "still_leased"
	OutcomeResolvedCharged Outcome = "resolved_charged"
	// OutcomeResolvedRefunded: the reconciler recorded a refund the
	// provider made.
	OutcomeResolvedRefunded Outcome = "resolved_refunded"
	OutcomeResolvedDeclined Outcome = "resolved_declined"
	OutcomeReleased         Outcome = "released"
	// OutcomeResolvedCaptured and OutcomeResolvedCanceled: the reconciler
	// settled a capture or cancel as the provider's state of the payment
	// says. A capture may settle canceled: the authorization expired.
	OutcomeResolvedCaptured Outcome = "resolved_captured"
	OutcomeResolvedCanceled Outcome = "resolved_canceled"
	// OutcomeNotSettled: the provider has no charge for the reference yet,
	// but its settle window has not passed. The key is looked at again
	// when it has.
	OutcomeNotSettled Outcome = "not_settled"
	// OutcomeDeferred: the provider could not be asked. The key is looked
	// at again after a backoff that grows with its attempts.
	OutcomeDeferred Outcome = "deferred"
	// OutcomeParked: the provider has no charge for a command older than
	// its dedup window. Releasing it would let a retry send its reference
	// again, which the provider would not deduplicate. So it stays
	// IN_FLIGHT, comes back every RetryCap, and waits for an operator.
	OutcomeParked Outcome = "parked"
	// OutcomeWrongRegion: another Region serves the tenant; nothing
	// was done. OutcomeFailoverPending: another Region may hold
	// unreplicated writes of the command or charge. Nothing was
	// done. A retry finds the outcome once they replicate.
	OutcomeWrongRegion     Outcome = "wrong_region"
	OutcomeFailoverPending Outcome = "failover_pending"
)

// Metric is o's name in the metrics, the Outcome dimension of Requests. It
// is o's own, hyphenated, unless the metrics count it under another.
func (o Outcome) Metric() metrics.Outcome {
	if m, ok := countedAs[o]; ok {
		return m
	}
	return metrics.Outcome(strings.ReplaceAll(string(o), "_", "-"))
}

// countedAs are the outcomes the metrics count under another name.
var countedAs = map[Outcome]metrics.Outcome{
	OutcomeBusy:           metrics.OutcomeUnavailable,
	OutcomeAmbiguous:      metrics.OutcomePending,
	OutcomeChargeConflict: metrics.OutcomeError,
	// Refunds in flight hold the amount or the place. Like a conflict,
	// a retry may find it settled.
	OutcomeRefundHeld:      metrics.OutcomeConflict,
	OutcomeRefundLimitHeld: metrics.OutcomeConflict,
	// A read that found its row is no request the metrics count.
	OutcomeFound: "",
}

// metricOperations name the operations keys are scoped to in the
// metrics' vocabulary.
var metricOperations = map[string]metrics.Operation{
	ChargeOperation:       metrics.OperationCharge,
	RefundOperation:       metrics.OperationRefund,
	NotificationOperation: metrics.OperationEvent,
	TransitionOperation:   metrics.OperationSettle,
}

// MetricOperation is the Operation dimension of the command key names. The
// zero key, of a command refused before its key was read, is
// OperationNone. So is a key of no operation the service runs: a forged
// key never adds a value.
func MetricOperation(key idem.Key) metrics.Operation {
	if op, ok := metricOperations[key.Operation()]; ok {
		return op
	}
	return metrics.OperationNone
}
