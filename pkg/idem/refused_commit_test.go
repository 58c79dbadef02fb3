package idem_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
)

// throttleTransact answers every TransactWriteItems with a
// ThrottlingException (a 400: DynamoDB refused it unprocessed) while armed.
type throttleTransact struct {
	mu    sync.Mutex
	armed bool
}

func (t *throttleTransact) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	armed := t.armed
	t.mu.Unlock()
	if armed && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		return idemtest.DynamoDBFault(req, "ThrottlingException"), nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestRefusedCommitDoesNotBindTheLease: a Commit DynamoDB refused
// unprocessed at every attempt (throttled, or a row over the item limit)
// applied nothing, so a later Commit of the lease with other writes (the
// row trimmed) must commit; it got ErrLeaseLost once the lease remembered
// the writes of any Commit that failed, leaving the command stuck.
func TestRefusedCommitDoesNotBindTheLease(t *testing.T) {
	t.Parallel()
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"x"}`)}
	run := func(t *testing.T, s idem.Backend, r rows, arm func(bool)) {
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		arm(true)
		first := s.Commit(ctx, b.Lease, resp, r.insert("first"))
		arm(false)
		t.Logf("first Commit (refused unprocessed on DynamoDB): %v", first)
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != idem.StatusInFlight {
			t.Fatalf("after the refused Commit the record is %s, want IN_FLIGHT", rec.Status)
		}
		err = s.Commit(ctx, b.Lease, resp, r.insert("second"))
		if err != nil {
			t.Errorf("a Commit with other writes after a Commit refused unprocessed: %v, want nil (nothing of the first can have been applied)", err)
		}
	}
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		tr := &throttleTransact{}
		db := dynamotest.Client(t, func(o *dynamodb.Options) {
			o.HTTPClient = &http.Client{Transport: tr}
			o.RetryMaxAttempts = 2
		})
		s, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("refused")))
		if err != nil {
			t.Fatal(err)
		}
		r := rowsTable(t, false)
		run(t, s, r, func(a bool) { tr.mu.Lock(); tr.armed = a; tr.mu.Unlock() })
	})
	// The same with a refusal the caller mends with other writes: a
	// business row over DynamoDB's 400 KB item limit (ValidationException,
	// a 400), trimmed for the second Commit.
	t.Run("dynamodb, row too large", func(t *testing.T) {
		t.Parallel()
		db := dynamotest.Client(t)
		s, err := dynamostore.New(db, dynamotest.Table(t, dynamostore.TableInput("toolarge")))
		if err != nil {
			t.Fatal(err)
		}
		r := rowsTable(t, false)
		k := idemtest.UniqueKey(t, "acme")
		b, err := s.Begin(ctx, k, fpA, nil)
		if err != nil {
			t.Fatal(err)
		}
		big := r.insert("row")
		big.Put.Item["note"] = &types.AttributeValueMemberS{Value: strings.Repeat("x", 500<<10)}
		first := s.Commit(ctx, b.Lease, resp, big)
		t.Logf("first Commit, row of 500 KB: %v", first)
		if first == nil {
			t.Skip("the emulator took a 500 KB item")
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.Status != idem.StatusInFlight {
			t.Fatalf("after the refused Commit: %+v, %v", rec, err)
		}
		if err := s.Commit(ctx, b.Lease, resp, r.insert("row")); err != nil {
			t.Errorf("the Commit with the row trimmed, after DynamoDB refused the first unprocessed: %v, want nil", err)
		}
	})
}
