package app

import (
	"errors"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/sweeper"
)

// SweeperHandler builds the sweeper function's handler: the stuck-lease
// index of the idempotency table joined with the charges table's index of
// captures and cancels in flight, and a sender to the reconcile queue.
func SweeperHandler(c SweeperConfig, d Deps) (*sweeper.Sweeper, error) {
	d = d.traced()
	// Retention plays no part in reading the index: the defaults serve.
	store, err := d.store(c.IdempotencyTable, 0, provider.Guarantees{})
	if err != nil {
		return nil, err
	}
	rows, err := charge.NewRows(d.Clients.DynamoDB, c.ChargesTable)
	if err != nil {
		return nil, err
	}
	sender, err := queue.NewSender(d.Clients.SQS, c.ReconcileQueueURL)
	if err != nil {
		return nil, err
	}
	return sweeper.New(sweeper.Join(store, rows), sender, func(o *sweeper.Options) {
		o.Clock = d.Clock
		o.Logger = d.Logger
		o.Metrics = d.Metrics
		o.Tracer = d.Tracer
	})
}

// ReconcileHandler builds the reconcile function's SQS handler.
func ReconcileHandler(c ReconcileConfig, d Deps) (*reconcile.Handler, error) {
	d = d.traced()
	svc, err := reconcileService(c, d)
	if err != nil {
		return nil, err
	}
	return reconcile.NewHandler(svc, func(o *reconcile.Options) { o.Logger, o.Metrics, o.Tracer = d.Logger, d.Metrics, d.Tracer })
}

// AuditHandler builds the audit function's handler: the streams of both
// tables, written to the trail's bucket (d.S3) and index.
func AuditHandler(c AuditConfig, d Deps) (*audit.Handler, error) {
	if d.S3 == nil {
		return nil, errors.New("app: the audit function needs an S3 client")
	}
	d = d.traced()
	// The store decodes the records' items: its options play no part.
	records, err := d.store(c.IdempotencyTable, 0, provider.Guarantees{})
	if err != nil {
		return nil, err
	}
	archive, err := audit.NewArchive(d.S3, c.AuditBucket)
	if err != nil {
		return nil, err
	}
	index, err := audit.NewIndex(d.Clients.DynamoDB, c.AuditIndexTable)
	if err != nil {
		return nil, err
	}
	tables := audit.Tables{Records: c.IdempotencyTable, Charges: c.ChargesTable}
	return audit.NewHandler(records, tables, archive, index, func(o *audit.Options) {
		o.IndexRetention, o.Clock, o.Logger, o.Tracer = c.IndexRetention, d.Clock, d.Logger, d.Tracer
	})
}
