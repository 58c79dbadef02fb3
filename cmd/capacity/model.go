package main

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/chargeonce/chargeonce/internal/limit"
)

// gib is DynamoDB's GB: all its size measurements are binary.
const gib = 1 << 30

// capacity is the model's result, what docs/capacity.md shows.
type capacity struct {
	In capacityInputs
	M  measurement
	D  deployment

	// The load, per second.
	Logical, SeedsRequests, Requests       float64
	First, Replays, Twins, Unknown         float64
	RetriedOnce, RetriedTwice, TwinShare   float64
	AmbiguousShare                         float64
	TwinClaims                             int // conditional PutItems a twin makes while its first call runs on AWS
	Outcomes                               []outcomeRow
	Flows                                  []flowRow
	IdemWCU, IdemRCU, IndexWCU, IndexRCU   float64
	ChargesWCU                             float64
	WriteUnits, ReadUnits                  float64 // all tables and the index
	SweepQueriesPerRun, SweepRunsPerHour   float64
	SweepKeysPerSecond                     float64 // the most the sweeper queues
	ReconcileMessages, SQSRequests         float64 // per second
	SweepFoundPerRun, SQSBatchesPerRun     float64 // if the reconciler settled none of the unknown keys first
	FirstChargeWRU                         float64 // write units of one first charge, tables and index
	WriteShare                             float64 // of the monthly bill
	StuckIndexed                           float64 // in-flight records in the index at any time (AWS estimate)
	IdemPartitionsThroughput               float64
	ChargesPartitionsThroughput            float64
	IndexPartitionsThroughput              float64
	TenantChargesCeiling                   float64 // charges per second of one tenant on one partition
	IndexFirstCallsCeiling                 float64 // first calls per second the index's shards take
	ReplayWCU, InFlightWCU                 float64
	HotKeyIsolated, HotKeyShared           float64 // replays per second of one key before throttling
	Partitions24                           float64 // idempotency partitions at the short retention, for HotKeyShared
	IdemWCUPerPartition, IndexWCUPerShard  float64
	WarmNeeded                             []string
	Durations                              []durationRow
	ConcurrencyEmuP50, ConcurrencyEmuP99   float64
	ConcurrencyAWS                         float64
	ConcurrencyPer100ms                    float64
	ProviderHeadroomMs                     float64 // provider latency that fills the default quota
	ScaleUpSeconds                         float64
	CacheStormWCU                          float64 // DynamoDB writes of a retry storm on one key with a warm cache
	Retentions                             []retentionRow
	ChargesRowBytes, ChargesRowsPerDay     float64
	ChargesGBPerDay, ChargesGBMonth        float64 // per day; at the end of the first month
	ChargesGBYear                          float64
	ChargesPartitionsYear                  float64
	IdemItemBytes                          float64
	LogBytesPerSecond, LogGBMonth          float64
	TracesPerSecond                        float64
	MonthSeconds, MonthDays                float64
	Costs                                  []costRow
	CostTotal                              [2]float64
	LambdaPer100ms, ChargesStoragePerMonth float64 // what each 100 ms of provider latency, and each further month of charges, add

	// Tenants' limits: the count each way of keeping it costs a first
	// charge, and what the built one lets through.
	FirstCalls, SharedCalls, CounterCalls int
	SharedWCU, SharedWRU, CounterWRU      float64 // a shared first charge's limits WCU and write units; a per-request counter's
	CounterWRUShare, CounterLatencyShare  float64 // what a per-request counter adds to a first charge
	CounterWCU, CounterUSD                float64 // per second, and a month, at the seeds' load
	BusyUSD                               float64 // a month, were every charge a busy tenant's
	CounterBillShare                      float64 // CounterUSD, of the bill at the short retention
	FirstAWS, ReplayAWS                   float64 // ms on AWS, the Lambda section's estimates
	Instances                             float64 // the AWS estimate's concurrency, rounded up
	FloodFirstSecond, FloodLater          float64 // a flood's admissions a second at the default rate over the AWS estimate's instances
	SpreadRequests, SpreadTotal           float64 // a second, a tenant spread thin over those instances: never shared; with the shared part
	SpreadExecutions                      float64 // at once, the handler time of the part never shared
	SpreadReserved                        float64 // requests a second never shared over the reservation's instances
	BusyChargeMs                          float64 // a charge longer than this shares before SyncEvery of them
	HotCountWrites                        float64 // a hot tenant's count's writes a second, at most
	OverrideReads                         float64 // Query calls a second for the fleet
	TenantRowsWCU, TenantRowsShare        float64 // a tenant at the default rate on its charges partition
	TenantConcShare, TenantsToFill        float64 // the default concurrency, of the reservation
	TenantRequestBudgetMs                 float64 // how long each request of a tenant at its rate may take
	Unreserved, ReconcileKeeps            float64 // the account's concurrency left, and the reconciler's share
	ReserveProviderMs, GatewayFillMs      float64 // provider latencies the reservation, and the gateway's rate, reach it at
	GatewayHeadroom                       float64 // the critical routes' rate over the seeds' requests
	DeferrableConcurrency, CriticalKeeps  float64 // at GatewayFillMs
	ReplaysPerTenant                      float64 // a second, what a tenant's concurrency allows
	TwinClaimsMax                         int     // claims of one twin through INFLIGHT_WAIT
	MaxWaiters, TwinWaitersMax            int     // twins that start waiting on one key a window; that wait at once
	TwinWaitWCU                           float64 // WCU/s on one in-flight key by the twins that wait
	RefusedTwinWCU                        float64 // WCU a twin refused a wait writes on its key's partition
	TwinStormMax                          float64 // twins a second on one key that fill its partition, or its wait item's
	SharedSpan                            int     // seconds one item of the limits table counts
	ConcurrencySpan                       int     // seconds a tenant's concurrency is averaged over

	// The audit trail, off the request path. Per second: the changes the
	// streams carry, the objects the audit function writes, the index
	// items it files them under. The archive's size a day and at its
	// retention, and the index's at its own.
	AuditChangesPerCharge, AuditIndexedPerCharge float64
	AuditChanges, AuditObjects, AuditIndexWCU    float64
	AuditGBPerDay, AuditGBRetained, AuditIndexGB float64
	AuditIndexOnDemand, AuditIndexProvisioned    float64 // USD a month
	AuditGBYear, AuditYearScan, AuditBatchKB     float64 // a year of entries; USD a query over it; an object's size
	RecordWithActorBytes                         int     // a first charge's record, with who asked
}

