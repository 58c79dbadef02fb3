package intake

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/actor"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/tracing"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// Creator creates a charge, or refunds one, once per command.
type Creator interface {
	Create(ctx context.Context, key idem.Key, req charge.Request, fp idem.Fingerprint) (charge.Result, error)
	Refund(ctx context.Context, key idem.Key, chargeID string, req charge.RefundRequest, fp idem.Fingerprint) (charge.Result, error)
}

var _ Creator = (*charge.Service)(nil)

// DeadLetters keeps the messages no delivery can process.
type DeadLetters interface {
	DeadLetter(ctx context.Context, msg events.SQSMessage, reason string) error
}

var _ DeadLetters = (*Queue)(nil)

// DefaultConcurrency is how many commands of a batch are created at once
// unless Options say otherwise.
const DefaultConcurrency = 4

// Options configure a Handler. Zero fields take the defaults.
type Options struct {
	// Concurrency bounds the commands created at once; 1 handles a batch
	// in order. Default DefaultConcurrency.
	Concurrency int
	// Logger receives one record per message. Default: discard.
	Logger *slog.Logger
	// Metrics receives each batch's metrics in embedded metric format.
	// Default os.Stdout, where Lambda hands them to CloudWatch.
	Metrics io.Writer
	// Tracer records each batch and each message as spans, a message's in
	// its sender's trace; nil traces nothing.
	Tracer *tracing.Tracer
}

// Handler handles batches of charge-requests messages. It is safe for
// concurrent use.
type Handler struct {
	svc     Creator
	dlq     DeadLetters
	opt     Options
	metrics *metrics.Emitter
}

// NewHandler returns a Handler creating charges with svc and sending
// malformed messages to dlq.
func NewHandler(svc Creator, dlq DeadLetters, optFns ...func(*Options)) (*Handler, error) {
	if svc == nil || dlq == nil {
		return nil, errors.New("intake: handler needs a charge service and a dead-letter queue")
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
	return &Handler{svc: svc, dlq: dlq, opt: o, metrics: metrics.New(o.Metrics, metrics.FunctionIntake)}, nil
}

// parsed is one record of a batch with what its body says.
type parsed struct {
	msg events.SQSMessage
	cmd Command
	err error
}

// Handle creates the batch's charges. It returns, as batch item failures,
// the messages to deliver again. Messages naming the same command are
// handled one after the other. So a duplicate inside a batch replays its
// twin instead of finding it in flight. Handle never returns an error. That
// would have Lambda redeliver the whole batch, the settled messages with
// it.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	ctx, span := h.opt.Tracer.StartBatch(ctx, metrics.FunctionIntake, ev)
	defer h.opt.Tracer.End(ctx, span)
	rec := h.metrics.Record()
	ctx = metrics.NewContext(ctx, rec)
	records := make([]parsed, len(ev.Records))
	var groups [][]int
	byKey := map[idem.Key]int{}
	for i, m := range ev.Records {
		p := parsed{msg: m}
		p.cmd, p.err = ParseMessage(m.Body)
		records[i] = p
		if g, ok := byKey[p.cmd.Key]; ok && p.err == nil {
			groups[g] = append(groups[g], i)
			continue
		}
		if p.err == nil {
			byKey[p.cmd.Key] = len(groups)
		}
		groups = append(groups, []int{i})
	}
	resp := queue.HandleBatch(ev, groups, h.opt.Concurrency, func(i int) bool { return h.handle(ctx, len(records), records[i]) })
	if err := rec.Flush(ctx); err != nil {
		h.opt.Logger.ErrorContext(ctx, "writing metrics failed", "error", err.Error())
	}
	return resp, nil
}

// settles are the outcomes that settle a message: any later delivery
// would get the same answer. The others may settle on another delivery.
var settles = map[charge.Outcome]bool{
	charge.OutcomeCreated:        true,
	charge.OutcomeReplayed:       true,
	charge.OutcomeDeclined:       true,
	charge.OutcomeMismatch:       true,
	charge.OutcomeRejected:       true,
	charge.OutcomeChargeConflict: true,
	charge.OutcomeRefundExceeds:  true,
}

