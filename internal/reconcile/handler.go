package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Reconciler resolves one command whose outcome is unknown: a charge, or
// a provider event's deduplication record.
type Reconciler interface {
	Reconcile(ctx context.Context, key idem.Key) (charge.Outcome, error)
}

var _ Reconciler = (*charge.Service)(nil)

// DefaultConcurrency is how many messages of a batch are reconciled at once
// unless Options say otherwise.
const DefaultConcurrency = 4

// Options configure a Handler. Zero fields take the defaults.
type Options struct {
	// Concurrency bounds the messages reconciled at once; 1 handles a
	// batch in order. Default DefaultConcurrency.
	Concurrency int
	// Logger receives one record per message. Default: discard.
	Logger *slog.Logger
	// Metrics receives each batch's metrics in embedded metric format.
	// Default os.Stdout, where Lambda hands them to CloudWatch.
	Metrics io.Writer
	// Tracer records each batch and each message as spans, a message's in
	// its sender's trace; nil traces nothing.
	Tracer *tracing.Tracer
	// Marks renews a message's mark on each delivery, and removes it
	// once handled (queue.Marker): the sweeper may queue the key again.
	// Nil touches none.
	Marks queue.Marker
}

// Handler handles batches of reconcile messages. It is safe for concurrent
// use.
type Handler struct {
	svc     Reconciler
	opt     Options
	metrics *metrics.Emitter
}

// NewHandler returns a Handler resolving keys with svc.
func NewHandler(svc Reconciler, optFns ...func(*Options)) (*Handler, error) {
	if svc == nil {
		return nil, errors.New("reconcile: nil reconciler")
	}
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{svc: svc, opt: o, metrics: metrics.New(o.Metrics, metrics.FunctionReconcile)}, nil
}

// Handle reconciles a batch and returns, as batch item failures, the
// messages to deliver again. It never returns an error: that would have
// Lambda redeliver the whole batch, the settled messages with it.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, span := h.opt.Tracer.StartBatch(ctx, metrics.FunctionReconcile, ev)
	defer h.opt.Tracer.End(ctx, span)
	rec := h.metrics.Record()
	ctx = metrics.NewContext(ctx, rec)
	resp := queue.HandleBatch(ev, nil, h.opt.Concurrency, func(i int) bool { return h.handle(ctx, len(ev.Records), ev.Records[i]) })
	if err := rec.Flush(ctx); err != nil {
		h.opt.Logger.ErrorContext(ctx, "writing metrics failed", "error", err.Error())
	}
	return resp, nil
}

// handle reconciles one message and reports whether it is settled (to be
// deleted) rather than to be delivered again.
func (h *Handler) handle(ctx context.Context, batch int, m events.SQSMessage) bool {
	ctx, span := h.opt.Tracer.StartMessage(ctx, "reconcile.message", batch, m)
	defer span.End()
	log := h.opt.Logger.With("message_id", m.MessageId, "receive_count", m.Attributes["ApproximateReceiveCount"])
	msg, err := queue.ParseMessage(m.Body)
	key := msg.Key
	if err == nil && !charge.Reconciles(key.Operation()) {
		// Reconcile resolves the service's commands (asking the card
		// provider) and provider events' deduplication records (releasing
		// a dead delivery's for the redelivery). Another operation's key
		// is a command it knows nothing about.
		err = fmt.Errorf("operation %q is not reconciled here", key.Operation())
	}
	if err != nil {
		// No delivery of a malformed message can ever succeed: reporting it
		// would only cycle it through redeliveries into the dead-letter
		// queue. It is logged, without its body (which may hold a key), and
		// dropped.
		log.ErrorContext(ctx, "reconcile: malformed message dropped", "error", err.Error())
		tracing.Outcome(span, string(charge.OutcomeInvalid))
		return true
	}
	keyHash := key.LogHash()
	h.renew(ctx, log, msg)
	outcome, err := h.svc.Reconcile(ctx, key)
	if err != nil {
		tracing.Error(span, charge.ErrorClass(err))
		metrics.FromContext(ctx).Count(metrics.Requests, charge.MetricOperation(key), metrics.OutcomeError)
		log.ErrorContext(ctx, "reconcile", "key_hash", keyHash, "outcome", "error",
			"error_class", charge.ErrorClass(err), "error", redact(err, key, keyHash))
		return false
	}
	tracing.Outcome(span, string(outcome))
	metrics.FromContext(ctx).Count(metrics.Requests, charge.MetricOperation(key), outcome.Metric())
	log.InfoContext(ctx, "reconcile", "key_hash", keyHash, "outcome", string(outcome))
	h.unmark(ctx, log, msg)
	return true
}

// renew keeps the message's mark live past its next redelivery, should
// this delivery fail. A mark not renewed ends on its own: the sweeper may
// then queue a second message beside this one.
func (h *Handler) renew(ctx context.Context, log *slog.Logger, msg queue.Message) {
	if h.opt.Marks == nil || msg.QueuedUntil.IsZero() {
		return
	}
	if err := h.opt.Marks.RenewQueued(ctx, msg.Key, msg.QueuedUntil, queue.MarkHold); err != nil {
		log.WarnContext(ctx, "reconcile: the message's mark was not renewed",
			"key_hash", msg.Key.LogHash(), "until", msg.QueuedUntil, "error_class", charge.ErrorClass(err))
	}
}

// unmark removes the mark of a message handled, now deleted. A key still
// in flight may then be queued again once it is stuck. A mark that stays
// holds the key back until it ends.
func (h *Handler) unmark(ctx context.Context, log *slog.Logger, msg queue.Message) {
	if h.opt.Marks == nil || msg.QueuedUntil.IsZero() {
		return
	}
	if err := h.opt.Marks.UnmarkQueued(ctx, msg.Key, msg.QueuedUntil); err != nil {
		log.WarnContext(ctx, "reconcile: the handled message's mark stays until it ends",
			"key_hash", msg.Key.LogHash(), "until", msg.QueuedUntil, "error_class", charge.ErrorClass(err))
	}
}

// redact returns err's text with the key, which the store's errors name,
// replaced by its hash.
func redact(err error, key idem.Key, keyHash string) string {
	return strings.ReplaceAll(err.Error(), key.String(), "key:"+keyHash)
}
