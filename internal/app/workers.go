package app

import (
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// SweeperHandler builds the sweeper function's handler: the stuck-lease
// index of the idempotency table joined with the charges table's index of
// captures and cancels in flight, and a sender to the reconcile queue.
func SweeperHandler(c SweeperConfig, d Deps) (*sweeper.Sweeper, error) {
	d = d.traced()
	// Retention plays no part in reading the index: the defaults serve.
	store, err := dynamostore.New(d.Clients.DynamoDB, c.IdempotencyTable, StoreOptions(0, provider.Guarantees{}, d.Clock))
	if err != nil {
		return nil, err
	}
	var fence sweeper.Fence
	if c.Regions.RoutesTable != "" {
		if fence, _, err = d.regions(c.Regions); err != nil {
			return nil, err
		}
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
		o.Fence = fence
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
