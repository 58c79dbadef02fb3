package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"gopkg.in/yaml.v3"

	"github.com/chargeonce/chargeonce/internal/benchout"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// readJSON decodes the JSON file at path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ---- What make bench measured ----

// measurement is the measured snapshot: what the model takes from make
// bench's outputs. It is kept in the repository, so the document can be
// regenerated without measuring again.
type measurement struct {
	MeasuredAt string   `json:"measured_at"` // when the snapshot was taken, UTC
	From       []string `json:"from"`        // the make bench outputs it was read from
	// RoundTripsAt is when the round trips alone were taken again
	// (capacity -roundtrips without -bench), if they were.
	RoundTripsAt string                 `json:"roundtrips_measured_at,omitempty"`
	LoadAvg      string                 `json:"loadavg"` // when the benchmarks started
	CPU          string                 `json:"cpu"`
	RoundTrips   roundTripFigures       `json:"roundtrips"`
	Bench        map[string]benchFigure `json:"bench"`
}

// roundTripFigures is the part of TestRoundTrips' JSON (test/bench,
// -roundtrips-json) the model reads.
type roundTripFigures struct {
	Index    string           `json:"index"`
	Outcomes []outcomeFigures `json:"outcomes"`
}

type outcomeFigures struct {
	ID       string                  `json:"id"`
	Outcome  string                  `json:"outcome"`
	Calls    map[string]int          `json:"calls"`
	Tables   map[string]tableFigures `json:"tables"`
	LogBytes int                     `json:"log_bytes,omitempty"`
}

type tableFigures struct {
	WCU              int `json:"wcu"`
	IndexWCU         int `json:"index_wcu"`
	RCU              int `json:"rcu"`
	LargestItemBytes int `json:"largest_item_bytes"`
}

// benchFigure is one benchmark's medians over the runs.
type benchFigure struct {
	MsPerOp float64 `json:"ms_per_op"`
	P50Ms   float64 `json:"p50_ms,omitempty"`
	P99Ms   float64 `json:"p99_ms,omitempty"`
}

// The benchmarks the model reads, and the outcomes.
const (
	benchFirstCall   = "BenchmarkHandlerFirstCall"
	benchReplay      = "BenchmarkHandlerReplay"
	benchEmulatorPut = "BenchmarkEmulatorPutItem/serial"
	benchEmulatorTx  = "BenchmarkEmulatorTransactWriteItems/items=0"

	outcomeFirst     = "first"
	outcomeShared    = "first-shared"
	outcomeReplay    = "replay"
	outcomeCached    = "replay-cached"
	outcomeInFlight  = "in-flight"
	outcomeUnknown   = "unknown"
	outcomeReconcile = "reconcile"

	tableIdempotency = "idempotency"
	tableCharges     = "charges"
	tableLimits      = "limits"
)

// outcomeIDs are the measured outcomes the model reads, in the order
// docs/capacity.md shows them.
var outcomeIDs = []string{outcomeFirst, outcomeShared, outcomeReplay, outcomeCached, outcomeInFlight, outcomeUnknown, outcomeReconcile}

// measureRoundTrips takes the round trips of the snapshot at measuredPath
// again from roundTripsPath, at now, and keeps its benchmarks.
func measureRoundTrips(measuredPath, roundTripsPath string, now time.Time) (measurement, error) {
	var m measurement
	if err := readJSON(measuredPath, &m); err != nil {
		return measurement{}, err
	}
	m.RoundTrips = roundTripFigures{}
	if err := readJSON(roundTripsPath, &m.RoundTrips); err != nil {
		return measurement{}, err
	}
	m.RoundTripsAt = now.UTC().Format("2006-01-02 15:04 UTC")
	return m, m.check()
}

// measure reads make bench's outputs into a snapshot taken at now.
func measure(roundTripsPath, benchPath string, now time.Time) (measurement, error) {
	m := measurement{MeasuredAt: now.UTC().Format("2006-01-02 15:04 UTC"), From: []string{roundTripsPath, benchPath}, Bench: map[string]benchFigure{}}
	if err := readJSON(roundTripsPath, &m.RoundTrips); err != nil {
		return measurement{}, err
	}
	results, conf, err := benchout.ReadBench(benchPath)
	if err != nil {
		return measurement{}, err
	}
	m.LoadAvg, m.CPU = conf["loadavg"], conf["cpu"]
	for _, r := range results {
		if !slices.Contains([]string{benchFirstCall, benchReplay, benchEmulatorPut, benchEmulatorTx}, r.Name) {
			continue
		}
		ns, _ := r.Median("ns/op")
		p50, _ := r.Median("p50-ms")
		p99, _ := r.Median("p99-ms")
		m.Bench[r.Name] = benchFigure{MsPerOp: ns / 1e6, P50Ms: p50, P99Ms: p99}
	}
	return m, m.check()
}

