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

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

var (
	sideBySideOut         = flag.String("sidebyside-json", "", "run TestSideBySide and write its figures, as JSON (see benchout.SideBySide), to this file")
	sideBySideN           = flag.Int("sidebyside-n", 200, "TestSideBySide: first calls, and as many replays, per handler and concurrency")
	sideBySideConcurrency = flag.Int("sidebyside-concurrency", 8, "TestSideBySide: the fixed concurrency")
)

// warmUp is how many first calls each handler makes before the measured
// ones (bench.py and bench.mjs make as many).
const warmUp = 10

// handlerFunc is a Lambda handler of API Gateway HTTP API events.
type handlerFunc func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// TestSideBySide times chargeonce's handler, the naive one and handlers on
// Powertools for AWS Lambda's idempotency utility, in Python
// (test/bench/powertools) and TypeScript (test/bench/powertools-ts),
// doing the same work, on the same emulator and provider simulator, by
// one method: each handler is called in process with an API Gateway HTTP
// API event, after warmUp first calls that are not measured, N first calls
// with fresh keys, a replay of each, then N pairs
// of calls with the same fresh key sent at the same instant, one at a
// time and then from a fixed number of goroutines (threads for Python,
// promises for Node), each call timed from the call to its return. Every
// DynamoDB call goes through one proxy (phaseProxy), which counts and
// times them by phase; the test asserts what each makes. It runs only when
// -sidebyside-json names its output (make bench), as it needs the
// virtualenv's Powertools and test/bench/powertools-ts/node_modules.
func TestSideBySide(t *testing.T) {
	if *sideBySideOut == "" {
		t.Skip("set -sidebyside-json to run it (make bench does)")
	}
	n, conc := *sideBySideN, *sideBySideConcurrency
	dynamo := testkit.Endpoints(t).DynamoDB
	proxy := startPhaseProxy(t, dynamo)
	s := newStack(t, nil, 0, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL) })
	out := benchout.SideBySide{LoadAvg: testkit.LoadAvg(), N: n, Handlers: map[string]benchout.SideHandler{}}
	modes := []struct {
		name        string
		concurrency int
	}{{"serial", 1}, {"concurrent", conc}}

	for _, h := range []struct {
		name    string
		handle  handlerFunc
		replays bool
	}{
		{"chargeonce", s.handler.Handle, true},
		{"naive", s.naive.Handle, false},
	} {
		sh := benchout.SideHandler{Runs: map[string]benchout.SideRun{}}
		warm := make([]string, warmUp)
		for i := range warm {
			warm[i] = newKey()
		}
		drive(t, h.handle, warm, 1, false)
		for _, m := range modes {
			phase := func(name string) { proxy.Start(h.name + "/" + m.name + "/" + name) }
			keys := make([]string, n)
			for i := range keys {
				keys[i] = newKey()
			}
			phase("first")
			r := benchout.SideRun{Concurrency: m.concurrency, First: drive(t, h.handle, keys, m.concurrency, false)}
			if h.replays {
				phase("replay")
				replay := drive(t, h.handle, keys, m.concurrency, true)
				r.Replay = &replay
				dups := make([]string, n)
				for i := range dups {
					dups[i] = newKey()
				}
				phase("duplicate")
				dup := drivePairs(t, h.handle, dups, max(1, m.concurrency/2))
				r.Duplicate = &dup
			}
			proxy.Start("")
			sh.Runs[m.name] = r
		}
		out.Handlers[h.name] = sh
	}
	meterOurs(t, &out)
	out.Handlers["powertools"] = runPowertools(t, s, proxy, "powertools", n, conc)
	out.Handlers["powertools-ts"] = runPowertools(t, s, proxy, "powertools-ts", n, conc)

	for name, sh := range out.Handlers {
		for mode, r := range sh.Runs {
			measured(proxy, name+"/"+mode, n, &r)
			sh.Runs[mode] = r
		}
	}
	for name, want := range map[string][3]map[string]float64{
		// A first charge is a PutItem and the commit's transaction; a
		// replay and a duplicate the one PutItem.
		"chargeonce": {{"PutItem": 1, "TransactWriteItems": 1}, {"PutItem": 1}, {"PutItem": 2, "TransactWriteItems": 1}},
		"naive":      {{"PutItem": 1}, nil, nil},
		// Powertools: the record's conditional PutItem, the handler's
		// charge row, the record's completion; a replay and a duplicate
		// are the failed conditional PutItem.
		"powertools":    {{"PutItem": 2, "UpdateItem": 1}, {"PutItem": 1}, {"PutItem": 3, "UpdateItem": 1}},
		"powertools-ts": {{"PutItem": 2, "UpdateItem": 1}, {"PutItem": 1}, {"PutItem": 3, "UpdateItem": 1}},
	} {
		for mode, r := range out.Handlers[name].Runs {
			for i, got := range []map[string]float64{r.FirstCalls, r.ReplayCalls, r.DuplicateCalls} {
				if !maps.Equal(got, want[i]) {
					t.Errorf("%s %s: %s calls %v; want %v", name, mode, []string{"first", "replay", "duplicate"}[i], got, want[i])
				}
			}
		}
	}

	js, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*sideBySideOut, append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// measured fills in r's calls and own times from what the proxy counted
