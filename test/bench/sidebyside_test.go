package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

var (
	sideBySideOut         = flag.String("sidebyside-json", "", "run TestSideBySide and write its figures, as JSON (see sideBySideFile), to this file")
	sideBySideN           = flag.Int("sidebyside-n", 200, "TestSideBySide: first calls, and as many replays, per handler and concurrency")
	sideBySideConcurrency = flag.Int("sidebyside-concurrency", 8, "TestSideBySide: the fixed concurrency")
)

// sideBySideFile is TestSideBySide's figures (make bench:
// out/sidebyside.json), which cmd/benchdoc sets out: by handler
// ("chargeonce", "naive", "powertools"), the runs one at a time ("serial")
// and at the fixed concurrency ("concurrent"), and what one first call and
// one replay cost in capacity.
type sideBySideFile struct {
	// LoadAvg is /proc/loadavg's first three fields when the test started.
	LoadAvg  string                 `json:"loadavg_at_start"`
	N        int                    `json:"n"`
	Handlers map[string]sideHandler `json:"handlers"`
}

type sideHandler struct {
	Runs map[string]sideRun `json:"runs"`
	// FirstWCU and ReplayWCU are what one first call and one replay write
	// (FirstIndexWCU in the stuck-lease index), by the meter's rules.
	FirstWCU      int `json:"first_wcu"`
	FirstIndexWCU int `json:"first_index_wcu"`
	ReplayWCU     int `json:"replay_wcu"`
	// Powertools only: the versions bench.py ran.
	PowertoolsVersion string `json:"powertools_version,omitempty"`
	Boto3Version      string `json:"boto3_version,omitempty"`
}

// sideRun is one handler at one concurrency: N first calls with fresh keys,
// then a replay of each (none for the naive handler, whose retry is
// another first call). Calls are DynamoDB calls per request, by operation.
type sideRun struct {
	Concurrency int                `json:"concurrency"`
	First       sideLatency        `json:"first"`
	Replay      *sideLatency       `json:"replay,omitempty"`
	FirstCalls  map[string]float64 `json:"first_calls"`
	ReplayCalls map[string]float64 `json:"replay_calls,omitempty"`
}

type sideLatency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Mean  float64 `json:"mean_ms"`
}

// TestSideBySide times chargeonce's handler, the naive one and a handler
// on Powertools for AWS Lambda's idempotency utility (Python,
// test/bench/powertools) doing the same work, on the same emulator and
// provider simulator, by one method: each handler is called in process
// with an API Gateway HTTP API event, N first calls with fresh keys then a
// replay of each, one at a time and then from a fixed number of
// goroutines (threads for Python), each call timed from the call to its
// return. It asserts what each makes in DynamoDB calls. It runs only when
// -sidebyside-json names its output (make bench), as it needs the
// virtualenv's Powertools.
func TestSideBySide(t *testing.T) {
	if *sideBySideOut == "" {
		t.Skip("set -sidebyside-json to run it (make bench does)")
	}
	n, conc := *sideBySideN, *sideBySideConcurrency
	counter := &testkit.CallCounter{}
	s := newStack(t, nil, 0, counter.Option())
	out := sideBySideFile{LoadAvg: testkit.LoadAvg(), N: n, Handlers: map[string]sideHandler{}}
	modes := []struct {
		name        string
		concurrency int
	}{{"serial", 1}, {"concurrent", conc}}

	for _, h := range []struct {
		name      string
		handle    func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
		replays   bool
		wantFirst map[string]float64
	}{
		{"chargeonce", s.handler.Handle, true, map[string]float64{"PutItem": 1, "TransactWriteItems": 1}},
		{"naive", s.naive.Handle, false, map[string]float64{"PutItem": 1}},
	} {
		sh := sideHandler{Runs: map[string]sideRun{}}
		for _, m := range modes {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = newKey()
			}
			counter.Snapshot()
			r := sideRun{Concurrency: m.concurrency, First: drive(t, h.handle, keys, m.concurrency, false)}
			r.FirstCalls = perCall(counter.Snapshot(), n)
			if !maps.Equal(r.FirstCalls, h.wantFirst) {
				t.Errorf("%s %s: first calls %v; want %v", h.name, m.name, r.FirstCalls, h.wantFirst)
			}
			if h.replays {
				replay := drive(t, h.handle, keys, m.concurrency, true)
				r.Replay, r.ReplayCalls = &replay, perCall(counter.Snapshot(), n)
				if want := map[string]float64{"PutItem": 1}; !maps.Equal(r.ReplayCalls, want) {
					t.Errorf("%s %s: replay calls %v; want %v", h.name, m.name, r.ReplayCalls, want)
				}
			}
			sh.Runs[m.name] = r
		}
		out.Handlers[h.name] = sh
	}
	meterOurs(t, &out)
	out.Handlers["powertools"] = runPowertools(t, s, n, conc)

	js, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*sideBySideOut, append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// drive sends a POST /charges for each key, from concurrency goroutines,
