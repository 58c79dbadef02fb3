package sweeper

import (
	"context"
	"errors"
	"io"
	"iter"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Index is the part of *dynamostore.Store the sweeper reads: the stuck-lease index.
type Index interface {
	Shards() int
	StuckLeases(ctx context.Context, shard int, before time.Time) iter.Seq2[idem.Record, error]
}

var _ Index = (*dynamostore.Store)(nil)

// Sender queues keys for reconciliation, but for keys with a message in
// flight. It returns what it did and the first error of a whole call, if
// any.
type Sender interface {
	SendBatch(ctx context.Context, keys []idem.Key) (queue.Batch, error)
}

var _ Sender = (*queue.Sender)(nil)

// Defaults of the Options.
const (
	DefaultMaxKeys      = 1000
	DefaultSafetyMargin = 5 * time.Second
)

// Options configure a Sweeper. Zero fields take the defaults.
type Options struct {
	// MaxKeys bounds the keys one run queues. Default DefaultMaxKeys.
	MaxKeys int
	// SafetyMargin is how long before its context's deadline a run stops
	// looking for more keys. It is at least a tenth of the time the run had
	// left when it started. Default DefaultSafetyMargin.
	SafetyMargin time.Duration
	// Clock returns the current time; a lease that ran out before it is
	// stuck. Default time.Now.
	Clock func() time.Time
	// Logger receives the run's summary. Default: discard.
	Logger *slog.Logger
	// Metrics receives one embedded-metric-format line per run. Default
	// os.Stdout, where Lambda hands it to CloudWatch Logs.
	Metrics io.Writer
	// Tracer records each run as a span, the trace its messages carry;
	// nil traces nothing.
	Tracer *tracing.Tracer
	// Fence says which tenants this Region serves: only their keys
	// are queued. Nil queues every key.
	Fence Fence
}

// Fence is the part of *regions.Fence the sweeper reads.
type Fence interface {
	Serving(ctx context.Context, tenant string) (regions.Serving, error)
}

// Sweeper finds stuck leases and queues their keys. It is safe for
// concurrent use; each Run is independent.
type Sweeper struct {
	index   Index
	sender  Sender
	opt     Options
	metrics *metrics.Emitter
}

// New returns a Sweeper reading index and queuing with sender.
func New(index Index, sender Sender, optFns ...func(*Options)) (*Sweeper, error) {
	switch {
	case index == nil:
		return nil, errors.New("sweeper: nil stuck-lease index")
	case sender == nil:
		return nil, errors.New("sweeper: nil sender")
	case index.Shards() < 1:
		return nil, errors.New("sweeper: the index has no shards")
	}
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.SafetyMargin <= 0 {
		o.SafetyMargin = DefaultSafetyMargin
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = os.Stdout
	}
	m := metrics.New(o.Metrics, metrics.FunctionSweeper, func(mo *metrics.Options) { mo.Clock = o.Clock })
	return &Sweeper{index: index, sender: sender, opt: o, metrics: m}, nil
}

// Summary is what one run did.
type Summary struct {
	// StartShard is the shard the run read first.
	StartShard int
	// Found counts the stuck leases the run saw (at most MaxKeys).
	Found int
	// Queued, Failed and AlreadyQueued split Found by what became of the
	// key's message. It was sent, or failed, or was not sent as one was in
	// flight. A failed key is found again by the next run.
	Queued, Failed, AlreadyQueued int
	// OldestAge is how long ago the oldest stuck lease seen ran out.
	OldestAge time.Duration
	// MaxAttempts is the most reconcile attempts of a stuck key seen. The
	// reconciler postpones a key it cannot settle by a growing backoff. So
	// a key that keeps failing shows here.
	MaxAttempts int
	// Unreadable counts the index's items that did not decode. Each is
	// logged by its key's hash and passed over. It is not returned as an
	// error: it would fail every run until an operator removed it.
	Unreadable int
	// Elsewhere counts the stuck leases of tenants another Region serves,
	// passed over: that Region's sweeper queues them.
	Elsewhere int
	// Limited: the run reached MaxKeys and looked no further.
	Limited bool
	// OutOfTime: the run stopped its safety margin before the deadline.
	OutOfTime bool
}

// Handle is the Lambda handler for the scheduled event, whose payload
// carries nothing the sweep needs.
func (s *Sweeper) Handle(ctx context.Context) error {
	_, err := s.Run(ctx)
	return err
}

// Run sweeps once: it reads the stuck leases shard by shard, queues their
// keys, then logs and emits the metrics. A failed query or send does not
// stop the run; the errors are returned together at its end.
func (s *Sweeper) Run(ctx context.Context) (Summary, error) {
	ctx, span := s.opt.Tracer.StartInvocation(ctx, metrics.FunctionSweeper, trace.SpanKindInternal)
	defer s.opt.Tracer.End(ctx, span)
	started := time.Now()
	w := &sweep{Sweeper: s, now: s.opt.Clock(), stopAt: s.stopAt(ctx, started)}
	shards := s.index.Shards()
	w.sum.StartShard = startShard(w.now, shards)
	w.scan(ctx, shards)
	// The safety margin leaves time to send what was found.
	w.flush(ctx)
	s.report(ctx, w, time.Since(started))
	tracing.Int(span, attrFound, w.sum.Found)
	tracing.Int(span, attrQueued, w.sum.Queued)
	tracing.Int(span, attrAlreadyQueued, w.sum.AlreadyQueued)
	tracing.Int(span, attrFailed, w.sum.Failed)
	if len(w.errs) > 0 {
		tracing.Error(span, "sweep_failed")
	}
	return w.sum, errors.Join(w.errs...)
}

// A run's span attributes: what it found, queued, found queued already
// and failed to queue.
const (
	attrFound         = attribute.Key("chargeonce.sweep.found")
	attrQueued        = attribute.Key("chargeonce.sweep.queued")
	attrAlreadyQueued = attribute.Key("chargeonce.sweep.already_queued")
	attrFailed        = attribute.Key("chargeonce.sweep.failed")
)

// startShard rotates with the minute, the sweep's schedule. So over Shards
// minutes every shard is read first once. No state is kept between runs.
func startShard(now time.Time, shards int) int {
	return int(now.Unix() / 60 % int64(shards))
}

// stopAt is when a run started at now stops taking keys; zero if its
// context has no deadline. Deadlines are wall-clock times, so this is
// measured with the real clock, not Options.Clock.
func (s *Sweeper) stopAt(ctx context.Context, now time.Time) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return deadline.Add(-max(s.opt.SafetyMargin, deadline.Sub(now)/10))
}