// check reports what the model needs and the snapshot lacks.
func (m measurement) check() error {
	var errs []error
	for _, name := range []string{benchFirstCall, benchReplay, benchEmulatorPut, benchEmulatorTx} {
		if m.Bench[name].MsPerOp <= 0 {
			errs = append(errs, fmt.Errorf("no time per op for %s", name))
		}
	}
	for _, name := range []string{benchFirstCall, benchReplay} {
		if m.Bench[name].P50Ms <= 0 || m.Bench[name].P99Ms <= 0 {
			errs = append(errs, fmt.Errorf("no p50-ms and p99-ms for %s", name))
		}
	}
	for _, id := range outcomeIDs {
		if _, ok := m.outcome(id); !ok {
			errs = append(errs, fmt.Errorf("no round-trip outcome %q", id))
		}
	}
	return errors.Join(errs...)
}

func (m measurement) outcome(id string) (outcomeFigures, bool) {
	for _, o := range m.RoundTrips.Outcomes {
		if o.ID == id {
			return o, true
		}
	}
	return outcomeFigures{}, false
}

// ---- What is cited ----

// capacityInputs is docs/capacity-inputs.json: every figure the model uses
// that make bench does not measure, each with its source.
type capacityInputs struct {
	Region  string   `json:"region"`
	Checked string   `json:"checked"` // the date the sources were read
	How     string   `json:"how"`     // how they were read
	Figures []figure `json:"figures"`
}

