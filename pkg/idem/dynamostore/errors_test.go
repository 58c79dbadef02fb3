package dynamostore_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// TestATransactionCanceledByAConflictIsUnavailable: a commit's
// transaction canceled because another write (a sweeper's MarkQueued on
// the same record) was in progress, or throttled, is transient.
func TestATransactionCanceledByAConflictIsUnavailable(t *testing.T) {
	for _, code := range []string{"TransactionConflict", "ThrottlingError"} {
		err := &types.TransactionCanceledException{
			Message:             aws.String("Transaction cancelled"),
			CancellationReasons: []types.CancellationReason{{Code: aws.String("None")}, {Code: aws.String(code)}},
		}
		if got := dynamostore.AsUnavailable(err); !errors.Is(got, idem.ErrUnavailable) {
			t.Errorf("AsUnavailable(TransactionCanceled: %s) is not idem.ErrUnavailable: %v", code, got)
		}
	}
}