// handle processes one message and reports whether it is settled (to be
// deleted) rather than to be delivered again.
func (h *Handler) handle(ctx context.Context, batch int, p parsed) bool {
	ctx, span := h.opt.Tracer.StartMessage(ctx, "intake.message", batch, p.msg)
	defer span.End()
	// Who sent it, kept with the command for the audit trail.
	ctx = actor.NewContext(ctx, actor.FromSQS(p.msg))
	log := h.opt.Logger.With("message_id", p.msg.MessageId, "receive_count", p.msg.Attributes["ApproximateReceiveCount"])
	rec := metrics.FromContext(ctx)
	if p.err != nil {
		tracing.Outcome(span, string(charge.OutcomeInvalid))
		return h.deadLetter(ctx, log, p)
	}
	keyHash := p.cmd.Key.LogHash()
	var (
		res charge.Result
		err error
	)
	if p.cmd.Key.Operation() == charge.RefundOperation {
		res, err = h.svc.Refund(ctx, p.cmd.Key, p.cmd.ChargeID, p.cmd.Refund, p.cmd.Fingerprint)
	} else {
		res, err = h.svc.Create(ctx, p.cmd.Key, p.cmd.Request, p.cmd.Fingerprint)
	}
	if err != nil {
		tracing.Error(span, charge.ErrorClass(err))
		rec.Count(metrics.Requests, charge.MetricOperation(p.cmd.Key), metrics.OutcomeError)
		log.ErrorContext(ctx, "intake", "key_hash", keyHash, "tenant", p.cmd.Key.Tenant(), "outcome", "error",
			"error_class", charge.ErrorClass(err), "settled", false)
		return false
	}
	settled := settles[res.Outcome]
	tracing.Outcome(span, string(res.Outcome))
	rec.Count(metrics.Requests, charge.MetricOperation(p.cmd.Key), res.Outcome.Metric())
	level := slog.LevelInfo
	if !settled || res.Outcome == charge.OutcomeMismatch || res.Outcome == charge.OutcomeChargeConflict {
		level = slog.LevelWarn // to be retried, a reused command id, or a case for an operator
	}
	attrs := []any{"key_hash", keyHash, "tenant", p.cmd.Key.Tenant(), "outcome", string(res.Outcome), "settled", settled}
	if res.Stored != nil {
		attrs = append(attrs, "status", res.Stored.Status)
	}
	log.Log(ctx, level, "intake", attrs...)
	return settled
}

// deadLetter sends a malformed message to the dead-letter queue and reports
// it settled. If that fails, it reports it for another delivery. The
// queue's redrive policy moves it in the end.
func (h *Handler) deadLetter(ctx context.Context, log *slog.Logger, p parsed) bool {
	// The key, if the message named a valid one.
	op := charge.MetricOperation(p.cmd.Key)
	var me *MalformedError
	if !errors.As(p.err, &me) {
		metrics.FromContext(ctx).Count(metrics.Requests, op, metrics.OutcomeError)
		log.ErrorContext(ctx, "intake", "outcome", "error", "error_class", charge.ErrorClass(p.err), "settled", false)
		return false
	}
	attrs := []any{"field", me.Field, "reason", me.Reason}
	if me.KeyHash != "" {
		attrs = append(attrs, "key_hash", me.KeyHash)
	}
	if err := h.dlq.DeadLetter(ctx, p.msg, me.Error()); err != nil {
		metrics.FromContext(ctx).Count(metrics.Requests, op, metrics.OutcomeError)
		log.ErrorContext(ctx, "intake: malformed message; sending it to the dead-letter queue failed, left for redelivery",
			append(attrs, "error_class", charge.ErrorClass(err), "settled", false)...)
		return false
	}
	metrics.FromContext(ctx).Count(metrics.Requests, op, metrics.OutcomeInvalid)
	log.ErrorContext(ctx, "intake: malformed message sent to the dead-letter queue", append(attrs, "settled", true)...)
	return true
}
