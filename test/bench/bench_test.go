package bench

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// The benchmarks run against whatever DynamoDB the tests use (make bench:
// the emulator), one operation at a time unless a name says parallel. Each
// reports the DynamoDB calls it made per operation, so a figure can be
// read against BenchmarkEmulatorPutItem, the cost of one call.

// counted builds the stack with a call counter on its DynamoDB client.
func counted(b *testing.B) (*stack, *testkit.CallCounter) {
	b.Helper()
	c := &testkit.CallCounter{}
	return newStack(b, nil, 0, c.Option()), c
}

// reportCalls reports the DynamoDB calls per operation since the last
// snapshot.
func reportCalls(b *testing.B, c *testkit.CallCounter) {
	total := 0
	for _, n := range c.Snapshot() {
		total += n
	}
	b.ReportMetric(float64(total)/float64(b.N), "ddb-calls/op")
}

// latencies collects the duration of each operation, to report its
// percentiles beside the mean that ns/op is.
type latencies []time.Duration

// report reports the median and the 99th percentile (nearest rank).
func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(p int) float64 { return float64(l[max(0, (p*len(l)+99)/100-1)]) / 1e6 }
	b.ReportMetric(at(50), "p50-ms")
	b.ReportMetric(at(99), "p99-ms")
}

// cpuClock adds up the CPU time (user and system, every goroutine) the
// benchmark process spends while it runs. The emulator is another process,
// so its time is not counted: what is left is the handler's own code, the
// SDK's and net/http's, and the in-process provider simulator's. Stop it
// around untimed work.
type cpuClock struct{ spent, since time.Duration }

func (c *cpuClock) start() { c.since = processCPU() }
func (c *cpuClock) stop()  { c.spent += processCPU() - c.since }

// report reports the CPU microseconds per operation.
func (c *cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(c.spent.Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // cannot fail for RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ownAllocs counts the allocations our own code makes in an operation:
// every allocation the process makes while the operation runs (the
// runtime's memory profile at MemProfileRate 1, so none is sampled out),
// less those whose stack passes through the AWS SDK, smithy-go or net/http.
// Those are the DynamoDB client's and the HTTP transports' (each handler
// has both: its DynamoDB calls, its provider call), and the in-process
// provider simulator's server. What remains is the handler's code and the
// standard library it calls directly, which is what differs between the
// idempotent handler and the naive one. The operations it measures run
// after the timed loop, so profiling every allocation does not slow the
// loop down.
type ownAllocs struct {
	ops        int
	own, total int64
}

// ownAllocsOps is how many operations ownAllocs measures after the loop.
const ownAllocsOps = 20

// sdkFrames are the packages whose allocations are not our own.
var sdkFrames = []string{"github.com/aws/aws-sdk-go-v2/", "github.com/aws/smithy-go", "net/http."}

// measure runs op with every allocation profiled.
func (a *ownAllocs) measure(op func()) {
	settle()
	own0, total0 := profiledAllocs()
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	op()
	runtime.MemProfileRate = rate
	settle()
	own1, total1 := profiledAllocs()
	a.ops++
	a.own += own1 - own0
	a.total += total1 - total0
}

// report reports our own allocations per operation, and all the process
// made while the operations ran (allocs/op less what the benchmark's own
// loop makes), for comparison.
func (a *ownAllocs) report(b *testing.B) {
	if a.ops == 0 {
		return
	}
	b.ReportMetric(float64(a.own)/float64(a.ops), "own-allocs/op")
	b.ReportMetric(float64(a.total)/float64(a.ops), "profiled-allocs/op")
}

// settle publishes the allocations made so far to the memory profile,
// which is up to two garbage collection cycles old.
func settle() {
	runtime.GC()
	runtime.GC()
}

// profiledAllocs sums the allocations in the memory profile, those of our
// own code and all.
func profiledAllocs() (own, total int64) {
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(recs, true)
		if ok {
			recs = recs[:n]
			break
		}
		recs = make([]runtime.MemProfileRecord, n+64)
	}
	for _, r := range recs {
		total += r.AllocObjects
		if !throughSDK(r.Stack()) {
			own += r.AllocObjects
		}
	}
	return own, total
}

func throughSDK(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		for _, p := range sdkFrames {
			if strings.HasPrefix(f.Function, p) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}

// measureOwn measures our own allocations in ownAllocsOps first calls
// through h, after the timed loop; done(id, key) removes what a call stored,
// outside the measurement.
func measureOwn(b *testing.B, h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), done func(key, id string)) {
	var a ownAllocs
	for range ownAllocsOps {
		key := newKey()
		req := post(key, visa)
		var (
			resp events.APIGatewayV2HTTPResponse
			err  error
		)
		a.measure(func() { resp, err = h(context.Background(), req) })
		if err != nil || resp.StatusCode != http.StatusCreated {
			b.Fatalf("%d %s, %v; want %d", resp.StatusCode, resp.Body, err, http.StatusCreated)
		}
		done(key, strings.TrimPrefix(resp.Headers["Location"], "/charges/"))
		b.StopTimer() // done may restart it (forget does)
	}
	a.report(b)
}

// handle sends req through h, adds its duration to lat, and returns the id
// of the charge it answered with (the tail of its Location).
func handle(b *testing.B, lat *latencies, h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), req events.APIGatewayV2HTTPRequest, want int) string {
	start := time.Now()
	resp, err := h(context.Background(), req)
	*lat = append(*lat, time.Since(start))
	if err != nil || resp.StatusCode != want {
		b.Fatalf("%d %s, %v; want %d", resp.StatusCode, resp.Body, err, want)
	}
	return strings.TrimPrefix(resp.Headers["Location"], "/charges/")
}

