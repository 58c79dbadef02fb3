package metrics

import "slices"

// Namespace is the CloudWatch namespace of every metric.
const Namespace = "chargeonce"

// Dimension names. These three are the only dimensions.
const (
	DimFunction  = "Function"
	DimOperation = "Operation"
	DimOutcome   = "Outcome"
)

// Function dimension values: the functions that emit metrics.
const (
	FunctionCharge    = "charge"
	FunctionReconcile = "reconcile"
	FunctionSweeper   = "sweeper"
	FunctionIntake    = "intake"
)

// Name is a metric name.
type Name string

// The metrics the code emits; Definitions says by whom and in which unit.
const (
	// Requests counts the commands a function handled, by Operation and
	// Outcome. The charge function's are POST /charges, POST
	// /charges/{id}/refunds, /capture and /cancel. The reconcile and intake
	// functions' are messages.
	Requests Name = "Requests"
	// BeginLatency is the idempotency claim (Begin) of a charge request.
	BeginLatency Name = "BeginLatency"
	// ProviderLatency is one call to the card provider (a charge, or the
	// reconciler's lookup).
	ProviderLatency Name = "ProviderLatency"
	// CommitLatency is the write that settles a command (Commit, Fail or
	// Release).
	CommitLatency Name = "CommitLatency"
	// StoredResponseBytes is the size of an answer stored for replay.
	StoredResponseBytes Name = "StoredResponseBytes"
	// StuckLeases is how many stuck leases a sweep found.
	StuckLeases Name = "StuckLeases"
	// OldestLeaseAgeSeconds is how long ago the oldest stuck lease a sweep
	// found ran out.
	OldestLeaseAgeSeconds Name = "OldestLeaseAgeSeconds"
	// MaxReconcileAttempts is the most reconcile attempts of a stuck key a
	// sweep found. A key that keeps failing shows here, not in the DLQ.
	MaxReconcileAttempts Name = "MaxReconcileAttempts"
	// Queued is how many stuck keys a sweep sent to the reconcile queue.
	Queued Name = "Queued"
)

// Unit is a CloudWatch unit.
type Unit string

// The units the metrics use.
const (
	UnitCount        Unit = "Count"
	UnitMilliseconds Unit = "Milliseconds"
	UnitSeconds      Unit = "Seconds"
	UnitBytes        Unit = "Bytes"
)

// Operation is a value of the Operation dimension: the operation a
// command's idempotency key is scoped to.
type Operation string

// The operations. OperationNone is a command that named none: a request
// or message refused before its key could be read.
const (
	OperationCharge Operation = "create-charge"
	OperationRefund Operation = "create-refund"
	// OperationEvent: a provider notification's deduplication record,
	// which the reconciler releases.
	OperationEvent Operation = "provider-event"
	OperationNone  Operation = "none"
	// OperationCapture and OperationCancel set a charge's state, with no
	// key; OperationSettle is the reconciler settling one left unsettled.
	OperationCapture Operation = "capture-charge"
	OperationCancel  Operation = "cancel-charge"
	OperationSettle  Operation = "settle-charge"
)

// Outcome is a value of the Outcome dimension.
type Outcome string

// The charge function's outcomes, which the intake function shares.
const (
	OutcomeCreated     Outcome = "created"
	OutcomeReplayed    Outcome = "replayed"
	OutcomeConflict    Outcome = "conflict"
	OutcomeMismatch    Outcome = "mismatch"
	OutcomeDeclined    Outcome = "declined"
	OutcomeUnavailable Outcome = "unavailable"
	OutcomeRejected    Outcome = "rejected"
	// OutcomePending: the outcome is unknown (503 outcome-pending); the
	// reconciler settles it.
	OutcomePending Outcome = "outcome-pending"
	// OutcomeLeaseLost: the request's lease was taken over before it could
	// record its outcome.
	OutcomeLeaseLost Outcome = "lease-lost"
	OutcomeInvalid   Outcome = "invalid"
	// OutcomeStateConflict: a refund, capture or cancel of a charge in
	// no state for it; nothing stored.
	OutcomeStateConflict Outcome = "state-conflict"
	// OutcomeRefundExceeds: a refund of more than settled refunds leave;
	// stored, final for its key. The provider was not asked.
	OutcomeRefundExceeds Outcome = "refund-exceeds"
	// OutcomeRefundLimit: a refund of a charge whose settled refunds
	// reach the limit; stored, final for its key.
	OutcomeRefundLimit Outcome = "refund-limit"
	// OutcomeNotFound: an unknown charge, or another tenant's.
	OutcomeNotFound Outcome = "not-found"
	// OutcomeCaptured and OutcomeCanceled: a capture or cancel answered
	// 200, whether this request or an earlier one set the state. A move
	// has no key, so no replay tells them apart.
	OutcomeCaptured Outcome = "captured"
	OutcomeCanceled Outcome = "canceled"
	// OutcomeRateLimited: refused (429) for a tenant past its rate or
	// concurrency, before its key was claimed.
	OutcomeRateLimited Outcome = "rate-limited"
	// OutcomeShed: a request that can wait, refused (503) while the store
	// was throttled, before it did anything.
	OutcomeShed Outcome = "shed"
)

