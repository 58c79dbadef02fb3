package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/provider"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
)

// fakeService stands in for charge.Service where the tests are about the
// handler alone: which keys it reconciles and what it reports.
type fakeService struct {
	mu       sync.Mutex
	keys     []idem.Key
	fail     map[string]bool // client keys whose reconcile fails
	delay    time.Duration
	inflight atomic.Int32
	peak     atomic.Int32
}

func (f *fakeService) Reconcile(_ context.Context, key idem.Key) (charge.Outcome, error) {
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(f.delay)
	f.mu.Lock()
	f.keys = append(f.keys, key)
	f.mu.Unlock()
	if f.fail[key.ClientKey()] {
		// Like the store's errors, this one names the key.
		return "", fmt.Errorf("idem: take over %s: %w", key, provider.ErrUnavailable)
	}
	return charge.OutcomeResolvedCharged, nil
}

func loadEvent(t *testing.T, name string) events.SQSEvent {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func failedIDs(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// The fixture holds a message that reconciles, one whose reconcile fails, a
// malformed one, one naming another operation's key and one naming a
// provider event's deduplication record, which is reconciled too.
func TestHandleReportsOnlyMessagesWorthRedelivering(t *testing.T) {
	t.Parallel()
	svc := &fakeService{fail: map[string]bool{"order-1002": true}}
	logs := &testkit.LogBuffer{}
	h, err := reconcile.NewHandler(svc, func(o *reconcile.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := loadEvent(t, "sqs_event.json")
	resp, err := h.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failedIDs(resp), []string{ev.Records[1].MessageId}; !slices.Equal(got, want) {
		t.Fatalf("batch item failures %v, want %v", got, want)
	}
	var reconciled []string
	for _, k := range svc.keys {
		reconciled = append(reconciled, k.String())
	}
	slices.Sort(reconciled)
	if want := []string{"acme#create-charge#order-1001", "acme#create-charge#order-1002", "acme#provider-event#stripe:evt_1003"}; !slices.Equal(reconciled, want) {
		t.Fatalf("reconciled %v, want %v", reconciled, want)
	}

	if out := logs.String(); strings.Contains(out, "order-100") || strings.Contains(out, "evt_1003") {
		t.Fatalf("a raw key reached the logs:\n%s", out)
	}
	byID := map[string]map[string]any{}
	dropped := 0
	for _, r := range logs.Records(t) {
		if r["msg"] == "reconcile: malformed message dropped" {
			dropped++
			continue
		}
		byID[r["message_id"].(string)] = r
	}
	ok, failed, event := byID[ev.Records[0].MessageId], byID[ev.Records[1].MessageId], byID[ev.Records[4].MessageId]
	k3, _ := idem.ParseKey("acme#provider-event#stripe:evt_1003")
	k1, _ := idem.ParseKey("acme#create-charge#order-1001")
	k2, _ := idem.ParseKey("acme#create-charge#order-1002")
	switch {
	case dropped != 2:
		t.Errorf("%d messages logged as dropped, want 2", dropped)
	case ok["outcome"] != string(charge.OutcomeResolvedCharged) || ok["key_hash"] != k1.LogHash():
		t.Errorf("log of the reconciled message: %v", ok)
	case event["outcome"] != string(charge.OutcomeResolvedCharged) || event["key_hash"] != k3.LogHash():
		t.Errorf("log of the provider event's message: %v", event)
	case failed["outcome"] != "error" || failed["error_class"] != "provider_unavailable" ||
		failed["key_hash"] != k2.LogHash() || failed["receive_count"] != "3" ||
		!strings.Contains(failed["error"].(string), "key:"+k2.LogHash()):
		t.Errorf("log of the failed message: %v", failed)
	}
}

func TestHandleBoundsConcurrency(t *testing.T) {
	t.Parallel()
	svc := &fakeService{delay: 20 * time.Millisecond}
	h, err := reconcile.NewHandler(svc, func(o *reconcile.Options) { o.Concurrency = 3 })
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for i := range 10 {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: fmt.Sprint("m", i),
			Body:      fmt.Sprintf(`{"key":"acme#create-charge#k%d"}`, i),
		})
	}
	resp, err := h.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle: %v, %v", resp, err)
	}
	if len(svc.keys) != 10 || svc.peak.Load() > 3 {
		t.Fatalf("reconciled %d keys with up to %d at once; want 10, at most 3", len(svc.keys), svc.peak.Load())
	}
}

func TestNewHandlerRefusesNilService(t *testing.T) {
	t.Parallel()
	if _, err := reconcile.NewHandler(nil); err == nil {
		t.Fatal("NewHandler(nil) succeeded")
	}
}
