package testkit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/local/eventsource"
	"github.com/chargeonce/chargeonce/internal/local/provision"
)

// S3 is an S3 client on the test endpoints.
func S3(t testing.TB) *s3.Client {
	t.Helper()
	return awsenv.S3(Config(t), Endpoints(t).S3)
}

// Streams is a DynamoDB Streams client on the test endpoints: DynamoDB's.
func Streams(t testing.TB) *dynamodbstreams.Client {
	t.Helper()
	return dynamodbstreams.NewFromConfig(Config(t), func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(Endpoints(t).DynamoDB) })
}

// Trail is a deployment's audit trail. Its tables' streams are on. It has
// the archive's bucket under Object Lock and the index table. The streams
// feed the audit function, as the local stack runs it.
type Trail struct {
	Config  app.AuditConfig
	S3      *s3.Client
	Streams map[string]string // by table name, its stream's ARN
	// Handle is the audit function's handler. A test may wrap it: the
	// streams feed whatever it is when they are drained.
	Handle  eventsource.StreamHandler
	logger  *slog.Logger
	pollers []*eventsource.StreamPoller
}

// Audit sets up d's audit trail. The audit function is built the way the
// function itself does (app.AuditHandler), with Wiring's Deps.S3 as its
// client of the bucket.
func (d *Deployment) Audit(t testing.TB, optFns ...func(*Wiring)) *Trail {
	t.Helper()
	ctx := t.Context()
	clients := Clients(t)
	tr := &Trail{S3: S3(t), Streams: map[string]string{}}
	bucket := UniqueName("audit")
	// A day's retention: moto keeps the locked objects until it exits.
	if err := provision.CreateBucket(ctx, tr.S3, audit.BucketInput(bucket), audit.LockInput(bucket, 1)); err != nil {
		t.Fatal(err)
	}
	index := TempTable(t, audit.IndexTableInput("audit-index"))
	for _, table := range []string{d.IdempotencyTable, d.ChargesTable} {
		arn, err := provision.EnableStream(ctx, clients.DynamoDB, audit.StreamInput(table))
		if err != nil {
			t.Fatal(err)
		}
		tr.Streams[table] = arn
	}
	tr.Config = app.AuditConfig{
		IdempotencyTable: d.IdempotencyTable, ChargesTable: d.ChargesTable, AuditBucket: bucket, AuditIndexTable: index,
		IndexRetention: audit.DefaultIndexRetention,
	}
	w := d.wiring(clients, append([]func(*Wiring){func(w *Wiring) { w.Deps.S3 = tr.S3 }}, optFns...))
	h, err := app.AuditHandler(tr.Config, w.Deps)
	if err != nil {
		t.Fatal(err)
	}
	tr.Handle, tr.logger = h.Handle, w.Deps.Logger
	tr.poll(t)
	return tr
}

// poll starts polling both streams from their oldest change.
func (tr *Trail) poll(t testing.TB) {
	t.Helper()
	tr.pollers = nil
	for _, arn := range tr.Streams {
		handle := func(ctx context.Context, ev events.DynamoDBEvent) error { return tr.Handle(ctx, ev) }
		p, err := eventsource.NewStream(Streams(t), arn, handle, func(o *eventsource.StreamOptions) {
			o.Timeout, o.Logger = 10*time.Second, tr.logger
		})
		if err != nil {
			t.Fatal(err)
		}
		tr.pollers = append(tr.pollers, p)
	}
}

// Redeliver hands every change the streams hold to the audit function
// again, from the oldest. So does an event source that lost its place.
func (tr *Trail) Redeliver(t testing.TB) eventsource.StreamBatch {
	t.Helper()
	tr.poll(t)
	return tr.Drain(t)
}

// Drain hands every change the streams hold to the audit function, until
// they hold no more or an invocation fails. It returns what it handed
// over.
func (tr *Trail) Drain(t testing.TB) eventsource.StreamBatch {
	t.Helper()
	var total eventsource.StreamBatch
	for _, p := range tr.pollers {
		for {
			b, err := p.Poll(context.WithoutCancel(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			total.Records += b.Records
			total.Failed += b.Failed
			if b.Records == 0 || b.Failed > 0 {
				break
			}
		}
	}
	return total
}

// Reader is the trail as chargectl admin audit reads it.
func (tr *Trail) Reader(t testing.TB) *audit.Trail {
	t.Helper()
	return tr.ReaderAt(t, time.Now)
}

// ReaderAt is Reader on the clock now.
func (tr *Trail) ReaderAt(t testing.TB, now func() time.Time) *audit.Trail {
	t.Helper()
	archive, err := audit.NewArchive(tr.S3, tr.Config.AuditBucket)
	if err != nil {
		t.Fatal(err)
	}
	index, err := audit.NewIndex(Clients(t).DynamoDB, tr.Config.AuditIndexTable)
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.NewTrail(archive, index, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