// A first charge's changes, as the streams carry them: its claim, its
// settlement, its row, and its record's deletion by TTL. The index files
// three of them apart: the claim and the settlement come in one batch of
// the idempotency table's stream. internal/audit's
// TestEveryCommandLeavesItsEntries shows them.
const (
	auditChangesPerCharge = 4
	auditIndexedPerCharge = 3
	// auditIndexItemBytes is an index item: its key hash, its object's
	// name, its expiry, and their attributes' names.
	auditIndexItemBytes = 7 + 16 + 6 + 84 + 7 + 6
)

// outcomeRow is one measured outcome the model uses.
type outcomeRow struct {
	outcomeFigures
	Calls string
}

// flowRow is one stream of the load: requests per second of one measured
// outcome. Each runs it Times times. It carries what it costs per second.
type flowRow struct {
	Name                                             string
	Outcome                                          string
	PerSec                                           float64
	Times                                            float64
	IdemWCU, IndexWCU, ChargesWCU, IdemRCU, IndexRCU float64
}

// durationRow is one kind of request's duration, on the emulator and as
// estimated on AWS. It carries its share of the charge function's
// concurrency.
type durationRow struct {
	Name                string
	PerSec              float64
	EmuP50, EmuP99, AWS float64 // ms
	Calls               int
	Basis               string
	ConcurrencyEmuP50   float64
	ConcurrencyEmuP99   float64
	ConcurrencyAWS      float64
}

// retentionRow is the idempotency table at one retention.
type retentionRow struct {
	Hours                      float64
	Items, GB, LagItems, LagGB float64 // at the retention; expired items TTL has yet to delete
	Partitions, LagPartitions  float64 // for size and throughput together
}

// costRow is one line of the monthly estimate, at the short and at the
// long retention.
type costRow struct {
	Name, Quantity string
	USD            [2]float64
}

