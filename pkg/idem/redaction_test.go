package idem_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// faultEvery answers every request with DynamoDB's error of its kind,
// sending nothing.
type faultEvery string

func (f faultEvery) RoundTrip(req *http.Request) (*http.Response, error) {
	return idemtest.DynamoDBFault(req, string(f)), nil
}

// secretKey is a key whose client part no error may show: a customer's
// order number, as far as the test knows.
func secretKey(t *testing.T) idem.Key {
	t.Helper()
	k, err := idem.NewKey("acme", "create-charge", dynamotest.UniqueName("ORDER-4242-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// wantRedacted fails unless err is an error that does not carry k's
// client key.
func wantRedacted(t *testing.T, what string, k idem.Key, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error: the path was not taken", what)
	case strings.Contains(err.Error(), k.ClientKey()):
		t.Errorf("%s: the error carries the client key: %v", what, err)
	}
}

// TestErrorsDoNotCarryTheKey: every error path of both stores, of Do and
// of the ReplayCache names a key by its LogHash, never by the client's
// key, which logs must not hold.
func TestErrorsDoNotCarryTheKey(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	e := dynamotest.NewEnv(t)
	stores := map[string]idem.Backend{"dynamodb": e.Store, "memstore": memstore.New(func(o *memstore.Options) { o.Clock = e.Clock.Now })}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) { contractErrorsRedacted(t, s) })
	}
	t.Run("dynamodb unavailable", func(t *testing.T) {
		down := func(kind string) *dynamostore.Store {
			db := dynamotest.Client(t, func(o *dynamodb.Options) {
				o.HTTPClient, o.RetryMaxAttempts = &http.Client{Transport: faultEvery(kind)}, 1
			})
			s, err := dynamostore.New(db, e.Table, func(o *dynamostore.Options) { o.Clock = e.Clock.Now })
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		throttled, failing := down("ThrottlingException"), down("InternalServerError")
		k := secretKey(t)
		_, err := throttled.Begin(ctx, k, fpA, nil)
		wantRedacted(t, "begin, throttled", k, err)
		_, err = failing.Begin(ctx, k, fpA, nil)
		var unknown *idem.UnknownClaimError
		if !errors.As(err, &unknown) {
			t.Errorf("begin, server error: %v, want *UnknownClaimError", err)
		}
		wantRedacted(t, "begin, server error", k, err)
		l := dynamotest.Begin(t, e.Store, k, fpA)
		row := types.TransactWriteItem{Put: &types.Put{TableName: aws.String(e.Table), Item: map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}}}}
		wantRedacted(t, "commit", k, failing.Commit(ctx, l, resp))
		wantRedacted(t, "commit with a business write", k, failing.Commit(ctx, l, resp, row))
		wantRedacted(t, "fail", k, failing.Fail(ctx, l, resp))
		wantRedacted(t, "release", k, failing.Release(ctx, l))
		wantRedacted(t, "heartbeat", k, failing.Heartbeat(ctx, l))
		wantRedacted(t, "postpone", k, failing.Postpone(ctx, l, e.Clock.Now().Add(time.Minute)))
		_, err = failing.TakeOver(ctx, k)
		wantRedacted(t, "take over", k, err)
		_, err = failing.Preempt(ctx, k, l.CreatedAt)
		wantRedacted(t, "preempt", k, err)
		_, err = failing.Get(ctx, k)
		wantRedacted(t, "get", k, err)
	})
	t.Run("dynamodb business write refused", func(t *testing.T) {
		k := secretKey(t)
		row := types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(e.Table), ConditionExpression: aws.String("attribute_exists(pk)"),
			Item: map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "row-" + k.ClientKey()}},
		}}
		err := e.Store.Commit(ctx, dynamotest.Begin(t, e.Store, k, fpA), resp, row)
		if !errors.Is(err, idem.ErrWriteCondition) {
			t.Errorf("commit: %v, want ErrWriteCondition", err)
		}
		wantRedacted(t, "commit, business write refused", k, err)
	})
}

