package charge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// operation is one kind of keyed command sent to the provider: creating
// a charge (create.go), refunding one (refund.go). Its entry point runs
// it through run (command.go). The shared paths reach it only through
// this interface: the reconciler, a notification, an operator.
type operation interface {
	// reference is the provider reference of the command key names,
	// created at created.
	reference(key idem.Key, created time.Time) string
	// lookup asks the provider what became of the command lease holds.
	// It sends nothing that could act anew. errStillLeased: the lease
	// was lost while it asked.
	lookup(ctx context.Context, lease *idem.Lease) (provider.Result, error)
	// verdict is the command's outcome, given the provider's answer.
	verdict(ctx context.Context, lease *idem.Lease, res provider.Result) (idem.Outcome, error)
	// undo takes back what the command wrote before asking the provider,
	// before it is released: a refund's hold on its charge.
	undo(ctx context.Context, lease *idem.Lease) error
	// rewrite settles a command whose verdict's writes failed their
	// condition (idem.ErrWriteCondition).
	rewrite(ctx context.Context, lease *idem.Lease, res provider.Result) (Outcome, idem.Response, error)
	// done is the provider status that says it did the command:
	// StatusCharged, StatusRefunded.
	done() provider.Status
	// resolved is the outcome of a command settled done by the
	// reconciler, a notification or an operator.
	resolved() Outcome
	// row is the id of the row in the charges table that the command
	// rec records writes.
	row(rec *idem.Record) (string, error)
	// notified applies the provider's word n to the command's row, the
	// system of record, which outlives the command's record. found is
	// false unless row is the id of a row there under n's reference.
	notified(ctx context.Context, n Notification, row string) (out Outcome, found bool, err error)
}

// operations are the operations a Service runs, by the operation their
// keys are scoped to: the one place a new operation is registered.
var operations = map[string]func(*Service) operation{
	ChargeOperation: func(s *Service) operation { return charges{s} },
	RefundOperation: func(s *Service) operation { return refunds{s} },
}

// bypasses are the keys Reconcile resolves without an operation. Neither
// sends a command to the provider, so neither has a verdict to reach.
var bypasses = map[string]func(*Service, context.Context, idem.Key, admitted) (Outcome, error){
	// An event's key only deduplicates a notification. Its record is
	// released for the redelivery, asking nothing.
	NotificationOperation: (*Service).reconcileEvent,
	// A move's key names a charge row, its only record. The row is
	// settled from the provider's state of the payment.
	TransitionOperation: (*Service).reconcileMove,
}

// op is the operation of the command key names, or an error for a key of
// no operation the service runs.
func (s *Service) op(key idem.Key) (operation, error) {
	if op, ok := s.ops[key.Operation()]; ok {
		return op, nil
	}
	return nil, fmt.Errorf("charge: no operation %q", key.Operation())
}

// Reconciles reports whether Reconcile resolves keys of operation.
func Reconciles(operation string) bool {
	_, op := operations[operation]
	_, bypass := bypasses[operation]
	return op || bypass
}

// Reference is the provider reference of the command key names, created
// at created: what an operator looks up in the provider's records. An
// error says the service runs no such operation.
func Reference(key idem.Key, created time.Time) (string, error) {
	op, ok := operations[key.Operation()]
	if !ok {
		return "", fmt.Errorf("charge: no operation %q", key.Operation())
	}
	// reference reads nothing of the Service.
	return op(nil).reference(key, created), nil
}

// errStillLeased: another attempt took the lease while the command was
// looked up. errStore: a lookup's own write to the store failed; the
// message is delivered again, as for any failure of the table.
var (
	errStillLeased = errors.New("charge: lease taken while looking up")
	errStore       = errors.New("charge: the store failed while looking up")
	// errFence: the Region's fence could not be read; nothing was done.
	errFence = errors.New("charge: the Region's fence could not be read")
)
