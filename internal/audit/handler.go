package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeonce/chargeonce/internal/tracing"
)

// DefaultIndexRetention is how long the index finds a command's entries.
// An auditor must have the latest three months at hand.
const DefaultIndexRetention = 92 * 24 * time.Hour

// MaxIndexRetention is the longest index retention configuration takes.
// It is the archive's shortest retention: the index never outlives it.
// CloudFormation's rules cannot compare two parameters.
const MaxIndexRetention = MinRetentionDays * 24 * time.Hour

// DefaultConcurrency is how many index items a batch writes at once.
const DefaultConcurrency = 8

// Options configure a Handler. Zero fields take the defaults.
type Options struct {
	// IndexRetention is how long an index item lasts. Default
	// DefaultIndexRetention.
	IndexRetention time.Duration
	// Concurrency bounds the index writes at once. Default
	// DefaultConcurrency.
	Concurrency int
	// Logger receives one record per batch. Default: discard.
	Logger *slog.Logger
	// Tracer records each batch as a span; nil traces nothing.
	Tracer *tracing.Tracer
}

// Tables name the tables whose streams the handler reads.
type Tables struct {
	Records, Charges string
}

// Handler writes the changes of a batch of stream records to the trail.
type Handler struct {
	dec     decoder
	archive *Archive
	index   *Index
	opt     Options
}

// NewHandler returns a Handler reading the streams of tables, the
// idempotency table's items through records, and writing to archive and
// index.
func NewHandler(records Records, tables Tables, archive *Archive, index *Index, optFns ...func(*Options)) (*Handler, error) {
	if records == nil || archive == nil || index == nil || tables.Records == "" || tables.Charges == "" {
		return nil, errors.New("audit: handler needs the records' decoder, both tables, an archive and an index")
	}
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if o.IndexRetention <= 0 {
		o.IndexRetention = DefaultIndexRetention
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dec := decoder{records: records, tables: map[string]string{tables.Records: TableRecords, tables.Charges: TableCharges}}
	return &Handler{dec: dec, archive: archive, index: index, opt: o}, nil
}

// Handle writes a batch's entries as one object of the archive. Then it
// files the object in the index under each command it names. Any failure
// fails the whole batch. The event source delivers it again, and skips
// nothing. A batch written twice is read once (Trail).
func (h *Handler) Handle(ctx context.Context, ev events.DynamoDBEvent) error {
	if len(ev.Records) == 0 {
		return nil
	}
	ctx, span := h.opt.Tracer.StartInvocation(ctx, "audit", trace.SpanKindConsumer)
	defer h.opt.Tracer.End(ctx, span)
	entries := make([]Entry, len(ev.Records))
	subjects := map[string]bool{}
	for i, r := range ev.Records {
		var names []string
		entries[i], names = h.dec.decode(r)
		for _, s := range names {
			subjects[s] = true
		}
	}
	name, err := write(ctx, h.archive, h.index, entries, subjects, h.opt.IndexRetention, h.opt.Concurrency)
	if err != nil {
		tracing.Error(span, "audit_write")
		h.opt.Logger.ErrorContext(ctx, "audit: batch not written; it is delivered again", "records", len(entries), "error", err.Error())
		return fmt.Errorf("audit: batch of %d: %w", len(entries), err)
	}
	h.opt.Logger.InfoContext(ctx, "audit batch", "records", len(entries), "object", name, "commands", len(subjects))
	return nil
}

// write appends entries as one object of archive. Then it files the
// object in index under each of subjects, concurrency at a time, for
// retention from the first entry. It returns the object's name.
func write(ctx context.Context, archive *Archive, index *Index, entries []Entry, subjects map[string]bool, retention time.Duration, concurrency int) (string, error) {
	name := objectName(entries)
	if err := archive.put(ctx, name, entries); err != nil {
		return name, err
	}
	expires := entries[0].At.Add(retention)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, concurrency)
	for s := range subjects {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := index.put(ctx, s, name, expires); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return name, errors.Join(errs...)
}
