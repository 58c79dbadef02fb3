package benchout

// SideBySide is what TestSideBySide (test/bench) writes as JSON, and
// cmd/benchdoc sets out: by handler ("chargeonce", "naive", "powertools"
// for Python, "powertools-ts" for TypeScript), the runs one at a time
// ("serial") and at a fixed concurrency ("concurrent"), and what one first
// call and one replay cost in capacity.
type SideBySide struct {
	// LoadAvg is /proc/loadavg's first three fields when the test started.
	LoadAvg  string                 `json:"loadavg_at_start"`
	N        int                    `json:"n"`
	Handlers map[string]SideHandler `json:"handlers"`
}

// SideHandler is one handler's runs and capacity.
type SideHandler struct {
	Runs map[string]SideRun `json:"runs"`
	// FirstWCU and ReplayWCU are what one first call and one replay write
	// (FirstIndexWCU in the stuck-lease index), by the meter's rules.
	FirstWCU      int `json:"first_wcu"`
	FirstIndexWCU int `json:"first_index_wcu"`
	ReplayWCU     int `json:"replay_wcu"`
	// Powertools only: the versions its bench script ran.
	PowertoolsVersion string `json:"powertools_version,omitempty"`
	SDKVersion        string `json:"sdk_version,omitempty"`
	RuntimeVersion    string `json:"runtime_version,omitempty"`
}

// SideRun is one handler at one concurrency: N first calls with fresh keys,
// then a replay of each, then N concurrent duplicates (none of either for
// the naive handler, whose retry is another first call). Calls are
// DynamoDB calls per request by operation (per pair for duplicates). The
// Own figures are the mean time of a request less its mean time at the
// emulator, both counted at a proxy.
type SideRun struct {
	Concurrency    int                `json:"concurrency"`
	First          SideLatency        `json:"first"`
	Replay         *SideLatency       `json:"replay,omitempty"`
	Duplicate      *SideDuplicate     `json:"duplicate,omitempty"`
	FirstCalls     map[string]float64 `json:"first_calls"`
	ReplayCalls    map[string]float64 `json:"replay_calls,omitempty"`
	DuplicateCalls map[string]float64 `json:"duplicate_calls,omitempty"`
	FirstOwnMs     float64            `json:"first_own_ms"`
	ReplayOwnMs    float64            `json:"replay_own_ms,omitempty"`
}

// SideLatency is a run's latencies, in milliseconds.
type SideLatency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Mean  float64 `json:"mean_ms"`
}

// SideDuplicate is a run of pairs of calls sent at the same instant with
// the same fresh key: the latency of the call of each pair that did not do
// the work, and what those calls answered ("409", "201 replayed",
// "IdempotencyAlreadyInProgressError").
type SideDuplicate struct {
	Latency SideLatency    `json:"latency"`
	Answers map[string]int `json:"answers"`
}
