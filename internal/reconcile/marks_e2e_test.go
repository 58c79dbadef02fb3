package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// markFault is a DynamoDB transport for the charge function: the first
// write of a queue mark (MarkQueued's UpdateItem) is applied by DynamoDB,
// and its answer is lost as fault says. Every other request passes.
type markFault struct {
	fault string // "reset": the connection resets; "slow": the answer comes after the caller gave up
	hit   atomic.Int32
}

func (m *markFault) RoundTrip(req *http.Request) (*http.Response, error) {
	var b []byte
	if req.Body != nil {
		b, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	isMark := strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem") && bytes.Contains(b, []byte("SET #q = :until"))
	if !isMark || m.hit.Add(1) != 1 {
		return http.DefaultTransport.RoundTrip(req)
	}
	// Applied by DynamoDB, whatever becomes of its answer.
	applied := req.Clone(context.WithoutCancel(req.Context()))
	applied.Body = io.NopCloser(bytes.NewReader(b))
	resp, err := http.DefaultTransport.RoundTrip(applied)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if m.fault == "slow" {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// TestAMarkWhoseAnswerWasLostStillQueuesTheKey: the charge function
// answers outcome-pending and queues the key. The mark's UpdateItem lands,
// but its answer is lost. After a reset, the SDK's retry knows the mark
// as its own, and the message is sent. An answer slower than the mark's
// budget sends nothing; the key is queued once its mark ends.
func TestAMarkWhoseAnswerWasLostStillQueuesTheKey(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"reset", "slow"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			s := newStack(t)
			mf := &markFault{fault: fault}
			deps := s.deps
			deps.Metrics = io.Discard
			deps.Clients = testkit.Clients(t, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: mf} })
			ch, err := app.ChargeHandler(t.Context(), app.ChargeConfig{
				IdempotencyTable: s.recCfg.IdempotencyTable, ChargesTable: s.charges, ReconcileQueueURL: s.queues.URL,
				ProviderURL: s.recCfg.ProviderURL, TenantClaim: testkit.TenantClaim, Retention: 24 * time.Hour,
			}, deps)
			if err != nil {
				t.Fatal(err)
			}
			k := newKey(t)
			resp, err := ch.Handle(context.Background(), createRequest(k, providersim.SourceTimeoutOnce))
			if err != nil {
				t.Fatal(err)
			}
			wantProblem(t, resp, http.StatusServiceUnavailable, "outcome-pending")
			if mf.hit.Load() == 0 {
				t.Fatal("no mark was written: the test proves nothing")
			}
			queued := s.waiting(t)
			if fault == "slow" {
				// No message carries the mark: it ends MarkHold after it was due.
				s.clock.Advance(queue.MarkHold)
			}
			s.clock.Advance(time.Minute) // past the lease: the key is stuck
			sum := s.sweep(t)
			if queued+sum.Queued != 1 {
				t.Fatalf("%d messages from the request, sweep %+v; want the key queued once", queued, sum)
			}
		})
	}
}

// TestAFailingMessageKeepsItsMark: a message waits in a backlog past
// its mark's first end, then fails twice (a table fault at the take-over),
// coming back after each visibility timeout. Each delivery renewed its
// mark: a sweep now sends no second message.
func TestAFailingMessageKeepsItsMark(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	k := newKey(t)
	s.claimDies(t, k)
	s.clock.Advance(time.Minute)
	if sum := s.sweep(t); sum.Queued != 1 {
		t.Fatalf("sweep: %+v", sum)
	}
	failing := s.reconcilerOn(t, func(o *dynamodb.Options) {
		o.Retryer = retry.AddWithMaxAttempts(retry.NewStandard(), 1)
		o.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			renewal := bytes.Contains(b, []byte("SET #qr"))
			if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") && bytes.Contains(b, []byte(k.ClientKey())) && !renewal {
				return nil, errors.New("test: connection reset")
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
	})
	s.clock.Advance(10 * time.Minute) // the backlog ahead of it
	for range 2 {
		msgs, resp := s.deliver(t, failing, 1)
		if len(resp.BatchItemFailures) != 1 {
			t.Fatalf("delivery: %v, want it failed", resp.BatchItemFailures)
		}
		// The visibility timeout passes: the message comes back.
		if _, err := s.clients.SQS.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(s.queues.URL), ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 0,
		}); err != nil {
			t.Fatal(err)
		}
		s.clock.Advance(queue.VisibilityTimeout)
	}
	sum := s.sweep(t)
	if n := s.waiting(t); n != 1 {
		t.Fatalf("%d messages for one key, its first still in flight after 2 of %d deliveries (sweep %+v); want 1", n, queue.MaxReceiveCount, sum)
	}
}

