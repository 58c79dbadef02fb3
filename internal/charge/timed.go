package charge

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// timed is the idempotency store with its calls timed into the metrics of
// the invocation their context carries (metrics.FromContext): the claim as
// BeginLatency, every settlement as CommitLatency, and the size of each
// stored answer.
type timed struct{ store *idem.Store }

var _ idem.Backend = timed{}

func (t timed) Begin(ctx context.Context, key idem.Key, fp idem.Fingerprint, intent []byte) (idem.Begun, error) {
	defer since(ctx, metrics.BeginLatency, time.Now())
	return t.store.Begin(ctx, key, fp, intent)
}

func (t timed) Commit(ctx context.Context, l *idem.Lease, resp idem.Response, writes ...types.TransactWriteItem) error {
	defer since(ctx, metrics.CommitLatency, time.Now())
	metrics.FromContext(ctx).Size(metrics.StoredResponseBytes, len(resp.Body))
	return t.store.Commit(ctx, l, resp, writes...)
}

func (t timed) Fail(ctx context.Context, l *idem.Lease, resp idem.Response) error {
	defer since(ctx, metrics.CommitLatency, time.Now())
	metrics.FromContext(ctx).Size(metrics.StoredResponseBytes, len(resp.Body))
	return t.store.Fail(ctx, l, resp)
}

func (t timed) Release(ctx context.Context, l *idem.Lease) error {
	defer since(ctx, metrics.CommitLatency, time.Now())
	return t.store.Release(ctx, l)
}

// since records the time from start to now as name.
func since(ctx context.Context, name metrics.Name, start time.Time) {
	metrics.FromContext(ctx).Time(name, time.Since(start))
}