// sweep is the state of one run.
type sweep struct {
	*Sweeper
	now     time.Time
	stopAt  time.Time
	sum     Summary
	pending []idem.Key
	errs    []error
}

func (w *sweep) scan(ctx context.Context, shards int) {
	for i := range shards {
		shard := (w.sum.StartShard + i) % shards
		if !w.more(ctx) {
			return
		}
		for sl, err := range w.index.StuckLeases(ctx, shard, w.now) {
			unreadable := errors.Is(err, idem.ErrUnreadableRecord)
			if err != nil && !unreadable {
				w.errs = append(w.errs, err)
				w.opt.Logger.WarnContext(ctx, "sweep: stuck-lease query failed", "shard", shard, "error", err.Error())
				break
			}
			if !w.more(ctx) {
				return
			}
			if unreadable {
				w.sum.Unreadable++
				w.opt.Logger.WarnContext(ctx, "sweep: an item of the stuck-lease index does not decode; passed over", "shard", shard, "error", err.Error())
				continue
			}
			w.add(ctx, sl)
		}
	}
}

// more reports whether the run may take another key, noting why not.
func (w *sweep) more(ctx context.Context) bool {
	switch {
	case w.sum.Found >= w.opt.MaxKeys:
		w.sum.Limited = true
		return false
	case ctx.Err() != nil || !w.stopAt.IsZero() && !time.Now().Before(w.stopAt):
		w.sum.OutOfTime = true
		return false
	}
	return true
}

func (w *sweep) add(ctx context.Context, sl idem.Record) {
	if w.opt.Fence != nil {
		// A fence that cannot be read passes the key on. The sender's
		// marks ask it again (regions.Fence.Marks), as the reconciler does.
		if sv, err := w.opt.Fence.Serving(ctx, sl.Key.Tenant()); err == nil && !sv.Here {
			w.sum.Elsewhere++
			return
		}
	}
	w.sum.Found++
	w.sum.OldestAge = max(w.sum.OldestAge, w.now.Sub(sl.LeaseExpiresAt))
	w.sum.MaxAttempts = max(w.sum.MaxAttempts, sl.Attempts)
	w.pending = append(w.pending, sl.Key)
	if len(w.pending) == queue.SendBatchMax { // one SendMessageBatch call
		w.flush(ctx)
	}
}

// flush sends the pending keys. Keys that could not be sent stay in the
// index and are found again by the next run.
func (w *sweep) flush(ctx context.Context) {
	if len(w.pending) == 0 {
		return
	}
	keys := w.pending
	w.pending = nil
	b, err := w.sender.SendBatch(ctx, keys)
	w.sum.Queued += len(keys) - len(b.Failed) - b.AlreadyQueued
	w.sum.Failed += len(b.Failed)
	w.sum.AlreadyQueued += b.AlreadyQueued
	if err != nil {
		w.errs = append(w.errs, err)
	}
	if len(b.Failed) == 0 {
		return
	}
	hashes := make([]string, len(b.Failed))
	for i, k := range b.Failed {
		hashes[i] = k.LogHash()
	}
	attrs := []any{"count", len(b.Failed), "key_hashes", hashes}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	w.opt.Logger.WarnContext(ctx, "sweep: keys not queued; the next run finds them again", attrs...)
}

// report logs the run's summary and writes its metrics line.
func (s *Sweeper) report(ctx context.Context, w *sweep, took time.Duration) {
	rec := s.metrics.Record()
	rec.Add(metrics.StuckLeases, w.sum.Found)
	rec.Add(metrics.Queued, w.sum.Queued)
	rec.Add(metrics.MaxReconcileAttempts, w.sum.MaxAttempts)
	rec.Time(metrics.OldestLeaseAgeSeconds, w.sum.OldestAge)
	if err := rec.Flush(ctx); err != nil {
		s.opt.Logger.ErrorContext(ctx, "sweep: writing metrics failed", "error", err.Error())
	}
	level := slog.LevelInfo
	if w.sum.Failed > 0 || w.sum.Unreadable > 0 || len(w.errs) > 0 {
		level = slog.LevelWarn
	}
	s.opt.Logger.Log(ctx, level, "sweep",
		"start_shard", w.sum.StartShard,
		"stuck_leases", w.sum.Found,
		"queued", w.sum.Queued,
		"already_queued", w.sum.AlreadyQueued,
		"failed", w.sum.Failed,
		"unreadable", w.sum.Unreadable,
		"oldest_lease_age_s", w.sum.OldestAge.Seconds(),
		"max_attempts", w.sum.MaxAttempts,
		"limited", w.sum.Limited,
		"out_of_time", w.sum.OutOfTime,
		"errors", len(w.errs),
		"duration_ms", took.Milliseconds(),
	)
}
