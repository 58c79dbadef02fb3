package idem_test

import (
	"crypto/rand"
	"errors"
	"testing"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// TestSizeLimitAfterReclaimWithoutIntent: the stores promise "the
// same size limit (idem.ErrTooLarge)": a response that does not fit beside
// the record's intent is refused with ErrTooLarge before anything is sent.
// A RELEASED key re-claimed by a Begin with no intent keeps the intent the
// first Begin stored, so the re-claim's lease carries it: sized against an
// empty lease intent, memstore committed and DynamoDB refused the
// UpdateItem (over 400 KB) with a ValidationException, not ErrTooLarge,
// leaving the command IN_FLIGHT.
func TestSizeLimitAfterReclaimWithoutIntent(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	intent := make([]byte, 150*1024)
	body := make([]byte, 300*1024) // random: gzip does not shrink it
	_, _ = rand.Read(intent)
	_, _ = rand.Read(body)
	run := func(t *testing.T, s idem.Backend) error {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, intent)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, b.Lease); err != nil {
			t.Fatal(err)
		}
		b, err = s.Begin(ctx, k, fpA, nil) // the same request, re-claimed, without an intent
		if err != nil || b.Lease == nil {
			t.Fatalf("reclaim: %+v, %v", b, err)
		}
		return s.Commit(ctx, b.Lease, idem.Response{Status: 200, Body: body})
	}
	ds, err := dynamostore.New(dynamotest.Client(t), dynamotest.Table(t, dynamostore.TableInput("sizes")))
	if err != nil {
		t.Fatal(err)
	}
	dErr := run(t, ds)
	mErr := run(t, memstore.New())
	t.Logf("DynamoDB commit: %v", dErr)
	t.Logf("memstore commit: %v", mErr)
	if (dErr == nil) != (mErr == nil) || dErr != nil && !errors.Is(dErr, idem.ErrTooLarge) {
		t.Fatalf("the stores disagree on a response that does not fit beside the kept intent: DynamoDB %v (ErrTooLarge: %v), memstore %v",
			dErr, errors.Is(dErr, idem.ErrTooLarge), mErr)
	}
}
