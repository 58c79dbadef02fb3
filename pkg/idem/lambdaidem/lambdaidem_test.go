package lambdaidem_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
	"github.com/chargeonce/chargeonce/pkg/idem/idemtest"
	"github.com/chargeonce/chargeonce/pkg/idem/internal/dynamotest"
	"github.com/chargeonce/chargeonce/pkg/idem/lambdaidem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// forEachStore runs test against the in-memory store and the DynamoDB
// store (on the emulator, or the endpoint configured).
func forEachStore(t *testing.T, test func(t *testing.T, s idemtest.Subject)) {
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		s := memstore.New()
		test(t, idemtest.Subject{
			Store: s,
			Row: func(id string) types.TransactWriteItem {
				return types.TransactWriteItem{Put: &types.Put{TableName: aws.String("rows"), Item: map[string]types.AttributeValue{"id": str(id)}}}
			},
			RowExists: func(t *testing.T, id string) bool {
				n := 0
				for _, w := range s.Writes() {
					if v, ok := w.Put.Item["id"].(*types.AttributeValueMemberS); ok && v.Value == id {
						n++
					}
				}
				if n > 1 {
					t.Errorf("row %s written %d times", id, n)
				}
				return n > 0
			},
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		table := dynamotest.Table(t, dynamostore.TableInput("lambdaidem"))
		db := dynamotest.Client(t)
		s, err := dynamostore.New(db, table)
		if err != nil {
			t.Fatal(err)
		}
		test(t, idemtest.Subject{
			Store: s,
			Row: func(id string) types.TransactWriteItem {
				return types.TransactWriteItem{Put: &types.Put{
					TableName: aws.String(table), Item: map[string]types.AttributeValue{dynamostore.AttrPK: str("row-" + id)},
					ConditionExpression: aws.String("attribute_not_exists(pk)"), // a second write would fail
				}}
			},
			RowExists: func(t *testing.T, id string) bool {
				out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{
					TableName: aws.String(table), Key: map[string]types.AttributeValue{dynamostore.AttrPK: str("row-" + id)}, ConsistentRead: aws.Bool(true),
				})
				if err != nil {
					t.Fatal(err)
				}
				return len(out.Item) > 0
			},
		})
	})
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func httpRequest(tenant, key, body string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RouteKey: "POST /orders", Body: body,
		Headers: map[string]string{"content-type": "application/json"},
	}
	if key != "" {
		req.Headers["idempotency-key"] = key
	}
	if tenant != "" {
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": tenant}},
		}
	}
	return req
}