// in the phases under prefix ("chargeonce/serial"): the calls per request
// (per pair for duplicates), and the mean time of a request less its mean
// time at the emulator.
func measured(proxy *phaseProxy, prefix string, n int, r *benchout.SideRun) {
	first, replay, dup := proxy.Use(prefix+"/first"), proxy.Use(prefix+"/replay"), proxy.Use(prefix+"/duplicate")
	r.FirstCalls = perCall(first.Calls, n)
	r.FirstOwnMs = r.First.Mean - float64(first.Waited)/float64(n)/1e6
	if r.Replay != nil {
		r.ReplayCalls = perCall(replay.Calls, n)
		r.ReplayOwnMs = r.Replay.Mean - float64(replay.Waited)/float64(n)/1e6
	}
	if r.Duplicate != nil {
		r.DuplicateCalls = perCall(dup.Calls, n)
	}
}

// drive sends a POST /charges for each key, from concurrency goroutines,
// and returns the latencies; every answer must be a 201, replayed or not
// as wanted.
func drive(t *testing.T, h handlerFunc, keys []string, concurrency int, replayed bool) benchout.SideLatency {
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
	return summarizeSide(lat)
}

// drivePairs sends two POST /charges for each key at the same instant,
// pairs keys at a time, and returns the latency and answer of the call of
// each pair that did not charge: a 409 (the stack answers at once,
// inflightWait 0) or, if it came after the other, a replay. One call of
// each pair must charge.
func drivePairs(t *testing.T, h handlerFunc, keys []string, pairs int) benchout.SideDuplicate {
	t.Helper()
	type answer struct {
		d    time.Duration
		resp events.APIGatewayV2HTTPResponse
		err  error
	}
	got := make([][2]answer, len(keys))
	for i := 0; i < len(keys); i += pairs {
		var wg sync.WaitGroup
		for j := i; j < min(i+pairs, len(keys)); j++ {
			for k := range got[j] {
				wg.Go(func() {
					start := time.Now()
					resp, err := h(context.Background(), post(keys[j], visa))
					got[j][k] = answer{time.Since(start), resp, err}
				})
			}
		}
		wg.Wait()
	}
	fresh := func(a answer) bool {
		return a.err == nil && a.resp.StatusCode == http.StatusCreated && a.resp.Headers[httpapi.HeaderReplayed] != "true"
	}
	lat := make([]time.Duration, 0, len(keys))
	answers := map[string]int{}
	for j, pair := range got {
		charged, dup := pair[0], pair[1]
		if !fresh(charged) {
			charged, dup = dup, charged
		}
		if !fresh(charged) || fresh(dup) || dup.err != nil {
			t.Errorf("%s: a duplicate pair answered %d %s (%v) and %d %s (%v); want one fresh 201", keys[j],
				pair[0].resp.StatusCode, pair[0].resp.Body, pair[0].err, pair[1].resp.StatusCode, pair[1].resp.Body, pair[1].err)
			continue
		}
		name := strconv.Itoa(dup.resp.StatusCode)
		if dup.resp.Headers[httpapi.HeaderReplayed] == "true" {
			name += " replayed"
		}
		answers[name]++
		lat = append(lat, dup.d)
	}
	if len(lat) == 0 {
		t.Fatal("no duplicate pair answered as it should")
	}
	return benchout.SideDuplicate{Latency: summarizeSide(lat), Answers: answers}
}

// summarizeSide is the count, p50, p99 and mean of lat, in milliseconds.
func summarizeSide(lat []time.Duration) benchout.SideLatency {
	slices.Sort(lat)
	at := func(p int) float64 { return float64(lat[max(0, (p*len(lat)+99)/100-1)]) / 1e6 }
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return benchout.SideLatency{Count: len(lat), P50: at(50), P99: at(99), Mean: float64(sum) / float64(len(lat)) / 1e6}
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
func meterOurs(t *testing.T, out *benchout.SideBySide) {
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

// runPowertools runs the bench script of a Powertools handler, name
// "powertools" (test/bench/powertools/bench.py, Python) or
// "powertools-ts" (test/bench/powertools-ts/bench.mjs, Node), through the
// proxy, against tables of the shape Powertools documents (partition key
// "id", TTL on "expiration") and a charges table like the service's, and
// prices its writes from the largest record and row it left.
func runPowertools(t *testing.T, s *stack, proxy *phaseProxy, name string, n, concurrency int) benchout.SideHandler {
	t.Helper()
	ctx := context.Background()
	table := testkit.TempTable(t, &dynamodb.CreateTableInput{
		TableName:            aws.String(name + "-idempotency"),
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
	charges := testkit.TempTable(t, charge.TableInput(name+"-charges"))
	root := testkit.RepoRoot()
	args := []string{"--endpoint", proxy.URL, "--provider", s.dep.ProviderURL, "--table", table, "--charges-table", charges,
		"--tenant-claim", testkit.TenantClaim, "--n", strconv.Itoa(n), "--concurrency", strconv.Itoa(concurrency), "--name", name}
	var cmd *exec.Cmd
	if name == "powertools" {
		cmd = exec.Command(filepath.Join(root, ".venv", "bin", "python"), append([]string{filepath.Join(root, "test", "bench", "powertools", "bench.py")}, args...)...)
	} else {
		dir := filepath.Join(root, "test", "bench", "powertools-ts")
		if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
			t.Fatalf("%s: run `npm ci` there (make bench does): %v", dir, err)
		}
		cmd = exec.Command("node", append([]string{filepath.Join(dir, "bench.mjs")}, args...)...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s", name, err, stderr.String())
	}
	var sh benchout.SideHandler
	if err := json.Unmarshal(stdout.Bytes(), &sh); err != nil {
		t.Fatalf("%s: %v: %s", name, err, stdout.String())
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
			largest = max(largest, testkit.ItemSize(item))
		}
	}
	if largest == 0 {
		t.Fatalf("%s is empty", table)
	}
	return largest
}