// and returns the latencies; every answer must be a 201, replayed or not
// as wanted.
func drive(t *testing.T, h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), keys []string, concurrency int, replayed bool) sideLatency {
	t.Helper()
	lat := make([]time.Duration, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				resp, err := h(context.Background(), post(keys[i], visa))
				lat[i] = time.Since(start)
				if err != nil || resp.StatusCode != http.StatusCreated || (resp.Headers[httpapi.HeaderReplayed] == "true") != replayed {
					t.Errorf("%s: %d %v %s, %v; want 201, replayed %t", keys[i], resp.StatusCode, resp.Headers, resp.Body, err, replayed)
				}
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.Sort(lat)
	at := func(p int) float64 { return float64(lat[max(0, (p*len(lat)+99)/100-1)]) / 1e6 }
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return sideLatency{Count: len(lat), P50: at(50), P99: at(99), Mean: float64(sum) / float64(len(lat)) / 1e6}
}

func perCall(calls map[string]int, n int) map[string]float64 {
	out := make(map[string]float64, len(calls))
	for op, c := range calls {
		out[op] = float64(c) / float64(n)
	}
	return out
}

// meterOurs prices one first call and one replay of chargeonce's handler,
// and one naive call, with the round-trip test's meter, on a stack of
// their own (the meter reads around every call, which would distort the
// timings).
func meterOurs(t *testing.T, out *sideBySideFile) {
	t.Helper()
	m := &meter{db: testkit.Clients(t).DynamoDB}
	s := newStack(t, nil, 0, m.Option())
	m.tables = map[string]tableLayout{
		s.cfg.IdempotencyTable: {role: roleIdempotency, key: []string{dynamostore.AttrPK}, index: []string{dynamostore.AttrLeaseShard, dynamostore.AttrLeaseExpiresAt}},
		s.cfg.ChargesTable:     {role: roleCharges, key: []string{charge.AttrTenant, charge.AttrID}},
	}
	price := func(h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), key string) use {
		t.Helper()
		if resp, err := h(context.Background(), post(key, visa)); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("metered call: %d %s, %v", resp.StatusCode, resp.Body, err)
		}
		u, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return u.use
	}
	key := newKey()
	ours, naive := out.Handlers["chargeonce"], out.Handlers["naive"]
	first, replay := price(s.handler.Handle, key), price(s.handler.Handle, key)
	ours.FirstWCU, ours.FirstIndexWCU, ours.ReplayWCU = first.WCU, first.IndexWC, replay.WCU
	naive.FirstWCU = price(s.naive.Handle, newKey()).WCU
	out.Handlers["chargeonce"], out.Handlers["naive"] = ours, naive
}

// runPowertools runs test/bench/powertools/bench.py against tables of the
// shape Powertools documents (partition key "id", TTL on "expiration") and
// a charges table like the service's, and prices its writes from the
// largest record and row it left.
func runPowertools(t *testing.T, s *stack, n, concurrency int) sideHandler {
	t.Helper()
	ctx := context.Background()
	table := testkit.TempTable(t, &dynamodb.CreateTableInput{
		TableName:            aws.String("powertools-idempotency"),
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if _, err := s.db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("expiration"), Enabled: aws.Bool(true)},
	}); err != nil {
		t.Fatal(err)
	}
	charges := testkit.TempTable(t, charge.TableInput("powertools-charges"))
	dynamo := testkit.Endpoints(t).DynamoDB
	root := testkit.RepoRoot()
	cmd := exec.Command(filepath.Join(root, ".venv", "bin", "python"), filepath.Join(root, "test", "bench", "powertools", "bench.py"),
		"--endpoint", dynamo, "--provider", s.dep.ProviderURL, "--table", table, "--charges-table", charges,
		"--tenant-claim", testkit.TenantClaim, "--n", strconv.Itoa(n), "--concurrency", strconv.Itoa(concurrency))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench.py: %v: %s", err, stderr.String())
	}
	var sh sideHandler
	if err := json.Unmarshal(stdout.Bytes(), &sh); err != nil {
		t.Fatalf("bench.py: %v: %s", err, stdout.String())
	}
	for mode, r := range sh.Runs {
		// Powertools: the record's conditional PutItem, the handler's
		// charge row, the record's completion; a replay is the failed
		// conditional PutItem.
		if want := map[string]float64{"PutItem": 2, "UpdateItem": 1}; !maps.Equal(r.FirstCalls, want) {
			t.Errorf("powertools %s: first calls %v; want %v", mode, r.FirstCalls, want)
		}
		if want := map[string]float64{"PutItem": 1}; !maps.Equal(r.ReplayCalls, want) {
			t.Errorf("powertools %s: replay calls %v; want %v", mode, r.ReplayCalls, want)
		}
	}
	record, row := largestItem(t, s.db, table), largestItem(t, s.db, charges)
	// The in-progress PutItem writes no more than the completed record,
	// and the UpdateItem is priced by the larger of before and after.
	sh.FirstWCU = 2*ceilDiv(record, 1024) + ceilDiv(row, 1024)
	sh.ReplayWCU = ceilDiv(record, 1024)
	return sh
}

// largestItem is the size, by DynamoDB's rules, of the largest item in
// table.
func largestItem(t *testing.T, db *dynamodb.Client, table string) int {
	t.Helper()
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table)})
	largest := 0
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			largest = max(largest, itemSize(item))
		}
	}
	if largest == 0 {
		t.Fatalf("%s is empty", table)
	}
	return largest
}