func storeKey(b *testing.B, client string) idem.Key {
	k, err := idem.NewKey(tenant, charge.ChargeOperation, client)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// BenchmarkBegin claims a fresh key: one conditional PutItem that wins.
func BenchmarkBegin(b *testing.B) {
	c := &testkit.CallCounter{}
	clients := testkit.Clients(b, c.Option())
	store, err := dynamostore.New(clients.DynamoDB, testkit.TempTable(b, dynamostore.TableInput("idem")))
	if err != nil {
		b.Fatal(err)
	}
	fp := idem.FingerprintOf([]byte(visa))
	intent := []byte(`{"amount":1500,"currency":"EUR","description":"order 42"}`)
	prefix := newKey()
	ctx := context.Background()
	b.ReportAllocs()
	c.Snapshot()
	i := 0
	for b.Loop() {
		i++
		if _, err := store.Begin(ctx, storeKey(b, prefix+"-"+strconv.Itoa(i)), fp, intent); err != nil {
			b.Fatal(err)
		}
	}
	reportCalls(b, c)
}

// BenchmarkCommit completes a held lease together with a charge row: one
// TransactWriteItems of two writes. Claiming the lease is not timed.
func BenchmarkCommit(b *testing.B) {
	c := &testkit.CallCounter{}
	clients := testkit.Clients(b, c.Option())
	charges := testkit.TempTable(b, charge.TableInput("charges"))
	table := testkit.TempTable(b, dynamostore.TableInput("idem"))
	store, err := dynamostore.New(clients.DynamoDB, table)
	if err != nil {
		b.Fatal(err)
	}
	plain := testkit.Clients(b).DynamoDB
	fp := idem.FingerprintOf([]byte(visa))
	intent := []byte(`{"amount":1500,"currency":"EUR","description":"order 42"}`)
	body := []byte(`{"id":"ch_0123456789abcdef01234567","amount":1500,"currency":"EUR","description":"order 42","status":"succeeded","provider_reference":"co_0123456789abcdef0123456789abcdef","created_at":"2026-01-01T00:00:00.000Z"}`)
	prefix := newKey()
	ctx := context.Background()
	b.ReportAllocs()
	c.Snapshot()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		id := prefix + "-" + strconv.Itoa(i)
		begun, err := store.Begin(ctx, storeKey(b, id), fp, intent)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		resp := idem.Response{Status: http.StatusCreated, Headers: map[string]string{"Content-Type": httpapi.ContentTypeJSON, "Location": "/charges/" + id}, Body: body}
		if err := store.Commit(ctx, begun.Lease, resp, chargeRow(charges, id)); err != nil {
			b.Fatal(err)
		}
		forget(b, plain, table, begun.Lease.Key.String(), charges, id)
	}
	// The untimed Begins are the PutItems; Commit makes the rest.
	b.ReportMetric(float64(c.Snapshot()["TransactWriteItems"])/float64(b.N), "ddb-calls/op")
}