type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks that resp is the problem slug, of the default base,
// and returns it.
func wantProblem(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int, slug string) problem {
	t.Helper()
	var p problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || resp.StatusCode != status || p.Status != status ||
		p.Type != lambdaidem.DefaultProblemBase+slug || resp.Headers["Content-Type"] != lambdaidem.ContentTypeProblem {
		t.Fatalf("want %d %s, got %d %v %s", status, slug, resp.StatusCode, resp.Headers, resp.Body)
	}
	return p
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s idemtest.Subject) {
		var runs atomic.Int32
		handler := lambdaidem.HTTP(s.Store, "create-order", func(ctx context.Context, req events.APIGatewayV2HTTPRequest, l *idem.Lease) (idem.Outcome, error) {
			runs.Add(1)
			var in struct{ Item string }
			_ = json.Unmarshal([]byte(req.Body), &in)
			switch in.Item {
			case "sold-out":
				return idem.Failed(idem.Response{Status: 409, Body: []byte(`{"error":"sold out"}`)}), nil
			case "later":
				return idem.NotApplied(idem.Response{Status: 503, Body: []byte(`{"error":"try later"}`)}), nil
			case "timeout":
				return idem.Unknown(idem.Response{}), nil
			}
			return idem.Succeeded(idem.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"order":"` + l.Key.ClientKey() + `"}`)},
				s.Row(l.Key.String())), nil
		})
		ctx := t.Context()
		call := func(req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
			t.Helper()
			resp, err := handler(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		key := idemtest.UniqueKey(t, "x").ClientKey()

		first := call(httpRequest("acme", key, `{"item":"book","qty":1}`))
		if first.StatusCode != 201 || first.Headers[lambdaidem.HeaderReplayed] != "" || first.Headers[lambdaidem.HeaderIdempotencyExpires] == "" {
			t.Fatalf("first: %+v", first)
		}
		again := call(httpRequest("acme", key, `{ "qty": 1, "item": "book" }`)) // the same JSON, written otherwise
		if again.StatusCode != 201 || again.Body != first.Body || again.Headers[lambdaidem.HeaderReplayed] != "true" {
			t.Fatalf("retry: %+v", again)
		}
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.Load())
		}
		k, _ := idem.NewKey("acme", "create-order", key)
		if !s.RowExists(t, k.String()) {
			t.Fatal("the business write was not committed")
		}
		wantProblem(t, call(httpRequest("acme", key, `{"item":"pen"}`)), 422, "idempotency-key-reused")
		wantProblem(t, call(httpRequest("acme", "", `{}`)), 400, "invalid-idempotency-key")
		wantProblem(t, call(httpRequest("acme", "bad\x01key", `{}`)), 400, "invalid-idempotency-key")
		wantProblem(t, call(httpRequest("", key, `{}`)), 401, "unauthorized")
		wantProblem(t, call(httpRequest("acme", key+"-j", `{"a":1,"a":2}`)), 400, "invalid-request")
		wantProblem(t, call(httpRequest("acme", key+"-u", `{"item":"\ud800"}`)), 400, "invalid-request")
		if other := call(httpRequest("globex", key, `{"item":"book","qty":1}`)); other.StatusCode != 201 || other.Headers[lambdaidem.HeaderReplayed] != "" || runs.Load() != 2 {
			t.Fatalf("another tenant's same key: %+v (runs %d)", other, runs.Load())
		}

		runs.Store(0)
		sold := call(httpRequest("acme", key+"-f", `{"item":"sold-out"}`))
		if soldAgain := call(httpRequest("acme", key+"-f", `{"item":"sold-out"}`)); sold.StatusCode != 409 || soldAgain.Body != sold.Body || soldAgain.Headers[lambdaidem.HeaderReplayed] != "true" {
			t.Fatalf("a stored failure: %+v then %+v", sold, soldAgain)
		}
		later := call(httpRequest("acme", key+"-r", `{"item":"later"}`))
		if laterAgain := call(httpRequest("acme", key+"-r", `{"item":"later"}`)); later.StatusCode != 503 || laterAgain.Headers[lambdaidem.HeaderReplayed] != "" {
			t.Fatalf("not applied: %+v then %+v", later, laterAgain)
		}
		wantProblem(t, call(httpRequest("acme", key+"-t", `{"item":"timeout"}`)), 503, "outcome-pending")
		pending := call(httpRequest("acme", key+"-t", `{"item":"timeout"}`))
		wantProblem(t, pending, 409, "request-in-progress")
		if pending.Headers["Retry-After"] == "" {
			t.Fatalf("409 without Retry-After: %+v", pending)
		}
		if runs.Load() != 4 { // sold-out once, later twice, timeout once
			t.Fatalf("handler ran %d times, want 4", runs.Load())
		}
	})
}

// TestHTTPConcurrentRetry: while the first request runs, its retry is
// answered 409 with Retry-After; the handler runs once.
func TestHTTPConcurrentRetry(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s idemtest.Subject) {
		started, release := make(chan struct{}), make(chan struct{})
		var runs atomic.Int32
		handler := lambdaidem.HTTP(s.Store, "create-order", func(ctx context.Context, _ events.APIGatewayV2HTTPRequest, _ *idem.Lease) (idem.Outcome, error) {
			runs.Add(1)
			close(started)
			<-release
			return idem.Succeeded(idem.Response{Status: 201, Body: []byte("ok")}), nil
		})
		req := httpRequest("acme", idemtest.UniqueKey(t, "x").ClientKey(), `{}`)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = handler(t.Context(), req)
		}()
		<-started
		resp, _ := handler(t.Context(), req)
		wantProblem(t, resp, 409, "request-in-progress")
		if ra := resp.Headers["Retry-After"]; ra == "" || ra == "0" {
			t.Fatalf("Retry-After %q", ra)
		}
		close(release)
		wg.Wait()
		if resp, _ := handler(t.Context(), req); resp.StatusCode != 201 || resp.Headers[lambdaidem.HeaderReplayed] != "true" || runs.Load() != 1 {
			t.Fatalf("after the first finished: %+v, %d runs", resp, runs.Load())
		}
	})
}

func TestREST(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s idemtest.Subject) {
		var runs atomic.Int32
		handler := lambdaidem.REST(s.Store, "create-order", func(ctx context.Context, req events.APIGatewayProxyRequest, l *idem.Lease) (idem.Outcome, error) {
			runs.Add(1)
			return idem.Succeeded(idem.Response{Status: 201, Body: []byte(req.Body)}), nil
		})
		key := idemtest.UniqueKey(t, "x").ClientKey()
		req := events.APIGatewayProxyRequest{
			Body:              `{"item":"book"}`,
			MultiValueHeaders: map[string][]string{"Idempotency-Key": {key}},
		}
		req.RequestContext.Authorizer = map[string]any{"principalId": "acme"}
		for i := range 2 {
			resp, err := handler(t.Context(), req)
			if err != nil || resp.StatusCode != 201 || resp.Body != req.Body || (resp.Headers[lambdaidem.HeaderReplayed] == "true") != (i == 1) {
				t.Fatalf("call %d: %+v, %v", i+1, resp, err)
			}
		}
		req.Body = `{"item":"pen"}`
		if resp, _ := handler(t.Context(), req); resp.StatusCode != 422 || runs.Load() != 1 {
			t.Fatalf("another body: %+v, %d runs", resp, runs.Load())
		}
	})
}

func sqsMessage(id, key, body string) events.SQSMessage {
	m := events.SQSMessage{MessageId: id, Body: body, EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:orders"}
	if key != "" {
		m.MessageAttributes = map[string]events.SQSMessageAttribute{"order-id": {DataType: "String", StringValue: aws.String(key)}}
	}
	return m
}

func failures(resp events.SQSEventResponse) string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return strings.Join(ids, ",")
}

func TestSQS(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s idemtest.Subject) {
		ctx := t.Context()
		var (
			mu   sync.Mutex
			runs = map[string]int{}
		)
		handler := lambdaidem.SQS(s.Store, "fulfil", func(ctx context.Context, msg events.SQSMessage, l *idem.Lease) (idem.Outcome, error) {
			mu.Lock()
			runs[l.Key.ClientKey()]++
			mu.Unlock()
			if msg.Body == `"later"` {
				return idem.NotApplied(idem.Response{}), nil
			}
			return idem.Succeeded(idem.Response{}, s.Row(l.Key.String())), nil
		}, func(o *lambdaidem.SQSOptions) {
			o.Key = lambdaidem.KeyFromAttribute("order-id")
			o.OnError = func(_ context.Context, msg events.SQSMessage, err error) { t.Log(msg.MessageId, err) }
		})

		p := idemtest.UniqueKey(t, "x").ClientKey()
		held, err := idem.NewKey("orders", "fulfil", p+"-held")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Store.Begin(ctx, held, idem.FingerprintOf([]byte(`{}`)), nil); err != nil { // in flight elsewhere
			t.Fatal(err)
		}
		batch := events.SQSEvent{Records: []events.SQSMessage{
			sqsMessage("m1", p+"-a", `{"n":1}`),
			sqsMessage("m2", p+"-a", `{"n":1}`), // the producer sent it twice
			sqsMessage("m3", p+"-b", `"later"`),
			sqsMessage("m4", "", `{}`), // no key
			sqsMessage("m5", p+"-held", `{}`),
			sqsMessage("m6", p+"-c", `{"n":3}`),
		}}
		resp, err := handler(ctx, batch)
		if err != nil || failures(resp) != "m3,m4,m5" {
			t.Fatalf("first delivery: failures %q, %v; want m3,m4,m5", failures(resp), err)
		}
		resp, err = handler(ctx, batch) // the whole batch again
		if err != nil || failures(resp) != "m3,m4,m5" {
			t.Fatalf("redelivery: failures %q, %v; want m3,m4,m5", failures(resp), err)
		}
		mu.Lock()
		defer mu.Unlock()
		if runs[p+"-a"] != 1 || runs[p+"-c"] != 1 || runs[p+"-b"] != 2 || runs[p+"-held"] != 0 {
			t.Fatalf("runs %v: want a and c once, b (not applied) on each delivery, held never", runs)
		}
		for _, suffix := range []string{"-a", "-c"} {
			k, _ := idem.NewKey("orders", "fulfil", p+suffix)
			if !s.RowExists(t, k.String()) {
				t.Errorf("row of %s not committed", suffix)
			}
		}
	})
}

func TestSQSKeys(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	var runs atomic.Int32
	next := func(context.Context, events.SQSMessage, *idem.Lease) (idem.Outcome, error) {
		runs.Add(1)
		return idem.Succeeded(idem.Response{}), nil
	}
	byField := lambdaidem.SQS(s, "fulfil", next, func(o *lambdaidem.SQSOptions) { o.Key = lambdaidem.KeyFromJSONField("order_id") })
	resp, _ := byField(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		sqsMessage("m1", "", `{"order_id":"o-1","n":1}`),
		sqsMessage("m2", "", `{"n":1, "order_id":"o-1"}`),
		sqsMessage("m3", "", `{"n":1}`),
		sqsMessage("m4", "", `{"order_id":"o-1","n":2}`), // the key reused for another body
	}})
	if failures(resp) != "m3,m4" || runs.Load() != 1 {
		t.Fatalf("by JSON field: failures %q, %d runs", failures(resp), runs.Load())
	}

	byID := lambdaidem.SQS(s, "fulfil", next)
	fifo := events.SQSEvent{Records: []events.SQSMessage{sqsMessage("f1", "", `{}`), sqsMessage("f2", "", `{}`), sqsMessage("f3", "", `{}`)}}
	for i := range fifo.Records {
		fifo.Records[i].EventSourceARN += ".fifo"
	}
	f2, err := idem.NewKey("orders.fifo", "fulfil", "f2")
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := idem.FingerprintJSON([]byte(`{}`))
	if _, err := s.Begin(t.Context(), f2, fp, nil); err != nil { // f2 is in flight elsewhere
		t.Fatal(err)
	}
	if resp, _ := byID(t.Context(), fifo); failures(resp) != "f2,f3" {
		t.Fatalf("FIFO after a failure: failures %q, want f2,f3", failures(resp))
	}
}
