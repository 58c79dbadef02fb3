package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The committed sources of docs/capacity.md, from this package's directory.
const (
	committedMeasured = "../../docs/capacity-measured.json"
	committedInputs   = "../../docs/capacity-inputs.json"
	committedTemplate = "../../template.yaml"
	committedDoc      = "../../docs/capacity.md"
)

// TestCapacityDocIsGenerated holds docs/capacity.md to what cmd/capacity
// renders from the committed snapshot, inputs and template.yaml: after
// changing any of them, or the model, run make capacity.
func TestCapacityDocIsGenerated(t *testing.T) {
	want, err := capacityDoc(committedMeasured, committedInputs, committedTemplate)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committedDoc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/capacity.md is not what cmd/capacity renders from the committed inputs: run make capacity")
	}
}

// testInputs is the committed inputs with some values replaced.
func testInputs(t *testing.T, values map[string]float64) capacityInputs {
	t.Helper()
	in, err := readInputs(committedInputs)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range in.Figures {
		if v, ok := values[f.Key]; ok {
			in.Figures[i].Value = v
			if len(f.Tiers) > 0 {
				in.Figures[i].Tiers = []tier{{Price: v}}
			}
		}
	}
	return in
}

// testMeasurement is a snapshot with round figures: a first charge of 3
// idempotency WCU (2 of them on the index) and 2 charges WCU, a replay and
// an in-flight claim of 1 WCU, and an emulator that costs 1 ms a call.
func testMeasurement() measurement {
	idem := func(wcu, index, rcu, size int) map[string]tableFigures {
		return map[string]tableFigures{tableIdempotency: {WCU: wcu, IndexWCU: index, RCU: rcu, LargestItemBytes: size}}
	}
	first := idem(3, 2, 0, 924)
	first[tableCharges] = tableFigures{WCU: 2, LargestItemBytes: 400}
	shared := idem(3, 2, 0, 924)
	shared[tableCharges] = tableFigures{WCU: 2, LargestItemBytes: 400}
	shared[tableLimits] = tableFigures{WCU: 1, LargestItemBytes: 60}
	reconcile := idem(3, 3, 1, 614)
	reconcile[tableCharges] = tableFigures{WCU: 2, LargestItemBytes: 400}
	return measurement{
		MeasuredAt: "2026-12-01 00:00 UTC",
		RoundTrips: roundTripFigures{Index: "stuck-leases", Outcomes: []outcomeFigures{
			{ID: outcomeFirst, Calls: map[string]int{"PutItem": 1, "TransactWriteItems": 1}, Tables: first, LogBytes: 800},
			{ID: outcomeShared, Calls: map[string]int{"PutItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}, Tables: shared, LogBytes: 800},
			{ID: outcomeReplay, Calls: map[string]int{"PutItem": 1}, Tables: idem(1, 0, 0, 924), LogBytes: 600},
			{ID: outcomeCached, Calls: map[string]int{}, Tables: map[string]tableFigures{}, LogBytes: 600},
			{ID: outcomeInFlight, Calls: map[string]int{"PutItem": 1}, Tables: idem(1, 0, 0, 300), LogBytes: 500},
			{ID: outcomeUnknown, Calls: map[string]int{"PutItem": 1}, Tables: idem(1, 1, 0, 300), LogBytes: 700},
			{ID: outcomeReconcile, Calls: map[string]int{"GetItem": 1, "UpdateItem": 1, "TransactWriteItems": 1}, Tables: reconcile},
		}},
		Bench: map[string]benchFigure{
			benchFirstCall:   {MsPerOp: 12, P50Ms: 12, P99Ms: 20},
			benchReplay:      {MsPerOp: 3, P50Ms: 3, P99Ms: 5},
			benchEmulatorPut: {MsPerOp: 1},
			benchEmulatorTx:  {MsPerOp: 1},
		},
	}
}

func testDeployment() deployment {
	return deployment{
		MemoryMB: 512, ChargeTimeout: 10 * time.Second, CommitReserve: 2 * time.Second, InflightWait: 2 * time.Second,
		ReplayCache: 100, SweepEvery: time.Minute, SweepSchedule: "rate(1 minute)", ReconcileBatch: 10, Shards: 10, SweepMaxKeys: 600,
		ChargeReserved: 500, APIRate: 2000, APIBurst: 1000, DeferrableRate: 100, DeferrableBurst: 50, DeferrableRoutes: 4,
		IntakeMaxConcurrency: 50, TenantRate: 100, TenantConcurrency: 50, LimitsMaxAge: time.Minute,
		SyncEvery: 5, SyncShare: 20, HotShare: 200, HotSpan: 10, SyncBusy: 500 * time.Millisecond, ShedFor: 5 * time.Second,
		AuditBatch: 100, AuditRetentionDays: 400, AuditIndexDays: 92,
	}
}

func closeTo(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// TestCapacityModel checks the arithmetic on a load worked by hand: 1,000
// logical charges a second, 10% retried once, 2% twins, 0.2% unknown.
func TestCapacityModel(t *testing.T) {
	in := testInputs(t, map[string]float64{
		inLogical: 1000, inRetriedOnce: 0.1, inRetriedTwice: 0, inTwins: 0.02, inAmbiguous: 0.002,
		inRetentionShort: 24, inRetentionLong: 48, inTTLLag: 24, inItemOverhead: 100, inPartitionGB: 10,
		inPartitionWCU: 1000, inPartitionRCU: 3000, inDynamoLatency: 5, inHoursPerMonth: 100, inLambdaQuota: 1000,
		inXRayReservoir: 1, inXRayRate: 0.1, inEventualRRU: 0.5, inFirstPause: 50, inMaxPause: 400,
		priceWrite: 1, priceRead: 1, priceStorage: 1, pricePITR: 0, priceLambdaGBs: 1e-5, priceLambdaReq: 1,
		priceAPIGateway: 1, priceSQS: 1, priceLogs: 1, priceXRay: 1,
		inAuditEntryBytes: 100, inActorBytes: 150, priceS3Put: 1, priceS3Storage: 1, priceProvisionedWCU: 0.001, priceAthena: 5,
	})
	c, err := model(testMeasurement(), in, testDeployment())
	if err != nil {
		t.Fatal(err)
	}
	// The mix: 998 first charges, 100 replays, 20 twins, 2 unknown.
	closeTo(t, "first", c.First, 998)
	closeTo(t, "replays", c.Replays, 100)
	closeTo(t, "requests", c.Requests, 1120)
	// A first call on AWS: 12 ms less 2 emulator calls of 1 ms, plus 2 × 5 ms;
	// its twins claim at 0 and 50 ms, and the second claim gets the replay.
	closeTo(t, "first call on AWS", c.Durations[0].AWS, 20)
	if c.TwinClaims != 2 {
		t.Errorf("twin claims %d, want 2", c.TwinClaims)
	}
	// Idempotency: 998×3 + 100×1 + 20×(1 in flight + 1 replay) + 2×1 + 2×3.
	closeTo(t, "idempotency WCU/s", c.IdemWCU, 2994+100+40+2+6)
	// Index: 998×2 + 2×1 + 2×3; the sweeper's 10 queries a minute at 0.5.
	closeTo(t, "index WCU/s", c.IndexWCU, 1996+2+6)
	closeTo(t, "index RCU/s", c.IndexRCU, 10.0/60*0.5)
	closeTo(t, "charges WCU/s", c.ChargesWCU, 998*2+2*2)
	closeTo(t, "idempotency RCU/s", c.IdemRCU, 2)
	closeTo(t, "idempotency partitions", c.IdemPartitionsThroughput, 4)
	closeTo(t, "charges partitions", c.ChargesPartitionsThroughput, 2)
	closeTo(t, "one tenant's charges/s", c.TenantChargesCeiling, 500)
	closeTo(t, "first charges/s the index takes", c.IndexFirstCallsCeiling, 10*1000/2)
	// Storage: 1,000 records a second for 24 h, of 924 + 100 bytes.
	short := c.Retentions[0]
	closeTo(t, "records at 24 h", short.Items, 86.4e6)
	closeTo(t, "GB at 24 h", short.GB, 86.4e6*1024/gib)
	closeTo(t, "partitions at 24 h", short.Partitions, math.Ceil(86.4e6*1024/gib/10))
	closeTo(t, "charges GB a day", c.ChargesGBPerDay, 86.4e6*500/gib)
	// One key: 1,000 WCU/s a partition, 1 WCU a replay; the partition at
	// 24 h also carries its share of the table's writes.
	closeTo(t, "hot key, isolated", c.HotKeyIsolated, 1000)
	closeTo(t, "hot key, shared", c.HotKeyShared, 1000-c.IdemWCU/short.Partitions)
	// Concurrency: (998 + 20) × 20 ms + 100 × (3 − 1 + 5) ms + 2 × 8 s.
	closeTo(t, "concurrency on AWS", c.ConcurrencyAWS, 1018*0.020+100*0.007+2*8)
	closeTo(t, "concurrency per 100 ms of provider", c.ConcurrencyPer100ms, 101.8)
	closeTo(t, "reconcile messages/s", c.ReconcileMessages, 4)
	closeTo(t, "sweeper keys/s", c.SweepKeysPerSecond, 10)
	// A month of 100 hours at $1 a million write units.
	month := 100 * 3600.0
	closeTo(t, "write cost", c.Costs[0].USD[0], (c.IdemWCU+c.IndexWCU+c.ChargesWCU)*month/1e6)
	closeTo(t, "API Gateway cost", c.Costs[8].USD[0], 1120*month/1e6)
	closeTo(t, "logs GB", c.LogGBMonth, (1018*800+100*600+2*700)*month/gib)
	closeTo(t, "traces/s", c.TracesPerSecond, 1+0.1*1119)
	// The audit trail: 1,000 charges written a second, 4 changes each, in
	// objects of 100; 3 index items each. TestRoundTrips' requests carry a
	// typical caller, so the measured 924-byte record holds it already.
	closeTo(t, "audit entries/s", c.AuditChanges, 4000)
	closeTo(t, "audit objects/s", c.AuditObjects, 40)
	closeTo(t, "audit index WCU/s", c.AuditIndexWCU, 3000)
	closeTo(t, "audit GB a day", c.AuditGBPerDay, 4000*86400*100.0/gib)
	closeTo(t, "audit GB retained", c.AuditGBRetained, 400*4000*86400*100.0/gib)
	closeTo(t, "audit index provisioned", c.AuditIndexProvisioned, 3000*100*0.001)
	closeTo(t, "audit index on demand", c.AuditIndexOnDemand, 3000*month/1e6)
	if c.RecordWithActorBytes != 924 {
		t.Errorf("record with its actor: %d B, want the measured %d", c.RecordWithActorBytes, 924)
	}
	closeTo(t, "total", c.CostTotal[0], sumCosts(c.Costs, 0))
	// The tenants' limits: a count per request adds a call (5 ms on a
	// 20 ms first charge) and 1 of 7 write units, for every request.
	if c.FirstCalls != 2 || c.SharedCalls != 3 || c.CounterCalls != 3 {
		t.Errorf("calls: first %d, shared %d, a per-request count %d; want 2, 3, 3", c.FirstCalls, c.SharedCalls, c.CounterCalls)
	}
	closeTo(t, "a count's write units", c.CounterWRU, 8)
	closeTo(t, "a count's latency share", c.CounterLatencyShare, 5.0/20)
	closeTo(t, "a count's WCU/s", c.CounterWCU, 1120)
	closeTo(t, "a count's cost", c.CounterUSD, 1120*month/1e6)
	closeTo(t, "a busy tenant's cost", c.BusyUSD, 1120*month/1e6/5)
	// A flood over ⌈37.06⌉ = 38 instances: 5 each unshared, then 1.
	closeTo(t, "flood, first second", c.FloodFirstSecond, 100+38*5)
	closeTo(t, "flood, after", c.FloodLater, 100+38)
	// Spread thin: 4 requests ended and 1 straddling on each, never shared.
	closeTo(t, "spread thin", c.SpreadRequests, 38*5)
	closeTo(t, "spread thin, with the shared part", c.SpreadTotal, 100+38*5)
	closeTo(t, "spread thin, at once", c.SpreadExecutions, 38*0.5)
	closeTo(t, "spread thin over the reservation", c.SpreadReserved, 500*5)
	closeTo(t, "a charge that shares first by its time", c.BusyChargeMs, 100)
	// Ends shared up to HotShare times, each instance's read, and as many
	// counts given back.
	closeTo(t, "a hot count's writes", c.HotCountWrites, 2*(200+38))
	closeTo(t, "override reads/s", c.OverrideReads, 38.0/60)
	closeTo(t, "a tenant's rows", c.TenantRowsWCU, 200)
	closeTo(t, "tenants to fill the reservation", c.TenantsToFill, 10)
	closeTo(t, "a tenant's request budget", c.TenantRequestBudgetMs, 500)
	// The account: 1,000 less 500 and the sweeper's 1; the intake's 50.
	closeTo(t, "unreserved", c.Unreserved, 499)
	closeTo(t, "the reconciler's", c.ReconcileKeeps, 449)
	closeTo(t, "provider latency the reservation covers", c.ReserveProviderMs, (500-c.ConcurrencyAWS)/101.8*100)
	closeTo(t, "gateway headroom", c.GatewayHeadroom, 2000.0/1120-1)
	closeTo(t, "provider latency the gateway fills it at", c.GatewayFillMs, 500.0/2000*1000-20)
	// Three reads of one call (7 ms), and refunds of 20 + 2 × 5 + 230 ms.
	closeTo(t, "deferrable concurrency", c.DeferrableConcurrency, 3*100*0.007+100*0.260)
	closeTo(t, "critical keeps", c.CriticalKeeps, 500-(3*100*0.007+100*0.260))
	closeTo(t, "replays a tenant's concurrency allows", c.ReplaysPerTenant, 50/0.007)
	if c.TwinClaimsMax != 8 {
		t.Errorf("a twin's claims %d, want 8", c.TwinClaimsMax)
	}
	// 4 twins at once, each 8 claims in 2 s.
	closeTo(t, "the WCU/s of the twins that wait on one key", c.TwinWaitWCU, 4*8/2)
	// A refused twin claims twice, 1 WCU each.
	closeTo(t, "the twins a second that fill a key's partition", c.TwinStormMax, (1000-4*8/2)/2)
	if c.CostTotal[1] <= c.CostTotal[0] {
		t.Errorf("48 h retention costs %v, no more than 24 h's %v", c.CostTotal[1], c.CostTotal[0])
	}
}

func sumCosts(rows []costRow, i int) float64 {
	total := 0.0
	for _, r := range rows {
		total += r.USD[i]
	}
	return total
}

func TestTwinClaims(t *testing.T) {
	for _, tt := range []struct {
		firstMs float64
		want    int
	}{
		{0, 1},     // finished before the twin asked: its one claim replays
		{25, 2},    // 0 in flight, 50 done
		{50, 2},    // done by the second claim
		{60, 3},    // 0, 50 in flight, 150 done
		{1000, 6},  // 0, 50, 150, 350, 750 in flight, 1150 done
		{5000, 8},  // in flight through INFLIGHT_WAIT: 0 … 1950, then 409
		{1950, 8},  // the last claim the wait allows finds it done
		{1951, 8},  // … or not
		{149, 3},   // 0, 50 in flight, 150 done
		{150.5, 4}, // 0, 50, 150 in flight, 350 done
	} {
		if got := twinClaims(tt.firstMs, 50, 400, 2*time.Second); got != tt.want {
			t.Errorf("first call of %v ms: %d claims, want %d", tt.firstMs, got, tt.want)
		}
	}
}

func TestTieredCost(t *testing.T) {
	api := figure{Value: 1, Tiers: []tier{{UpTo: 300, Price: 1}, {Price: 0.9}}}
	for _, tt := range []struct{ quantity, want float64 }{{0, 0}, {100, 100}, {300, 300}, {500, 300 + 200*0.9}} {
		closeTo(t, "tiered cost", api.cost(tt.quantity), tt.want)
	}
	closeTo(t, "flat cost", figure{Value: 0.25}.cost(8), 2)
}

func TestInputsCheck(t *testing.T) {
	in, err := readInputs(committedInputs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(*capacityInputs)
		want string
	}{
		{"missing", func(in *capacityInputs) { in.Figures = in.Figures[1:] }, "logical_per_second: missing"},
		{"twice", func(in *capacityInputs) { in.Figures = append(in.Figures, in.Figures[0]) }, "logical_per_second: given twice"},
		{"unknown", func(in *capacityInputs) {
			in.Figures = append(in.Figures, figure{Key: "gremlins", Label: "g", Source: "s"})
		}, "gremlins: not an input"},
		{"no source", func(in *capacityInputs) { in.Figures[0].Source = "" }, "logical_per_second: no label or source"},
		{"tiers", func(in *capacityInputs) {
			for i, f := range in.Figures {
				if f.Key == priceAPIGateway {
					in.Figures[i].Tiers = []tier{{UpTo: 300, Price: 1}}
				}
			}
		}, "the last tier open"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := in
			c.Figures = append([]figure(nil), in.Figures...)
			tt.edit(&c)
			if err := c.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestMeasure takes a snapshot from make bench's two outputs.
func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	rt, err := json.Marshal(testMeasurement().RoundTrips)
	if err != nil {
		t.Fatal(err)
	}
	roundTrips, bench := filepath.Join(dir, "roundtrips.json"), filepath.Join(dir, "bench.txt")
	if err := os.WriteFile(roundTrips, rt, 0o644); err != nil {
		t.Fatal(err)
	}
	out := `loadavg: 0.10 0.20 0.30
cpu: AMD EPYC
BenchmarkHandlerFirstCall-2   	     100	   9000000 ns/op	         2.000 ddb-calls/op	         8.000 p50-ms	        20.00 p99-ms
BenchmarkHandlerFirstCall-2   	     100	  11000000 ns/op	         2.000 ddb-calls/op	        10.00 p50-ms	        30.00 p99-ms
BenchmarkHandlerReplay-2      	     100	   2000000 ns/op	         1.000 ddb-calls/op	         2.000 p50-ms	         4.000 p99-ms
BenchmarkNaiveFirstCall-2     	     100	   2000000 ns/op	         1.000 ddb-calls/op
BenchmarkEmulatorPutItem/serial-2         	     500	   1700000 ns/op	       576.0 req/s
BenchmarkEmulatorTransactWriteItems/items=0-2  	     500	   2100000 ns/op
BenchmarkEmulatorTransactWriteItems/items=1000-2  	     50	   27000000 ns/op
`
	if err := os.WriteFile(bench, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := measure(roundTrips, bench, time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if m.MeasuredAt != "2026-12-01 09:30 UTC" || m.LoadAvg != "0.10 0.20 0.30" || m.CPU != "AMD EPYC" || len(m.RoundTrips.Outcomes) != 7 || m.RoundTripsAt != "" {
		t.Errorf("snapshot %+v", m)
	}
	if got, want := m.Bench[benchFirstCall], (benchFigure{MsPerOp: 10, P50Ms: 9, P99Ms: 25}); got != want {
		t.Errorf("first call %+v, want the medians %+v", got, want)
	}
	if _, ok := m.Bench["BenchmarkNaiveFirstCall"]; ok || len(m.Bench) != 4 {
		t.Errorf("benchmarks %v, want only the four the model reads", m.Bench)
	}
	if err := os.WriteFile(bench, []byte(strings.ReplaceAll(out, "items=0", "items=10")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := measure(roundTrips, bench, time.Now()); err == nil || !strings.Contains(err.Error(), benchEmulatorTx) {
		t.Errorf("a run without %s: %v", benchEmulatorTx, err)
	}
}

// TestMeasureRoundTripsAlone takes the round trips again into a snapshot
// and keeps its benchmarks, saying when.
func TestMeasureRoundTripsAlone(t *testing.T) {
	dir := t.TempDir()
	old := testMeasurement()
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	measured, roundTrips := filepath.Join(dir, "measured.json"), filepath.Join(dir, "roundtrips.json")
	fresh := old.RoundTrips
	fresh.Outcomes = append([]outcomeFigures(nil), fresh.Outcomes...)
	fresh.Outcomes[0].LogBytes = 999
	rt, err := json.Marshal(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(measured, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roundTrips, rt, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := measureRoundTrips(measured, roundTrips, time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if m.MeasuredAt != old.MeasuredAt || m.RoundTripsAt != "2026-12-07 10:00 UTC" || m.RoundTrips.Outcomes[0].LogBytes != 999 || m.Bench[benchFirstCall] != old.Bench[benchFirstCall] {
		t.Errorf("snapshot %+v", m)
	}
	fresh.Outcomes = fresh.Outcomes[2:] // no first charge, and no shared one
	if rt, err = json.Marshal(fresh); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roundTrips, rt, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := measureRoundTrips(measured, roundTrips, time.Now()); err == nil || !strings.Contains(err.Error(), outcomeShared) {
		t.Errorf("round trips without %s: %v", outcomeShared, err)
	}
}

func TestReadDeployment(t *testing.T) {
	src, err := os.ReadFile(committedTemplate)
	if err != nil {
		t.Fatal(err)
	}
	d, err := readDeployment(src)
	if err != nil {
		t.Fatal(err)
	}
	if d.MemoryMB <= 0 || d.ChargeTimeout <= d.CommitReserve || d.InflightWait <= 0 || d.SweepEvery <= 0 || d.ReconcileBatch <= 0 || d.Shards <= 0 || d.SweepMaxKeys <= 0 ||
		d.AuditBatch <= 0 || d.AuditRetentionDays <= 0 || d.AuditIndexDays <= 0 {
		t.Errorf("deployment %+v", d)
	}
	if d.ChargeReserved <= 0 || d.APIRate <= d.DeferrableRate || d.DeferrableRoutes != 4 || d.IntakeMaxConcurrency <= 0 ||
		d.TenantRate <= 0 || d.TenantConcurrency <= 0 || d.LimitsMaxAge <= 0 {
		t.Errorf("the abuse controls in %+v", d)
	}
	// A route's rate that is not the parameter's is refused.
	bad := strings.Replace(string(src), "ThrottlingRateLimit: !Ref ApiRateLimit", "ThrottlingRateLimit: 9999", 1)
	if _, err := readDeployment([]byte(bad)); err == nil || !strings.Contains(err.Error(), "ApiRateLimit") {
		t.Errorf("a literal rate: %v", err)
	}
	if _, err := readDeployment([]byte("Globals: {}\n")); err == nil || !strings.Contains(err.Error(), "no Globals.Function.MemorySize") {
		t.Errorf("a template without the figures: %v", err)
	}
	for expr, want := range map[string]time.Duration{"rate(1 minute)": time.Minute, "rate(5 minutes)": 5 * time.Minute, "rate(2 hours)": 2 * time.Hour, "rate(1 day)": 24 * time.Hour} {
		if got, err := parseRate(expr); err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", expr, got, err, want)
		}
	}
	for _, expr := range []string{"cron(0 * * * ? *)", "rate(0 minutes)", "rate(1 fortnight)", "rate(1minute)"} {
		if _, err := parseRate(expr); err == nil {
			t.Errorf("%s accepted", expr)
		}
	}
}

func TestGrouped(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		dec  int
		want string
	}{{0, 0, "0"}, {999, 0, "999"}, {1000, 0, "1,000"}, {1234567.891, 2, "1,234,567.89"}, {-2500, 0, "-2,500"}, {-0.001, 1, "0.0"}} {
		if got := grouped(tt.v, tt.dec); got != tt.want {
			t.Errorf("grouped(%v, %d) = %q, want %q", tt.v, tt.dec, got, tt.want)
		}
	}
}
