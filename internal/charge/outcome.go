package charge

import "github.com/chargeonce/chargeonce/internal/metrics"

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
	OutcomeChargeConflict: metrics.OutcomeError,
	OutcomeError:          metrics.OutcomeError,
	OutcomeResolved:       metrics.OutcomeResolvedCharged,
	OutcomeResolvedDec:    metrics.OutcomeResolvedDeclined,
	OutcomeReleased:       metrics.OutcomeReleased,
	OutcomeStillLeased:    metrics.OutcomeStillLeased,
	OutcomeNothingToDo:    metrics.OutcomeNothingToDo,
	OutcomeNotSettled:     metrics.OutcomeNotSettled,
	OutcomeDeferred:       metrics.OutcomeDeferred,
	OutcomeParked:         metrics.OutcomeParked,
}

// Metric is o's name in the metrics (the Outcome dimension of Requests).
func (o Outcome) Metric() metrics.Outcome { return metricOutcomes[o] }