// TestAnUnsentMessageLeavesNoMark: the charge function marks the key,
// then SQS refuses its connection: no message was sent, and the mark is
// removed. The next sweep past the lease queues the key. A send that
// stalls proves nothing: its mark stays until it ends on its own.
func TestAnUnsentMessageLeavesNoMark(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"refused", "stalled"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			var failed atomic.Int32
			s := newStack(t, func(c *stackConfig) {
				c.chargeSQS = append(c.chargeSQS, func(o *sqs.Options) {
					o.RetryMaxAttempts = 1
					o.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SendMessage") {
							return http.DefaultTransport.RoundTrip(r)
						}
						failed.Add(1)
						if fault == "stalled" {
							<-r.Context().Done()
							return nil, r.Context().Err()
						}
						return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
					})}
				})
			})
			k := s.ambiguous(t)
			if failed.Load() == 0 {
				t.Fatal("no SendMessage failed: the test proves nothing")
			}
			if n := s.waiting(t); n != 0 {
				t.Fatalf("%d messages, want none sent", n)
			}
			if fault == "stalled" {
				s.clock.Advance(queue.MarkHold) // the mark ends on its own
			}
			s.clock.Advance(time.Minute) // past the lease
			if sum := s.sweep(t); sum.Queued != 1 {
				t.Fatalf("sweep after an unsent message, past the lease: %+v; want the key queued (its record: queued until %v)", sum, s.markOf(t, k))
			}
		})
	}
}

// markOf reads key's mark (qu) from its record; zero if none.
func (s *stack) markOf(t *testing.T, key idem.Key) time.Time {
	t.Helper()
	out, err := s.clients.DynamoDB.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(s.recCfg.IdempotencyTable)})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range out.Items {
		if v, ok := item["qu"].(*ddbtypes.AttributeValueMemberN); ok {
			ms, _ := strconv.ParseInt(v.Value, 10, 64)
			return time.UnixMilli(ms)
		}
	}
	return time.Time{}
}

// TestASentMessageWhoseAnswerWasLateKeepsItsMark: SQS takes the charge
// function's SendMessage, but its answer comes too late. The send may
// have happened, so its mark stays: the next sweep sends no second
// message.
func TestASentMessageWhoseAnswerWasLateKeepsItsMark(t *testing.T) {
	t.Parallel()
	var sent atomic.Int32
	s := newStack(t, func(c *stackConfig) {
		c.chargeSQS = append(c.chargeSQS, func(o *sqs.Options) {
			o.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".SendMessage") {
					return http.DefaultTransport.RoundTrip(r)
				}
				// SQS takes the message; its answer is later than the caller waits.
				b, err := io.ReadAll(r.Body)
				if err != nil {
					return nil, err
				}
				taken := r.Clone(context.WithoutCancel(r.Context()))
				taken.Body = io.NopCloser(bytes.NewReader(b))
				resp, err := http.DefaultTransport.RoundTrip(taken)
				if err != nil {
					return nil, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				sent.Add(1)
				<-r.Context().Done()
				return nil, r.Context().Err()
			})}
		})
	})
	k := s.ambiguous(t)
	if sent.Load() != 1 || s.waiting(t) != 1 {
		t.Fatalf("%d sends taken, %d messages waiting: the test proves nothing", sent.Load(), s.waiting(t))
	}
	s.clock.Advance(time.Minute) // past the lease: the key is stuck, its message due
	sum := s.sweep(t)
	if n := s.waiting(t); n != 1 {
		t.Fatalf("%d messages for one key whose first message is in flight (sweep %+v, mark %v); want 1", n, sum, s.markOf(t, k))
	}
}
