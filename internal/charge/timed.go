package charge

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// timed is the idempotency store, its calls timed into the invocation's
// metrics (metrics.FromContext). The claim is BeginLatency, and every
// settlement CommitLatency. Each stored answer's size is recorded. Each
// call is a span with its outcome (idem.Begin, idem.Commit, ...), parent
// of the DynamoDB call's. SettleClaim, the reconciler's Ledger write, is
// a span too.
type timed struct {
	Store
	tracer *tracing.Tracer
}

var _ Store = timed{}

func (t timed) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	ctx, span := t.tracer.Start(ctx, "idem.Begin")
	defer span.End()
	defer since(ctx, metrics.BeginLatency, time.Now())
	b, err := t.Store.Begin(ctx, key, fp, intent)
	if span.IsRecording() {
		outcome := beginOutcome(b, err)
		tracing.Outcome(span, outcome)
		if outcome == "error" {
			tracing.Error(span, ErrorClass(err))
		}
	}
	return b, err
}

func (t timed) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	ctx, span := t.tracer.Start(ctx, "idem.Commit")
	defer since(ctx, metrics.CommitLatency, time.Now())
	metrics.FromContext(ctx).Size(metrics.StoredResponseBytes, len(resp.Body))
	return endSettle(span, t.Store.Commit(ctx, l, resp, writes...))
}

func (t timed) Fail(ctx context.Context, l *idem.Lease, resp idem.Response) error {
	ctx, span := t.tracer.Start(ctx, "idem.Fail")
	defer since(ctx, metrics.CommitLatency, time.Now())
	metrics.FromContext(ctx).Size(metrics.StoredResponseBytes, len(resp.Body))
	return endSettle(span, t.Store.Fail(ctx, l, resp))
}

func (t timed) Release(ctx context.Context, l *idem.Lease) error {
	ctx, span := t.tracer.Start(ctx, "idem.Release")
	defer since(ctx, metrics.CommitLatency, time.Now())
	return endSettle(span, t.Store.Release(ctx, l))
}

func (t timed) SettleClaim(ctx context.Context, key idem.Key, created time.Time) error {
	ctx, span := t.tracer.Start(ctx, "idem.SettleClaim")
	return endSettle(span, t.Store.SettleClaim(ctx, key, created))
}

// since records the time from start to now as name.
func since(ctx context.Context, name metrics.Name, start time.Time) {
	metrics.FromContext(ctx).Time(name, time.Since(start))
}

// beginOutcome names what a claim found.
func beginOutcome(b idem.Begun, err error) string {
	var (
		inflight *idem.InFlightError
		mismatch *idem.MismatchError
	)
	switch {
	case errors.As(err, &inflight):
		return "in_flight"
	case errors.As(err, &mismatch):
		return "mismatch"
	case err != nil:
		return "error"
	case b.Replay != nil:
		return "replayed"
	default:
		return "claimed"
	}
}

// endSettle ends a settlement's span with its outcome and returns err.
func endSettle(span trace.Span, err error) error {
	defer span.End()
	if !span.IsRecording() {
		return err
	}
	switch {
	case err == nil:
		tracing.Outcome(span, "stored")
	case errors.Is(err, idem.ErrLeaseLost):
		tracing.Outcome(span, "lease_lost")
	case errors.Is(err, idem.ErrWriteCondition):
		tracing.Outcome(span, "write_condition_failed")
	default:
		tracing.Outcome(span, "error")
		tracing.Error(span, ErrorClass(err))
	}
	return err
}