// The reconcile function's outcomes.
const (
	OutcomeResolvedCharged  Outcome = "resolved-charged"
	OutcomeResolvedRefunded Outcome = "resolved-refunded"
	OutcomeResolvedDeclined Outcome = "resolved-declined"
	OutcomeReleased         Outcome = "released"
	// OutcomeResolvedCaptured and OutcomeResolvedCanceled: a capture or
	// cancel left unsettled, settled from the provider's state.
	OutcomeResolvedCaptured Outcome = "resolved-captured"
	OutcomeResolvedCanceled Outcome = "resolved-canceled"
	OutcomeStillLeased      Outcome = "still-leased"
	OutcomeNothingToDo      Outcome = "nothing-to-do"
	OutcomeNotSettled       Outcome = "not-settled"
	OutcomeDeferred         Outcome = "deferred"
	// OutcomeParked: a command older than the provider's dedup window
	// that the provider has no charge for, left for an operator.
	OutcomeParked Outcome = "parked"
)

// OutcomeError is an internal error, in any function.
const OutcomeError Outcome = "error"

// The outcomes of a deployment in several Regions, in any function.
// OutcomeWrongRegion: another Region serves the tenant.
// OutcomeFailoverPending: another Region may hold unreplicated writes.
// The reconciler's count of it is the stranded records' alarm.
const (
	OutcomeWrongRegion     Outcome = "wrong-region"
	OutcomeFailoverPending Outcome = "failover-pending"
)

// Definition says how a metric is emitted.
type Definition struct {
	Name Name
	Unit Unit
	// Functions are the Function dimension values it is emitted under.
	Functions []string
	// ByOutcome: also under {Function, Operation} and {Function,
	// Operation, Outcome}, with the values of Operations(function) and
	// Outcomes(function).
	ByOutcome bool
}

var (
	definitions = []Definition{
		{Requests, UnitCount, []string{FunctionCharge, FunctionReconcile, FunctionIntake}, true},
		{BeginLatency, UnitMilliseconds, []string{FunctionCharge, FunctionIntake}, false},
		{ProviderLatency, UnitMilliseconds, []string{FunctionCharge, FunctionReconcile, FunctionIntake}, false},
		{CommitLatency, UnitMilliseconds, []string{FunctionCharge, FunctionReconcile, FunctionIntake}, false},
		{StoredResponseBytes, UnitBytes, []string{FunctionCharge, FunctionReconcile, FunctionIntake}, false},
		{StuckLeases, UnitCount, []string{FunctionSweeper}, false},
		{OldestLeaseAgeSeconds, UnitSeconds, []string{FunctionSweeper}, false},
		{MaxReconcileAttempts, UnitCount, []string{FunctionSweeper}, false},
		{Queued, UnitCount, []string{FunctionSweeper}, false},
	}
	outcomes = map[string][]Outcome{
		FunctionCharge: {
			OutcomeCreated, OutcomeReplayed, OutcomeConflict, OutcomeMismatch, OutcomeDeclined, OutcomeUnavailable,
			OutcomeRejected, OutcomePending, OutcomeLeaseLost, OutcomeInvalid, OutcomeError,
			OutcomeStateConflict, OutcomeRefundExceeds, OutcomeRefundLimit, OutcomeNotFound, OutcomeCaptured, OutcomeCanceled,
			OutcomeWrongRegion, OutcomeFailoverPending, OutcomeRateLimited, OutcomeShed,
		},
		FunctionReconcile: {
			OutcomeResolvedCharged, OutcomeResolvedRefunded, OutcomeResolvedDeclined, OutcomeResolvedCaptured, OutcomeResolvedCanceled,
			OutcomeReleased, OutcomeStillLeased,
			OutcomeNothingToDo, OutcomeNotSettled, OutcomeDeferred, OutcomeParked, OutcomeError,
			OutcomeFailoverPending,
		},
		// The intake function's messages: the charge function's outcomes;
		// invalid is a malformed message, sent to the dead-letter queue.
		FunctionIntake: {
			OutcomeCreated, OutcomeReplayed, OutcomeConflict, OutcomeMismatch, OutcomeDeclined, OutcomeUnavailable,
			OutcomeRejected, OutcomePending, OutcomeLeaseLost, OutcomeInvalid, OutcomeError,
			OutcomeStateConflict, OutcomeRefundExceeds, OutcomeNotFound,
			OutcomeWrongRegion, OutcomeFailoverPending,
		},
	}
	operations = map[string][]Operation{
		FunctionCharge: {OperationCharge, OperationRefund, OperationCapture, OperationCancel, OperationNone},
		// The reconciler counts no message without a valid key.
		FunctionReconcile: {OperationCharge, OperationRefund, OperationEvent, OperationSettle},
		FunctionIntake:    {OperationCharge, OperationRefund, OperationNone},
	}
)

// Definitions returns every metric the code emits, in a fixed order.
func Definitions() []Definition {
	out := slices.Clone(definitions)
	for i := range out {
		out[i].Functions = slices.Clone(out[i].Functions)
	}
	return out
}

// Outcomes returns the Outcome values function emits; none for a function
// whose metrics have no Outcome.
func Outcomes(function string) []Outcome {
	return slices.Clone(outcomes[function])
}

// Operations returns the Operation values function emits; none for a
// function whose metrics have no Operation.
func Operations(function string) []Operation {
	return slices.Clone(operations[function])
}

// lookup returns the definition of name for function, and its position in
// Definitions.
func lookup(function string, name Name) (Definition, int, bool) {
	for i, d := range definitions {
		if d.Name == name && slices.Contains(d.Functions, function) {
			return d, i, true
		}
	}
	return Definition{}, 0, false
}