// model computes the capacity model.
func model(m measurement, in capacityInputs, d deployment) (capacity, error) {
	if err := m.check(); err != nil {
		return capacity{}, err
	}
	if err := in.check(); err != nil {
		return capacity{}, err
	}
	c := capacity{In: in, M: m, D: d}
	c.Logical = in.v(inLogical)
	c.RetriedOnce, c.RetriedTwice = in.v(inRetriedOnce), in.v(inRetriedTwice)
	c.TwinShare, c.AmbiguousShare = in.v(inTwins), in.v(inAmbiguous)
	c.Replays = c.Logical * (c.RetriedOnce + 2*c.RetriedTwice)
	c.SeedsRequests = c.Logical + c.Replays
	c.Twins = c.Logical * c.TwinShare
	c.Unknown = c.Logical * c.AmbiguousShare
	c.First = c.Logical - c.Unknown
	c.Requests = c.SeedsRequests + c.Twins
	c.MonthSeconds = in.v(inHoursPerMonth) * 3600
	c.MonthDays = in.v(inHoursPerMonth) / 24

	out := func(id string) outcomeFigures { o, _ := m.outcome(id); return o }
	for _, id := range outcomeIDs {
		o := out(id)
		c.Outcomes = append(c.Outcomes, outcomeRow{outcomeFigures: o, Calls: callList(o.Calls)})
	}

	// Durations: make bench's handler benchmarks on the emulator, and the
	// same with the emulator's time per call replaced by DynamoDB's.
	latency := in.v(inDynamoLatency)
	emuCall := func(op string) float64 {
		if op == "TransactWriteItems" {
			return m.Bench[benchEmulatorTx].MsPerOp
		}
		return m.Bench[benchEmulatorPut].MsPerOp
	}
	onAWS := func(p50 float64, calls map[string]int) (float64, int) {
		own, n := p50, 0
		for op, k := range calls {
			own -= float64(k) * emuCall(op)
			n += k
		}
		return math.Max(own, 0) + float64(n)*latency, n
	}
	firstAWS, firstCalls := onAWS(m.Bench[benchFirstCall].P50Ms, out(outcomeFirst).Calls)
	replayAWS, replayCalls := onAWS(m.Bench[benchReplay].P50Ms, out(outcomeReplay).Calls)
	c.TwinClaims = twinClaims(firstAWS, in.v(inFirstPause), in.v(inMaxPause), d.InflightWait)

	// DynamoDB work, per second.
	c.Flows = []flowRow{
		c.flow("first charges", outcomeFirst, c.First, 1),
		c.flow("retries answered with the replay", outcomeReplay, c.Replays, 1),
		c.flow("concurrent twins: claims while the first call runs", outcomeInFlight, c.Twins, float64(c.TwinClaims-1)),
		c.flow("concurrent twins: the claim that gets the replay", outcomeReplay, c.Twins, 1),
		c.flow("outcome unknown (the provider timed out)", outcomeUnknown, c.Unknown, 1),
		c.flow("their reconciliation (the provider had charged)", outcomeReconcile, c.Unknown, 1),
	}
	c.SweepRunsPerHour = float64(time.Hour) / float64(d.SweepEvery)
	c.SweepQueriesPerRun = float64(d.Shards)
	// A query of the index reads eventually consistently. An empty or small
	// page is the minimum: one 4 KB unit at the eventual rate.
	sweep := flowRow{Name: "sweeper: one Query per stuck-lease shard per run", PerSec: c.SweepQueriesPerRun * c.SweepRunsPerHour / 3600, Times: 1}
	sweep.IndexRCU = sweep.PerSec * in.v(inEventualRRU)
	c.Flows = append(c.Flows, sweep)
	for _, f := range c.Flows {
		c.IdemWCU += f.IdemWCU
		c.IndexWCU += f.IndexWCU
		c.ChargesWCU += f.ChargesWCU
		c.IdemRCU += f.IdemRCU
		c.IndexRCU += f.IndexRCU
	}
	c.WriteUnits = c.IdemWCU + c.IndexWCU + c.ChargesWCU
	c.ReadUnits = c.IdemRCU + c.IndexRCU

	// Partitions for throughput, and the ceilings of single keys.
	pw, pr := in.v(inPartitionWCU), in.v(inPartitionRCU)
	c.IdemPartitionsThroughput = math.Ceil(c.IdemWCU/pw + c.IdemRCU/pr)
	c.ChargesPartitionsThroughput = math.Ceil(c.ChargesWCU / pw)
	c.IndexPartitionsThroughput = math.Ceil(c.IndexWCU/pw + c.IndexRCU/pr)
	first := out(outcomeFirst)
	for _, t := range first.Tables {
		c.FirstChargeWRU += float64(t.WCU + t.IndexWCU)
	}
	if w := first.Tables[tableCharges].WCU; w > 0 {
		c.TenantChargesCeiling = pw / float64(w)
	}
	if w := first.Tables[tableIdempotency].IndexWCU; w > 0 {
		c.IndexFirstCallsCeiling = float64(d.Shards) * pw / float64(w)
	}
	for _, t := range []struct {
		name string
		wru  float64
	}{{"the idempotency table", c.IdemWCU}, {"its stuck-leases index", c.IndexWCU}, {"the charges table", c.ChargesWCU}} {
		if t.wru > in.v(inWarmWRU) {
			c.WarmNeeded = append(c.WarmNeeded, fmt.Sprintf("%s (%s write units/s)", t.name, grouped(t.wru, 0)))
		}
	}

	// Storage.
	overhead := in.v(inItemOverhead)
	c.IdemItemBytes = float64(first.Tables[tableIdempotency].LargestItemBytes) + overhead
	c.ChargesRowBytes = float64(first.Tables[tableCharges].LargestItemBytes) + overhead
	c.ChargesRowsPerDay = c.Logical * 86400 // every command that charged has its row, reconciled ones included
	c.ChargesGBPerDay = c.ChargesRowsPerDay * c.ChargesRowBytes / gib
	c.ChargesGBMonth = c.ChargesGBPerDay * c.MonthDays
	c.ChargesGBYear = c.ChargesGBPerDay * 365
	partitions := func(wcu, rcu, gb float64) float64 {
		return math.Max(math.Ceil(wcu/pw+rcu/pr), math.Ceil(gb/in.v(inPartitionGB)))
	}
	c.ChargesPartitionsYear = partitions(c.ChargesWCU, 0, c.ChargesGBYear)
	lag := in.v(inTTLLag)
	for _, key := range []string{inRetentionShort, inRetentionLong} {
		h := in.v(key)
		r := retentionRow{Hours: h, Items: c.Logical * h * 3600, LagItems: c.Logical * lag * 3600}
		r.GB, r.LagGB = r.Items*c.IdemItemBytes/gib, r.LagItems*c.IdemItemBytes/gib
		r.Partitions = partitions(c.IdemWCU, c.IdemRCU, r.GB)
		r.LagPartitions = partitions(c.IdemWCU, c.IdemRCU, r.GB+r.LagGB)
		c.Retentions = append(c.Retentions, r)
	}

	// One key under a retry storm.
	c.ReplayWCU = float64(out(outcomeReplay).Tables[tableIdempotency].WCU)
	c.InFlightWCU = float64(out(outcomeInFlight).Tables[tableIdempotency].WCU)
	if c.ReplayWCU == 0 {
		return capacity{}, errors.New("a replay that writes nothing: the hot-key model needs its conditional PutItem")
	}
	c.HotKeyIsolated = pw / c.ReplayWCU
	c.Partitions24 = c.Retentions[0].Partitions
	c.IdemWCUPerPartition = c.IdemWCU / c.Partitions24
	c.HotKeyShared = math.Max(0, pw-c.IdemWCUPerPartition) / c.ReplayWCU
	c.IndexWCUPerShard = c.IndexWCU / float64(d.Shards)

	// Lambda: Little's law over the charge function's requests.
	unknownMs := float64(d.ChargeTimeout-d.CommitReserve) / float64(time.Millisecond)
	fb, rb := m.Bench[benchFirstCall], m.Bench[benchReplay]
	c.Durations = []durationRow{
		{Name: "first charge", PerSec: c.First, EmuP50: fb.P50Ms, EmuP99: fb.P99Ms, AWS: firstAWS, Calls: firstCalls, Basis: benchFirstCall},
		{Name: "concurrent twin (waits for its first call)", PerSec: c.Twins, EmuP50: fb.P50Ms, EmuP99: fb.P99Ms, AWS: firstAWS, Calls: firstCalls, Basis: benchFirstCall},
		{Name: "replay", PerSec: c.Replays, EmuP50: rb.P50Ms, EmuP99: rb.P99Ms, AWS: replayAWS, Calls: replayCalls, Basis: benchReplay},
		{Name: "outcome unknown (the provider call runs out its time)", PerSec: c.Unknown, EmuP50: unknownMs, EmuP99: unknownMs, AWS: unknownMs, Basis: "ChargeFunction Timeout − COMMIT_RESERVE"},
	}
	for i := range c.Durations {
		r := &c.Durations[i]
		r.ConcurrencyEmuP50, r.ConcurrencyEmuP99, r.ConcurrencyAWS = r.PerSec*r.EmuP50/1000, r.PerSec*r.EmuP99/1000, r.PerSec*r.AWS/1000
		c.ConcurrencyEmuP50 += r.ConcurrencyEmuP50
		c.ConcurrencyEmuP99 += r.ConcurrencyEmuP99
		c.ConcurrencyAWS += r.ConcurrencyAWS
	}
	c.ConcurrencyPer100ms = (c.First + c.Twins) * 0.1
	c.ProviderHeadroomMs = math.Max(0, in.v(inLambdaQuota)-c.ConcurrencyAWS) / (c.First + c.Twins) * 1000
	c.ScaleUpSeconds = math.Ceil(c.ConcurrencyAWS/in.v(inLambdaScaling)) * 10
	c.CacheStormWCU = math.Ceil(c.ConcurrencyAWS) * c.ReplayWCU

	// The sweeper and the reconcile queue.
	c.ReconcileMessages = 2 * c.Unknown // the charge function's own message, and the sweeper's if it finds the key first
	c.SweepKeysPerSecond = float64(d.SweepMaxKeys) * c.SweepRunsPerHour / 3600
	c.SweepFoundPerRun = c.Unknown * d.SweepEvery.Seconds()
	c.SQSBatchesPerRun = math.Ceil(c.SweepFoundPerRun / 10)
	c.SQSRequests = 3 * c.ReconcileMessages // sent, received, deleted: at most one request each
	c.StuckIndexed = c.First * firstAWS / 1000

	// Logs and traces.
	for _, f := range []struct {
		rate float64
		id   string
	}{{c.First + c.Twins, outcomeFirst}, {c.Replays, outcomeReplay}, {c.Unknown, outcomeUnknown}} {
		c.LogBytesPerSecond += f.rate * float64(out(f.id).LogBytes)
	}
	c.LogGBMonth = c.LogBytesPerSecond * c.MonthSeconds / gib
	c.TracesPerSecond = math.Min(c.Requests, in.v(inXRayReservoir)+in.v(inXRayRate)*math.Max(0, c.Requests-in.v(inXRayReservoir)))

	c.audit()
	c.costs()
	c.limits(in, d, firstAWS, replayAWS)
	return c, nil
}

