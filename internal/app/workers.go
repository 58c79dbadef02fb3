package app

import (
	"errors"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// SweeperHandler builds the sweeper function's handler. It reads the
// idempotency table's stuck-lease index, joined with the charges table's
// index of captures and cancels in flight. It sends to the reconcile
// queue.
func SweeperHandler(c SweeperConfig, d Deps) (*sweeper.Sweeper, error) {
	d, err := d.traced().inRegions(c.Regions)
	if err != nil {
		return nil, err
	}
	// Retention plays no part in reading the index. The defaults serve.
	store, err := d.store(c.IdempotencyTable, 0, provider.Guarantees{})
	if err != nil {
		return nil, err
	}
	rows, err := charge.NewRows(d.Clients.DynamoDB, c.ChargesTable)
	if err != nil {
		return nil, err
	}
	sender, err := queue.NewSender(d.Clients.SQS, c.ReconcileQueueURL, d.marking(d.moveMarks(store, rows)))
	if err != nil {
		return nil, err
	}
	return sweeper.New(sweeper.Join(store, rows), sender, func(o *sweeper.Options) {
		o.Clock = d.Clock
		o.Logger = d.Logger
		o.Metrics = d.Metrics
		o.Tracer = d.Tracer
		if d.fence != nil {
			o.Fence = d.fence
		}
	})
}

// ReconcileHandler builds the reconcile function's SQS handler, which
// removes each handled message's mark.
func ReconcileHandler(c ReconcileConfig, d Deps) (*reconcile.Handler, error) {
	d, err := d.traced().inRegions(c.Regions)
	if err != nil {
		return nil, err
	}
	svc, err := reconcileService(c, d)
	if err != nil {
		return nil, err
	}
	marks, err := d.marks(c.IdempotencyTable, c.ChargesTable)
	if err != nil {
		return nil, err
	}
	return reconcile.NewHandler(svc, func(o *reconcile.Options) {
		o.Logger, o.Metrics, o.Tracer, o.Marks = d.Logger, d.Metrics, d.Tracer, marks
	})
}

// sender sends to the reconcile queue at url. It marks each key's record
// in the two tables before it sends.
func (d Deps) sender(url, idempotencyTable, chargesTable string) (*queue.Sender, error) {
	marks, err := d.marks(idempotencyTable, chargesTable)
	if err != nil {
		return nil, err
	}
	return queue.NewSender(d.Clients.SQS, url, d.marking(marks))
}

// marks are the marks of reconcile messages in the two tables.
func (d Deps) marks(idempotencyTable, chargesTable string) (queue.Marker, error) {
	store, err := d.store(idempotencyTable, 0, provider.Guarantees{})
	if err != nil {
		return nil, err
	}
	rows, err := charge.NewRows(d.Clients.DynamoDB, chargesTable)
	if err != nil {
		return nil, err
	}
	return d.moveMarks(store, rows), nil
}

// moveMarks mark a move's messages on its charge's row, every other
// key's on its record in store. In several Regions, the fence comes first.
func (d Deps) moveMarks(store *dynamostore.Store, rows *charge.Rows) queue.Marker {
	moves := charge.QueuedMoves{Rows: rows, Clock: d.Clock}
	if d.fence == nil {
		return queue.ByOperation(map[string]queue.Marker{charge.TransitionOperation: moves}, store)
	}
	moves.Unreplicated = d.fence.Unreplicated
	return d.fence.Marks(queue.ByOperation(map[string]queue.Marker{charge.TransitionOperation: moves}, store))
}

// marking has a sender mark with marks, on d's clock and logger.
func (d Deps) marking(marks queue.Marker) func(*queue.SenderOptions) {
	return func(o *queue.SenderOptions) { o.Marks, o.Clock, o.Logger = marks, d.Clock, d.Logger }
}

// AuditHandler builds the audit function's handler. It writes the streams
// of both tables to the trail's bucket (d.S3) and index.
func AuditHandler(c AuditConfig, d Deps) (*audit.Handler, error) {
	if d.S3 == nil {
		return nil, errors.New("app: the audit function needs an S3 client")
	}
	d = d.traced()
	// The store decodes the records' items. Its options play no part.
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
		o.IndexRetention, o.Logger, o.Tracer = c.IndexRetention, d.Logger, d.Tracer
	})
}