// contractErrorsRedacted takes s down each of the contract's error paths
// with a secret key.
func contractErrorsRedacted(t *testing.T, s idem.Backend) {
	ctx := t.Context()
	k := secretKey(t)
	l := dynamotest.Begin(t, s, k, fpA)
	_, err := s.Begin(ctx, k, fpB, nil)
	wantRedacted(t, "begin, mismatch", k, err)
	_, err = s.Begin(ctx, k, fpA, nil)
	wantRedacted(t, "begin, in flight", k, err)
	_, err = s.TakeOver(ctx, k)
	wantRedacted(t, "take over, live lease", k, err)
	big := idem.Response{Status: 201, Body: make([]byte, 500*1024)}
	rand.NewChaCha8([32]byte{}).Read(big.Body) // incompressible
	wantRedacted(t, "commit, too large", k, s.Commit(ctx, l, big))
	wantRedacted(t, "fail, too large", k, s.Fail(ctx, l, big))
	impostor := *l
	impostor.Token = strings.Repeat("0", len(l.Token))
	wantRedacted(t, "commit, lease lost", k, s.Commit(ctx, &impostor, resp))
	wantRedacted(t, "fail, lease lost", k, s.Fail(ctx, &impostor, resp))
	wantRedacted(t, "release, lease lost", k, s.Release(ctx, &impostor))
	wantRedacted(t, "heartbeat, lease lost", k, s.Heartbeat(ctx, &impostor))
	wantRedacted(t, "postpone, lease lost", k, s.Postpone(ctx, &impostor, time.Now().Add(time.Minute)))
	if err := s.Commit(ctx, l, resp); err != nil {
		t.Fatal(err)
	}
	_, err = s.TakeOver(ctx, k)
	wantRedacted(t, "take over, completed", k, err)
	_, err = s.Preempt(ctx, k, l.CreatedAt)
	wantRedacted(t, "preempt, completed", k, err)

	absent := secretKey(t)
	_, err = s.Get(ctx, absent)
	wantRedacted(t, "get, absent", absent, err)
	_, err = s.TakeOver(ctx, absent)
	wantRedacted(t, "take over, absent", absent, err)
	_, err = s.Preempt(ctx, absent, l.CreatedAt)
	wantRedacted(t, "preempt, absent", absent, err)

	cache := idem.NewReplayCache(s, 8)
	_, err = cache.Begin(ctx, k, fpA, nil) // cached
	if err != nil {
		t.Fatal(err)
	}
	_, err = cache.Begin(ctx, k, fpB, nil)
	wantRedacted(t, "replay cache, mismatch", k, err)
	wantRedacted(t, "replay cache, lease lost", k, cache.Commit(ctx, &impostor, resp))

	boom := errors.New("boom")
	ran := secretKey(t)
	_, err = idem.Do(ctx, cache, ran, fpA, nil, func(context.Context, *idem.Lease) (idem.Outcome, error) { return idem.Outcome{}, boom })
	if !errors.Is(err, boom) {
		t.Errorf("do: %v, want the function's error", err)
	}
	wantRedacted(t, "do, the function's error", ran, err)
	lost := secretKey(t)
	_, err = idem.Do(ctx, s, lost, fpA, nil, func(ctx context.Context, l *idem.Lease) (idem.Outcome, error) {
		if _, err := s.Preempt(ctx, l.Key, l.CreatedAt); err != nil {
			t.Fatal(err)
		}
		return idem.Succeeded(resp), nil
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("do, preempted: %v, want ErrLeaseLost", err)
	}
	wantRedacted(t, "do, settlement refused", lost, err)
	_, err = idem.Settle(ctx, s, l, idem.Outcome{Status: idem.Status("BOGUS")})
	wantRedacted(t, "settle, unknown verdict", k, err)
}
