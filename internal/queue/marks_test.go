package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/memstore"
)

// marked is a queue on the emulator and a Sender to it that marks on a
// memstore, with the clock both read.
type marked struct {
	sqs    *sqs.Client
	url    string
	clock  *testkit.Clock
	store  *memstore.Store
	sender *queue.Sender
}

func newMarked(t *testing.T, marks func(*memstore.Store) queue.Marker) *marked {
	t.Helper()
	m := &marked{sqs: testkit.Clients(t).SQS, clock: testkit.NewClock(time.Now().Truncate(time.Millisecond))}
	q, err := queue.Create(t.Context(), m.sqs, testkit.UniqueName("marks"))
	if err != nil {
		t.Fatal(err)
	}
	m.url = q.URL
	m.store = memstore.New(func(o *memstore.Options) { o.Clock = m.clock.Now })
	if m.sender, err = queue.NewSender(m.sqs, m.url, func(o *queue.SenderOptions) { o.Marks, o.Clock = marks(m.store), m.clock.Now }); err != nil {
		t.Fatal(err)
	}
	return m
}

func asMarker(s *memstore.Store) queue.Marker { return s }

// inFlight claims a new key, whose record is IN_FLIGHT.
func (m *marked) inFlight(t *testing.T) idem.Key {
	t.Helper()
	k, err := idem.NewKey("acme", "create-charge", testkit.UniqueName("k"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.store.Begin(t.Context(), k, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
		t.Fatal(err)
	}
	return k
}

// drain receives every message the queue holds now.
func (m *marked) drain(t *testing.T) []queue.Message {
	t.Helper()
	var got []queue.Message
	for {
		out, err := m.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(m.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return got
		}
		for _, msg := range out.Messages {
			parsed, err := queue.ParseMessage(aws.ToString(msg.Body))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, parsed)
		}
	}
}

func TestAKeyIsQueuedOnceWhileItsMessageIsInFlight(t *testing.T) {
	t.Parallel()
	m := newMarked(t, asMarker)
	k := m.inFlight(t)
	for range 3 {
		if err := m.sender.EnqueueReconcile(t.Context(), k, 0); err != nil {
			t.Fatal(err)
		}
	}
	b, err := m.sender.SendBatch(t.Context(), []idem.Key{k})
	if err != nil || b.AlreadyQueued != 1 || len(b.Failed) != 0 {
		t.Fatalf("SendBatch of a key queued already: %+v, %v", b, err)
	}
	got := m.drain(t)
	want := m.clock.Now().Add(queue.MarkHold)
	if len(got) != 1 || got[0].Key != k || !got[0].QueuedUntil.Equal(want) {
		t.Fatalf("messages %+v, want one for the key marked until %s", got, want)
	}

	// Handled, the message's mark goes: the key may be queued again.
	if err := m.store.UnmarkQueued(t.Context(), k, got[0].QueuedUntil); err != nil {
		t.Fatal(err)
	}
	if b, err := m.sender.SendBatch(t.Context(), []idem.Key{k}); err != nil || b.AlreadyQueued != 0 {
		t.Fatalf("SendBatch after the unmark: %+v, %v", b, err)
	}
	// A lost message's mark ends MarkHold after its delivery.
	m.clock.Advance(queue.MarkHold + time.Second)
	if err := m.sender.EnqueueReconcile(t.Context(), k, 0); err != nil {
		t.Fatal(err)
	}
	if got := m.drain(t); len(got) != 2 {
		t.Fatalf("%d messages after the unmark and after the mark ended, want 2", len(got))
	}
}

func TestAKeyThatNeedsNoReconcileIsNotQueued(t *testing.T) {
	t.Parallel()
	m := newMarked(t, asMarker)
	absent, err := idem.NewKey("acme", "create-charge", testkit.UniqueName("absent"))
	if err != nil {
		t.Fatal(err)
	}
	settled := m.inFlight(t)
	m.clock.Advance(time.Minute)
	l, err := m.store.TakeOver(t.Context(), settled)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.store.Commit(t.Context(), l, idem.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if err := m.sender.EnqueueReconcile(t.Context(), absent, 0); err != nil {
		t.Fatal(err)
	}
	b, err := m.sender.SendBatch(t.Context(), []idem.Key{settled, absent})
	if err != nil || b.AlreadyQueued != 2 {
		t.Fatalf("SendBatch: %+v, %v; want both passed over", b, err)
	}
	if got := m.drain(t); len(got) != 0 {
		t.Fatalf("messages %+v, want none", got)
	}
}

// failingMarks cannot write a mark.
type failingMarks struct{}

var errMarks = errors.New("test: the table cannot be written")

func (failingMarks) MarkQueued(context.Context, idem.Key, time.Time) (bool, error) {
	return false, errMarks
}

func (failingMarks) RenewQueued(context.Context, idem.Key, time.Time, time.Duration) error {
	return errMarks
}

func (failingMarks) UnmarkQueued(context.Context, idem.Key, time.Time) error { return errMarks }

// TestAMarkNotWrittenSendsNothing: unmarked, a message could be a copy of
// one in flight; the key is left to the next sweep, and the caller told.
func TestAMarkNotWrittenSendsNothing(t *testing.T) {
	t.Parallel()
	m := newMarked(t, func(*memstore.Store) queue.Marker { return failingMarks{} })
	k := m.inFlight(t)
	if err := m.sender.EnqueueReconcile(t.Context(), k, 0); !errors.Is(err, errMarks) {
		t.Fatalf("EnqueueReconcile: %v, want the mark's error", err)
	}
	b, err := m.sender.SendBatch(t.Context(), []idem.Key{k})
	if !errors.Is(err, errMarks) || b.AlreadyQueued != 0 || len(b.Failed) != 1 || b.Failed[0] != k {
		t.Fatalf("SendBatch: %+v, %v; want the key failed with the mark's error", b, err)
	}
	if got := m.drain(t); len(got) != 0 {
		t.Fatalf("messages %+v, want none", got)
	}
}

func TestByOperationMarksWhereTheKeysOperationSays(t *testing.T) {
	t.Parallel()
	moves, other := memstore.New(), memstore.New()
	marks := queue.ByOperation(map[string]queue.Marker{"settle-charge": moves}, other)
	for store, op := range map[*memstore.Store]string{moves: "settle-charge", other: "create-charge"} {
		k, err := idem.NewKey("acme", op, testkit.UniqueName("k"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Begin(t.Context(), k, idem.FingerprintOf([]byte(`{}`)), nil); err != nil {
			t.Fatal(err)
		}
		if ok, err := marks.MarkQueued(t.Context(), k, time.Now().Add(time.Hour)); err != nil || !ok {
			t.Fatalf("%s: MarkQueued = %t, %v; want it marked in its own store", op, ok, err)
		}
	}
}

func TestParseMessageReadsAnUnmarkedMessage(t *testing.T) {
	t.Parallel()
	m, err := queue.ParseMessage(`{"key":"acme#create-charge#order-1"}`)
	if err != nil || m.Key.ClientKey() != "order-1" || !m.QueuedUntil.IsZero() {
		t.Fatalf("ParseMessage: %+v, %v", m, err)
	}
	if _, err := queue.ParseMessage(`{"key":"not a key"}`); err == nil {
		t.Fatal("a message naming no key was read")
	}
}

// TestAMessageFailingEveryDeliveryHoldsItsKey: SQS delivers a failing
// message again each VisibilityTimeout, MaxReceiveCount times, and each
// delivery renews its mark (as the reconcile handler does). Sweeps during
// any of those deliveries send no second message. A mark no delivery
// renews ends MarkHold after it was due.
func TestAMessageFailingEveryDeliveryHoldsItsKey(t *testing.T) {
	t.Parallel()
	m := newMarked(t, asMarker)
	k := m.inFlight(t)
	sent := m.clock.Now()
	at := func(d time.Duration) { m.clock.Advance(sent.Add(d).Sub(m.clock.Now())) }
	if err := m.sender.EnqueueReconcile(t.Context(), k, 0); err != nil {
		t.Fatal(err)
	}
	msgs := m.drain(t)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	for delivery := range queue.MaxReceiveCount {
		at(time.Duration(delivery) * queue.VisibilityTimeout)
		if err := m.store.RenewQueued(t.Context(), k, msgs[0].QueuedUntil, queue.MarkHold); err != nil {
			t.Fatal(err)
		}
		// The last second of this delivery's handler.
		at(time.Duration(delivery)*queue.VisibilityTimeout + queue.ReconcileTimeout - time.Second)
		if b, err := m.sender.SendBatch(t.Context(), []idem.Key{k}); err != nil || b.AlreadyQueued != 1 {
			t.Fatalf("a sweep during delivery %d: %+v, %v; want the key passed over", delivery+1, b, err)
		}
	}
	// Dead-lettered after its last delivery, the message renews no more.
	at(queue.MaxReceiveCount*queue.VisibilityTimeout + queue.ReconcileTimeout + time.Second)
	if b, err := m.sender.SendBatch(t.Context(), []idem.Key{k}); err != nil || b.AlreadyQueued != 0 {
		t.Fatalf("a sweep once the message was dead-lettered: %+v, %v; want the key queued", b, err)
	}
}