// forget deletes, untimed, the record (if pk is not empty) and the charge
// row one operation stored, so the tables stay as small as they started:
// the emulator's transactions slow down as its tables grow
// (BenchmarkEmulatorTransactWriteItems), DynamoDB's do not.
func forget(b *testing.B, db *dynamodb.Client, idemTable, pk, chargesTable, id string) {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	if pk != "" {
		if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(idemTable),
			Key:       map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: pk}},
		}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(chargesTable),
		Key: map[string]types.AttributeValue{
			charge.AttrTenant: &types.AttributeValueMemberS{Value: tenant}, charge.AttrID: &types.AttributeValueMemberS{Value: id},
		},
	}); err != nil {
		b.Fatal(err)
	}
}

// chargeRow is a charge row of the shape the service writes.
func chargeRow(table, id string) types.TransactWriteItem {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(table),
		Item: map[string]types.AttributeValue{
			charge.AttrTenant: s(tenant), charge.AttrID: s(id),
			"amount": &types.AttributeValueMemberN{Value: "1500"}, "currency": s("EUR"), "description": s("order 42"),
			"status": s("succeeded"), "provider_reference": s("co_0123456789abcdef0123456789abcdef"),
			"provider_charge_id": s("pc_0123456789abcdef"), "idempotency_key": s(id),
			"created_at": s("2026-01-01T00:00:00.000Z"),
		},
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": charge.AttrID},
	}}
}

// BenchmarkHandlerFirstCall is POST /charges with a fresh key through the
// real handler: Begin, the provider simulator over HTTP, Commit.
func BenchmarkHandlerFirstCall(b *testing.B) {
	s, c := counted(b)
	var (
		lat latencies
		cpu cpuClock
	)
	b.ReportAllocs()
	c.Snapshot()
	cpu.start()
	for b.Loop() {
		key := newKey()
		id := handle(b, &lat, s.handler.Handle, post(key, visa), http.StatusCreated)
		cpu.stop()
		forget(b, s.db, s.cfg.IdempotencyTable, storeKey(b, key).String(), s.cfg.ChargesTable, id)
		cpu.start()
	}
	cpu.stop()
	reportCalls(b, c)
	lat.report(b)
	cpu.report(b)
	measureOwn(b, s.handler.Handle, func(key, id string) {
		forget(b, s.db, s.cfg.IdempotencyTable, storeKey(b, key).String(), s.cfg.ChargesTable, id)
	})
}

// BenchmarkHandlerReplay repeats one completed request: Begin fails its
// condition and returns the stored answer.
func BenchmarkHandlerReplay(b *testing.B) {
	s, c := counted(b)
	req := post(newKey(), visa)
	var lat latencies
	handle(b, &lat, s.handler.Handle, req, http.StatusCreated)
	lat = nil
	var cpu cpuClock
	b.ReportAllocs()
	c.Snapshot()
	cpu.start()
	for b.Loop() {
		handle(b, &lat, s.handler.Handle, req, http.StatusCreated)
	}
	cpu.stop()
	reportCalls(b, c)
	lat.report(b)
	cpu.report(b)
}

