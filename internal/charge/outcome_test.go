package charge

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/chargeonce/chargeonce/internal/metrics"
)

// TestEveryOutcomeHasItsMetricName reads every Outcome constant from
// outcome.go, so a new one cannot miss its metric name.
func TestEveryOutcomeHasItsMetricName(t *testing.T) {
	t.Parallel()
	want := map[string]metrics.Outcome{
		"OutcomeCreated": metrics.OutcomeCreated, "OutcomeReplayed": metrics.OutcomeReplayed,
		"OutcomeConflict": metrics.OutcomeConflict, "OutcomeMismatch": metrics.OutcomeMismatch,
		"OutcomeDeclined": metrics.OutcomeDeclined, "OutcomeUnavailable": metrics.OutcomeUnavailable,
		"OutcomeBusy": metrics.OutcomeUnavailable, "OutcomeRejected": metrics.OutcomeRejected,
		"OutcomeAmbiguous": metrics.OutcomePending, "OutcomeLeaseLost": metrics.OutcomeLeaseLost,
		"OutcomeInvalid": metrics.OutcomeInvalid, "OutcomeFound": "", "OutcomeNotFound": metrics.OutcomeNotFound,
		"OutcomeCaptured": metrics.OutcomeCaptured, "OutcomeCanceled": metrics.OutcomeCanceled,
		"OutcomeError": metrics.OutcomeError, "OutcomeChargeConflict": metrics.OutcomeError,
		"OutcomeStateConflict": metrics.OutcomeStateConflict, "OutcomeRefundExceeds": metrics.OutcomeRefundExceeds,
		"OutcomeRefundHeld": metrics.OutcomeConflict, "OutcomeRefundLimit": metrics.OutcomeRefundLimit,
		"OutcomeRefundLimitHeld": metrics.OutcomeConflict, "OutcomeNothingToDo": metrics.OutcomeNothingToDo,
		"OutcomeStillLeased": metrics.OutcomeStillLeased, "OutcomeResolvedCharged": metrics.OutcomeResolvedCharged,
		"OutcomeResolvedRefunded": metrics.OutcomeResolvedRefunded, "OutcomeResolvedDeclined": metrics.OutcomeResolvedDeclined,
		"OutcomeReleased": metrics.OutcomeReleased, "OutcomeResolvedCaptured": metrics.OutcomeResolvedCaptured,
		"OutcomeResolvedCanceled": metrics.OutcomeResolvedCanceled, "OutcomeNotSettled": metrics.OutcomeNotSettled,
		"OutcomeDeferred": metrics.OutcomeDeferred, "OutcomeParked": metrics.OutcomeParked,
		"OutcomeWrongRegion": metrics.OutcomeWrongRegion, "OutcomeFailoverPending": metrics.OutcomeFailoverPending,
	}
	consts := outcomeConstants(t)
	if len(consts) != len(want) {
		t.Errorf("outcome.go declares %d outcomes, the test knows %d", len(consts), len(want))
	}
	for name, o := range consts {
		m, ok := want[name]
		if !ok {
			t.Errorf("%s: no metric name in this test", name)
		}
		if got := o.Metric(); got != m {
			t.Errorf("%s.Metric() = %q, want %q", name, got, m)
		}
	}
}

// outcomeConstants are the Outcome constants outcome.go declares, by name.
func outcomeConstants(t *testing.T) map[string]Outcome {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "outcome.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Outcome{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Outcome" {
				continue
			}
			for i, name := range vs.Names {
				lit := vs.Values[i].(*ast.BasicLit)
				out[name.Name] = Outcome(lit.Value[1 : len(lit.Value)-1])
			}
		}
	}
	return out
}