type figure struct {
	Key    string  `json:"key"`
	Label  string  `json:"label"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Tiers  []tier  `json:"tiers,omitempty"` // a price by volume; Value is the first tier's
	Source string  `json:"source"`
	Note   string  `json:"note,omitempty"` // what the source says, or how the figure is read from it
}

// tier is a price up to a cumulative quantity. UpTo is in the unit the
// price is per. It is 0 for the last tier, which has no end.
type tier struct {
	UpTo  float64 `json:"up_to,omitempty"`
	Price float64 `json:"price"`
}

// The keys of the cited figures.
const (
	inLogical        = "logical_per_second"
	inRetriedOnce    = "retried_once"
	inRetriedTwice   = "retried_twice"
	inRetentionShort = "retention_short_hours"
	inRetentionLong  = "retention_long_hours"
	inTwins          = "concurrent_twins"
	inAmbiguous      = "ambiguous"

	inPartitionWCU  = "partition_wcu"
	inPartitionRCU  = "partition_rcu"
	inPartitionGB   = "partition_gb"
	inItemOverhead  = "item_overhead_bytes"
	inTTLLag        = "ttl_delete_lag_hours"
	inWarmWRU       = "on_demand_initial_wru"
	inWarmRRU       = "on_demand_initial_rru"
	inEventualRRU   = "eventual_read_rru"
	inDynamoLatency = "dynamodb_call_latency_ms"
	inLambdaQuota   = "lambda_concurrency_quota"
	inLambdaScaling = "lambda_scaling_per_10s"
	inXRayReservoir = "xray_reservoir_per_second"
	inXRayRate      = "xray_sampled_share"
	inFirstPause    = "inflight_first_pause_ms"
	inMaxPause      = "inflight_max_pause_ms"
	inHoursPerMonth = "hours_per_month"
	priceWrite      = "price_dynamodb_write_million"
	priceRead       = "price_dynamodb_read_million"
	priceStorage    = "price_dynamodb_storage_gb_month"
	pricePITR       = "price_dynamodb_pitr_gb_month"
	priceLambdaGBs  = "price_lambda_arm_gb_second"
	priceLambdaReq  = "price_lambda_requests_million"
	priceAPIGateway = "price_http_api_million"
	priceSQS        = "price_sqs_million"
	priceLogs       = "price_lambda_logs_gb"
	priceXRay       = "price_xray_traces_million"

	inAuditEntryBytes   = "audit_entry_gzip_bytes"
	inActorBytes        = "record_actor_bytes"
	priceS3Put          = "price_s3_put_thousand"
	priceS3Storage      = "price_s3_storage_gb_month"
	priceProvisionedWCU = "price_dynamodb_provisioned_wcu_hour"
	priceAthena         = "price_athena_tb"
)

var capacityKeys = []string{
	inLogical, inRetriedOnce, inRetriedTwice, inRetentionShort, inRetentionLong, inTwins, inAmbiguous,
	inPartitionWCU, inPartitionRCU, inPartitionGB, inItemOverhead, inTTLLag, inWarmWRU, inWarmRRU, inEventualRRU,
	inDynamoLatency, inLambdaQuota, inLambdaScaling, inXRayReservoir, inXRayRate, inFirstPause, inMaxPause, inHoursPerMonth,
	priceWrite, priceRead, priceStorage, pricePITR, priceLambdaGBs, priceLambdaReq, priceAPIGateway, priceSQS, priceLogs, priceXRay,
	inAuditEntryBytes, inActorBytes, priceS3Put, priceS3Storage, priceProvisionedWCU, priceAthena,
}

func readInputs(path string) (capacityInputs, error) {
	var in capacityInputs
	if err := readJSON(path, &in); err != nil {
		return in, err
	}
	if err := in.check(); err != nil {
		return in, fmt.Errorf("%s: %w", path, err)
	}
	return in, nil
}

// check requires every key the model reads, once, each with a source,
// and no other.
func (in capacityInputs) check() error {
	var errs []error
	if in.Region == "" || in.Checked == "" {
		errs = append(errs, errors.New("region and checked are required"))
	}
	seen := map[string]bool{}
	for _, f := range in.Figures {
		switch {
		case seen[f.Key]:
			errs = append(errs, fmt.Errorf("%s: given twice", f.Key))
		case !slices.Contains(capacityKeys, f.Key):
			errs = append(errs, fmt.Errorf("%s: not an input of the model", f.Key))
		case f.Source == "" || f.Label == "":
			errs = append(errs, fmt.Errorf("%s: no label or source", f.Key))
		case len(f.Tiers) > 0 && (f.Tiers[0].Price != f.Value || f.Tiers[len(f.Tiers)-1].UpTo != 0):
			errs = append(errs, fmt.Errorf("%s: the value must be the first tier's price, and the last tier open", f.Key))
		}
		seen[f.Key] = true
	}
	for _, k := range capacityKeys {
		if !seen[k] {
			errs = append(errs, fmt.Errorf("%s: missing", k))
		}
	}
	return errors.Join(errs...)
}

func (in capacityInputs) get(key string) figure {
	for _, f := range in.Figures {
		if f.Key == key {
			return f
		}
	}
	panic("capacity: unchecked input " + key) // check ran when the inputs were read
}

func (in capacityInputs) v(key string) float64 { return in.get(key).Value }

// cost prices quantity (in the figure's unit) through its tiers.
func (f figure) cost(quantity float64) float64 {
	if len(f.Tiers) == 0 {
		return quantity * f.Value
	}
	total, from := 0.0, 0.0
	for _, t := range f.Tiers {
		to := t.UpTo
		if to == 0 || to > quantity {
			to = quantity
		}
		if to > from {
			total += (to - from) * t.Price
			from = to
		}
	}
	return total
}

// ---- What template.yaml and the code set ----

// deployment is what the model reads from template.yaml and from the
// code's defaults.
type deployment struct {
	MemoryMB       float64
	ChargeTimeout  time.Duration
	CommitReserve  time.Duration
	InflightWait   time.Duration
	ReplayCache    int
	SweepEvery     time.Duration
	SweepSchedule  string
	ReconcileBatch int
	Shards         int // idem's default: every function uses it
	SweepMaxKeys   int // the sweeper's default

	// The abuse controls. ChargeFunction's reserved concurrency. The
	// gateway's rates and bursts, for the critical routes and for each of
	// the DeferrableRoutes. The intake's cap. A tenant's default limits.
	ChargeReserved                  float64
	APIRate, APIBurst               float64
	DeferrableRate, DeferrableBurst float64
	DeferrableRoutes                int
	IntakeMaxConcurrency            float64
	TenantRate, TenantConcurrency   float64
	LimitsMaxAge                    time.Duration
	SyncEvery, SyncShare, HotShare  int // package limit's
	HotSpan                         int // windows, package limit's
	SyncBusy                        time.Duration
	ShedFor                         time.Duration

	// The audit function's batch of stream records, and the defaults of
	// the trail's retention and of its index's, in days.
	AuditBatch                         int
	AuditRetentionDays, AuditIndexDays float64
}

func readDeployment(src []byte) (deployment, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return deployment{}, err
	}
	var errs []error
	scalar := func(path ...string) string {
		n := &root
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			n = n.Content[0]
		}
		for _, name := range path {
			var next *yaml.Node
			for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == name {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				errs = append(errs, fmt.Errorf("no %s", strings.Join(path, ".")))
				return ""
			}
			n = next
		}
		return n.Value
	}
	number := func(path ...string) float64 {
		s := scalar(path...)
		v, err := strconv.ParseFloat(s, 64)
		if s != "" && err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strings.Join(path, "."), err))
		}
		return v
	}
	duration := func(path ...string) time.Duration {
		s := scalar(path...)
		v, err := time.ParseDuration(s)
		if s != "" && err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strings.Join(path, "."), err))
		}
		return v
	}
	store, err := dynamostore.New(&dynamodb.Client{}, "capacity") // reads nothing: asked only for its default shards
	if err != nil {
		return deployment{}, err
	}
	// A parameter's default, which the resource at path names with !Ref.
	param := func(name string, path ...string) float64 {
		if ref := scalar(path...); ref != name {
			errs = append(errs, fmt.Errorf("%s is %q, want !Ref %s", strings.Join(path, "."), ref, name))
		}
		return number("Parameters", name, "Default")
	}
	api := []string{"Resources", "HttpApi", "Properties"}
	d := deployment{
		MemoryMB:           number("Globals", "Function", "MemorySize"),
		ChargeTimeout:      time.Duration(number("Resources", "ChargeFunction", "Properties", "Timeout")) * time.Second,
		CommitReserve:      duration("Parameters", "CommitReserve", "Default"),
		InflightWait:       duration("Parameters", "InflightWait", "Default"),
		ReplayCache:        int(number("Parameters", "ReplayCacheEntries", "Default")),
		SweepSchedule:      scalar("Resources", "SweeperFunction", "Properties", "Events", "EveryMinute", "Properties", "Schedule"),
		ReconcileBatch:     int(number("Resources", "ReconcileFunction", "Properties", "Events", "Reconcile", "Properties", "BatchSize")),
		Shards:             store.Shards(),
		SweepMaxKeys:       sweeper.DefaultMaxKeys,
		AuditBatch:         int(number("Resources", "AuditFunction", "Properties", "Events", "IdempotencyStream", "Properties", "BatchSize")),
		AuditRetentionDays: number("Parameters", "AuditRetentionDays", "Default"),
		AuditIndexDays:     number("Parameters", "AuditIndexDays", "Default"),

		ChargeReserved:       param("ChargeReservedConcurrency", "Resources", "ChargeFunction", "Properties", "ReservedConcurrentExecutions"),
		APIRate:              param("ApiRateLimit", append(api, "DefaultRouteSettings", "ThrottlingRateLimit")...),
		APIBurst:             param("ApiBurstLimit", append(api, "DefaultRouteSettings", "ThrottlingBurstLimit")...),
		DeferrableRate:       number("Parameters", "ApiDeferrableRateLimit", "Default"),
		DeferrableBurst:      number("Parameters", "ApiDeferrableBurstLimit", "Default"),
		IntakeMaxConcurrency: number("Resources", "IntakeFunction", "Properties", "Events", "ChargeRequests", "Properties", "ScalingConfig", "MaximumConcurrency"),
		TenantRate:           number("Parameters", "TenantRateLimit", "Default"),
		TenantConcurrency:    number("Parameters", "TenantConcurrencyLimit", "Default"),
		LimitsMaxAge:         duration("Parameters", "LimitsMaxAge", "Default"),
		SyncEvery:            limit.SyncEvery, SyncShare: limit.SyncShare, HotShare: limit.HotShare, HotSpan: limit.HotSpan, SyncBusy: limit.SyncBusy,
		ShedFor: limit.DefaultShedFor,
	}
	// Every route that can wait takes the deferrable rate.
	for _, route := range httpapi.Deferrable {
		param("ApiDeferrableRateLimit", append(api, "RouteSettings", route, "ThrottlingRateLimit")...)
		param("ApiDeferrableBurstLimit", append(api, "RouteSettings", route, "ThrottlingBurstLimit")...)
		d.DeferrableRoutes++
	}
	if d.SweepSchedule != "" {
		if d.SweepEvery, err = parseRate(d.SweepSchedule); err != nil {
			errs = append(errs, err)
		}
	}
	return d, errors.Join(errs...)
}

// parseRate reads an EventBridge rate expression: rate(1 minute),
// rate(5 minutes), rate(2 hours), rate(1 day).
func parseRate(expr string) (time.Duration, error) {
	inner, ok := strings.CutPrefix(expr, "rate(")
	inner, ok2 := strings.CutSuffix(inner, ")")
	n, unit, ok3 := strings.Cut(inner, " ")
	count, err := strconv.Atoi(n)
	units := map[string]time.Duration{"minute": time.Minute, "minutes": time.Minute, "hour": time.Hour, "hours": time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour}
	if !ok || !ok2 || !ok3 || err != nil || count < 1 || units[unit] == 0 {
		return 0, fmt.Errorf("schedule %q is not a rate expression", expr)
	}
	return time.Duration(count) * units[unit], nil
}