// BenchmarkNaiveFirstCall is the same request through a handler without
// idempotency: the provider call and one PutItem of the charge row. Its
// retry is another first call, which charges again.
func BenchmarkNaiveFirstCall(b *testing.B) {
	s, c := counted(b)
	var (
		lat latencies
		cpu cpuClock
	)
	b.ReportAllocs()
	c.Snapshot()
	cpu.start()
	for b.Loop() {
		id := handle(b, &lat, s.naive.Handle, post(newKey(), visa), http.StatusCreated)
		cpu.stop()
		forget(b, s.db, "", "", s.cfg.ChargesTable, id)
		cpu.start()
	}
	cpu.stop()
	reportCalls(b, c)
	lat.report(b)
	cpu.report(b)
	measureOwn(b, s.naive.Handle, func(_, id string) { forget(b, s.db, "", "", s.cfg.ChargesTable, id) })
}

// BenchmarkEmulatorPutItem is the floor under every figure above: one
// unconditional PutItem of a small item, one at a time (serial) and from
// 8 goroutines per GOMAXPROCS at once (parallel). The emulator runs DynamoDB requests
// under one lock, so parallel callers cannot make it go faster.
func BenchmarkEmulatorPutItem(b *testing.B) {
	db := testkit.Clients(b).DynamoDB
	table := testkit.TempTable(b, dynamostore.TableInput("idem"))
	var n atomic.Int64
	put := func() error {
		_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]types.AttributeValue{
				dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "put#" + strconv.FormatInt(n.Add(1), 10)},
				"status":           &types.AttributeValueMemberS{Value: "SUCCEEDED"},
				"fingerprint":      &types.AttributeValueMemberS{Value: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
			},
		})
		return err
	}
	throughput := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for b.Loop() {
			if err := put(); err != nil {
				b.Fatal(err)
			}
		}
		throughput(b, start)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8) // 8 × GOMAXPROCS goroutines
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := put(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		throughput(b, start)
	})
}

// BenchmarkEmulatorTransactWriteItems commits two new items in one
// transaction on a table holding items=N others (they are deleted again,
// untimed, after each operation). The emulator snapshots only the items a
// transaction names, so the cost stays flat as the table grows, as
// DynamoDB's does; with EMULATOR_FAST_TRANSACTIONS=0 it deep-copies every
// table the transaction names, as moto does, and the cost grows with N.
func BenchmarkEmulatorTransactWriteItems(b *testing.B) {
	db := testkit.Clients(b).DynamoDB
	for _, size := range []int{0, 1000, 10000} {
		b.Run("items="+strconv.Itoa(size), func(b *testing.B) {
			table := testkit.TempTable(b, dynamostore.TableInput("idem"))
			fillTable(b, db, table, size)
			item := func(pk string) types.TransactWriteItem {
				return types.TransactWriteItem{Put: &types.Put{
					TableName: aws.String(table),
					Item: map[string]types.AttributeValue{
						dynamostore.AttrPK: &types.AttributeValueMemberS{Value: pk},
						"status":           &types.AttributeValueMemberS{Value: "SUCCEEDED"},
						"fingerprint":      &types.AttributeValueMemberS{Value: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
					},
				}}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{
					TransactItems: []types.TransactWriteItem{item("tx#a"), item("tx#b")},
				}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer() // back to size items
				for _, pk := range []string{"tx#a", "tx#b"} {
					if _, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
						TableName: aws.String(table),
						Key:       map[string]types.AttributeValue{dynamostore.AttrPK: &types.AttributeValueMemberS{Value: pk}},
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}

// fillTable writes n small items to table, 25 to a BatchWriteItem.
func fillTable(b *testing.B, db *dynamodb.Client, table string, n int) {
	b.Helper()
	for start := 0; start < n; start += 25 {
		var reqs []types.WriteRequest
		for i := start; i < min(start+25, n); i++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
				dynamostore.AttrPK: &types.AttributeValueMemberS{Value: "fill#" + strconv.Itoa(i)},
				"status":           &types.AttributeValueMemberS{Value: "SUCCEEDED"},
			}}})
		}
		out, err := db.BatchWriteItem(context.Background(), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
		if err != nil {
			b.Fatal(err)
		}
		if len(out.UnprocessedItems) > 0 {
			b.Fatalf("fill: %d unprocessed", len(out.UnprocessedItems[table]))
		}
	}
}