// limits works out the tenants' limits. It prices each way of sharing a
// count, and what the built one lets through. It says what the reservation
// and the gateway's rates keep for charges.
func (c *capacity) limits(in capacityInputs, d deployment, firstAWS, replayAWS float64) {
	latency, pw := in.v(inDynamoLatency), in.v(inPartitionWCU)
	first, _ := c.M.outcome(outcomeFirst)
	shared, _ := c.M.outcome(outcomeShared)
	count := func(calls map[string]int) (n int) {
		for _, k := range calls {
			n += k
		}
		return n
	}
	c.FirstAWS, c.ReplayAWS = firstAWS, replayAWS
	c.FirstCalls, c.SharedCalls = count(first.Calls), count(shared.Calls)
	c.SharedWCU = float64(shared.Tables[tableLimits].WCU)
	for _, t := range shared.Tables {
		c.SharedWRU += float64(t.WCU + t.IndexWCU)
	}
	// A count written on every request: one more call and its write.
	c.CounterCalls = c.FirstCalls + 1
	c.CounterWRU = c.FirstChargeWRU + c.SharedWCU
	c.CounterWRUShare = c.SharedWCU / c.FirstChargeWRU
	c.CounterLatencyShare = latency / firstAWS
	c.CounterWCU = c.Requests * c.SharedWCU
	c.CounterUSD = in.get(priceWrite).cost(c.CounterWCU * c.MonthSeconds / 1e6)
	c.BusyUSD = c.CounterUSD / float64(d.SyncEvery)
	c.CounterBillShare = c.CounterUSD / c.CostTotal[0]
	// The built count, at the AWS estimate's instances. Each admits what
	// it has not shared: SyncEvery before it learns the tenant is near a
	// limit, then one. An instance under both thresholds never shares.
	// It ends one request fewer in a second, and one more may straddle
	// into the next: SyncEvery a second, never shared.
	instances := math.Ceil(c.ConcurrencyAWS)
	quiet := math.Max(float64(d.SyncEvery), d.TenantRate/float64(d.SyncShare))
	c.Instances = instances
	c.FloodFirstSecond = d.TenantRate + instances*quiet
	c.FloodLater = d.TenantRate + instances*math.Max(1, d.TenantRate/float64(d.HotShare))
	c.SpreadRequests = instances * quiet
	c.SpreadTotal = d.TenantRate + c.SpreadRequests
	c.SpreadExecutions = instances * d.SyncBusy.Seconds()
	c.SpreadReserved = d.ChargeReserved * quiet
	c.BusyChargeMs = float64(d.SyncBusy.Milliseconds()) / float64(d.SyncEvery)
	c.HotCountWrites = 2 * (float64(d.HotShare) + instances)
	c.OverrideReads = instances / d.LimitsMaxAge.Seconds()
	// The defaults.
	c.TenantRowsWCU = d.TenantRate * float64(first.Tables[tableCharges].WCU)
	c.TenantRowsShare = c.TenantRowsWCU / pw
	c.TenantConcShare = d.TenantConcurrency / d.ChargeReserved
	c.TenantsToFill = d.ChargeReserved / d.TenantConcurrency
	c.TenantRequestBudgetMs = d.TenantConcurrency / d.TenantRate * 1000
	// The reservation, the gateway's rates, and what the routes that can
	// wait hold. A read is one call. A refund is a first charge's path with
	// two calls more, plus the provider. The two read the charge's row and
	// take its hold.
	c.Unreserved = in.v(inLambdaQuota) - d.ChargeReserved - 1 // the sweeper's 1
	c.ReconcileKeeps = c.Unreserved - d.IntakeMaxConcurrency
	c.ReserveProviderMs = math.Max(0, d.ChargeReserved-c.ConcurrencyAWS) / c.ConcurrencyPer100ms * 100
	c.GatewayHeadroom = d.APIRate/c.Requests - 1
	c.GatewayFillMs = math.Max(0, d.ChargeReserved/d.APIRate*1000-firstAWS)
	reads := float64(d.DeferrableRoutes-1) * d.DeferrableRate * replayAWS / 1000
	refunds := d.DeferrableRate * (firstAWS + 2*latency + c.GatewayFillMs) / 1000
	c.DeferrableConcurrency = reads + refunds
	c.CriticalKeeps = d.ChargeReserved - c.DeferrableConcurrency
	// One key: its replays' handler time, and its twins' waits, count
	// against the tenant's concurrency.
	c.ReplaysPerTenant = d.TenantConcurrency / (replayAWS / 1000)
	c.TwinClaimsMax = twinClaims(math.Inf(1), in.v(inFirstPause), in.v(inMaxPause), d.InflightWait)
	// MaxWaiters start waiting a window: twice as many wait at once. Each
	// other twin claims, is refused a wait in one write of 1 WCU, and
	// claims once more: the key may have settled meanwhile.
	c.MaxWaiters, c.TwinWaitersMax = limit.MaxWaiters, 2*limit.MaxWaiters
	c.TwinWaitWCU = float64(c.TwinWaitersMax*c.TwinClaimsMax) * c.ReplayWCU / d.InflightWait.Seconds()
	c.RefusedTwinWCU = 2 * c.ReplayWCU
	c.TwinStormMax = math.Min((pw-c.TwinWaitWCU)/c.RefusedTwinWCU, pw)
	c.SharedSpan = limit.SharedSpan
	c.ConcurrencySpan = limit.ConcurrencySpan
}

// audit sizes the audit trail at the load. Each charge written, first or
// reconciled, makes its changes. A batch fills at this rate, so an object
// holds AuditBatch of them.
func (c *capacity) audit() {
	in := c.In
	charges := c.First + c.Unknown
	c.AuditChangesPerCharge, c.AuditIndexedPerCharge = auditChangesPerCharge, auditIndexedPerCharge
	c.AuditChanges = charges * auditChangesPerCharge
	c.AuditObjects = c.AuditChanges / float64(c.D.AuditBatch)
	c.AuditIndexWCU = charges * auditIndexedPerCharge
	c.AuditGBPerDay = c.AuditChanges * 86400 * in.v(inAuditEntryBytes) / gib
	c.AuditGBRetained = c.AuditGBPerDay * c.D.AuditRetentionDays
	c.AuditIndexGB = c.AuditIndexWCU * 86400 * c.D.AuditIndexDays * (auditIndexItemBytes + in.v(inItemOverhead)) / gib
	c.AuditIndexOnDemand = in.get(priceWrite).cost(c.AuditIndexWCU * c.MonthSeconds / 1e6)
	c.AuditIndexProvisioned = c.AuditIndexWCU * in.v(inHoursPerMonth) * in.v(priceProvisionedWCU)
	c.AuditBatchKB = float64(c.D.AuditBatch) * in.v(inAuditEntryBytes) / 1024
	first, _ := c.M.outcome(outcomeFirst)
	// TestRoundTrips' requests carry a typical caller: the record holds it.
	c.RecordWithActorBytes = first.Tables[tableIdempotency].LargestItemBytes
	c.AuditGBYear = c.AuditGBPerDay * 365
	c.AuditYearScan = c.AuditGBYear / 1024 * in.v(priceAthena)
}

func (c *capacity) flow(name, id string, perSec, times float64) flowRow {
	o, _ := c.M.outcome(id)
	n := perSec * times
	return flowRow{
		Name: name, Outcome: id, PerSec: perSec, Times: times,
		IdemWCU:    n * float64(o.Tables[tableIdempotency].WCU),
		IndexWCU:   n * float64(o.Tables[tableIdempotency].IndexWCU),
		ChargesWCU: n * float64(o.Tables[tableCharges].WCU),
		IdemRCU:    n * float64(o.Tables[tableIdempotency].RCU),
	}
}

// costs prices a month of the load.
func (c *capacity) costs() {
	in := c.In
	month := c.MonthSeconds
	both := func(v float64) [2]float64 { return [2]float64{v, v} }
	gbs := c.ConcurrencyAWS * c.D.MemoryMB / 1024 * month
	storage := [2]float64{}
	lagged := [2]float64{}
	for i, r := range c.Retentions {
		storage[i] = r.GB * in.v(priceStorage)
		lagged[i] = r.LagGB * in.v(priceStorage)
	}
	chargesAverageGB := c.ChargesGBMonth / 2 // the table grows from empty over the month
	pitr := [2]float64{}
	for i, r := range c.Retentions {
		pitr[i] = (r.GB + r.LagGB + chargesAverageGB) * in.v(pricePITR)
	}
	requests := c.Requests * month
	c.Costs = []costRow{
		{"DynamoDB writes (tables and index)", fmt.Sprintf("%s million write units", grouped(c.WriteUnits*month/1e6, 0)), both(in.get(priceWrite).cost(c.WriteUnits * month / 1e6))},
		{"DynamoDB reads", fmt.Sprintf("%s million read units", grouped(c.ReadUnits*month/1e6, 1)), both(in.get(priceRead).cost(c.ReadUnits * month / 1e6))},
		{"idempotency table storage, within retention", fmt.Sprintf("%s / %s GB", grouped(c.Retentions[0].GB, 0), grouped(c.Retentions[1].GB, 0)), storage},
		{"idempotency table storage, expired and not yet deleted by TTL", fmt.Sprintf("%s GB", grouped(c.Retentions[0].LagGB, 0)), lagged},
		{"charges table storage, first month (average)", fmt.Sprintf("%s GB", grouped(chargesAverageGB, 0)), both(chargesAverageGB * in.v(priceStorage))},
		{"point-in-time recovery (both tables)", "the storage above", pitr},
		{"Lambda requests (ChargeFunction)", fmt.Sprintf("%s million", grouped(requests/1e6, 0)), both(in.get(priceLambdaReq).cost(requests / 1e6))},
		{"Lambda duration (ChargeFunction, AWS estimate)", fmt.Sprintf("%s million GB-s", grouped(gbs/1e6, 1)), both(in.get(priceLambdaGBs).cost(gbs))},
		{"API Gateway HTTP API", fmt.Sprintf("%s million requests", grouped(requests/1e6, 0)), both(in.get(priceAPIGateway).cost(requests / 1e6))},
		{"SQS (reconcile queue)", fmt.Sprintf("%s million requests", grouped(c.SQSRequests*month/1e6, 1)), both(in.get(priceSQS).cost(c.SQSRequests * month / 1e6))},
		{"CloudWatch Logs (the function's own lines)", fmt.Sprintf("%s GB", grouped(c.LogGBMonth, 0)), both(in.get(priceLogs).cost(c.LogGBMonth))},
		{"X-Ray traces", fmt.Sprintf("%s million", grouped(c.TracesPerSecond*month/1e6, 0)), both(in.get(priceXRay).cost(c.TracesPerSecond * month / 1e6))},
		{"audit index writes (on demand)", fmt.Sprintf("%s million write units", grouped(c.AuditIndexWCU*month/1e6, 0)), both(c.AuditIndexOnDemand)},
		{"audit index storage", fmt.Sprintf("%s GB", grouped(c.AuditIndexGB, 0)), both(c.AuditIndexGB * in.v(priceStorage))},
		{"audit archive: S3 PUTs", fmt.Sprintf("%s million", grouped(c.AuditObjects*month/1e6, 1)), both(in.get(priceS3Put).cost(c.AuditObjects * month / 1e3))},
		{"audit archive: S3 storage, once full", fmt.Sprintf("%s GB", grouped(c.AuditGBRetained, 0)), both(in.get(priceS3Storage).cost(c.AuditGBRetained))},
		{"Lambda requests (AuditFunction)", fmt.Sprintf("%s million", grouped(c.AuditObjects*month/1e6, 1)), both(in.get(priceLambdaReq).cost(c.AuditObjects * month / 1e6))},
	}
	for _, r := range c.Costs {
		c.CostTotal[0] += r.USD[0]
		c.CostTotal[1] += r.USD[1]
	}
	c.WriteShare = c.Costs[0].USD[0] / c.CostTotal[0]
	c.LambdaPer100ms = in.get(priceLambdaGBs).cost(c.ConcurrencyPer100ms * c.D.MemoryMB / 1024 * month)
	c.ChargesStoragePerMonth = c.ChargesGBMonth * (in.v(priceStorage) + in.v(pricePITR))
}

// twinClaims is how many conditional PutItems a request makes for a key
// whose first call takes firstMs. Both start at the same instant. It makes
// one at once, then one after each pause. Pauses start at firstPause and
// double up to maxPause. It stops when one finds the call finished, or when
// the wait would run past wait.
func twinClaims(firstMs, firstPause, maxPause float64, wait time.Duration) int {
	waitMs := float64(wait) / float64(time.Millisecond)
	claims, at, pause := 1, 0.0, firstPause
	for at < firstMs && at+pause <= waitMs {
		at += pause
		claims++
		pause = math.Min(2*pause, maxPause)
	}
	return claims
}

// Fig is the cited figure named key.
func (c capacity) Fig(key string) figure { return c.In.get(key) }

// callList is "2: PutItem + TransactWriteItems", or "0".
func callList(calls map[string]int) string {
	total, names := 0, []string{}
	for _, op := range slices.Sorted(maps.Keys(calls)) {
		total += calls[op]
		if calls[op] > 1 {
			op = fmt.Sprintf("%d× %s", calls[op], op)
		}
		names = append(names, op)
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(names, " + "))
}
