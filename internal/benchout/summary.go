package benchout

// Summary is what a load run (loadgen) reports, and writes as JSON.
type Summary struct {
	Target       string  `json:"target"`
	Tenant       string  `json:"tenant"`
	Started      string  `json:"started"`
	LoadAvg      string  `json:"loadavg_at_start"`
	Logical      int     `json:"logical_charges"`
	RetriedOnce  int     `json:"retried_once"`
	RetriedTwice int     `json:"retried_twice"`
	Concurrent   int     `json:"concurrent_twins"`
	Requests     int     `json:"requests_planned"`
	Sent         int     `json:"requests_sent"`
	Dropped      int     `json:"requests_dropped"`
	MaxInFlight  int     `json:"max_inflight"`
	TargetRate   float64 `json:"target_rate"`
	Seconds      float64 `json:"seconds"`
	// AchievedRate is HTTP answers of any status per second of the run.
	AchievedRate float64 `json:"achieved_rate"`
	MaxLagMs     float64 `json:"max_send_lag_ms"`
	// Latency: "first" are first attempts answered 201 (they charged),
	// "replay" are retries answered 201 with Idempotent-Replayed, and
	// "concurrent" the twins sent with a first attempt, whatever their
	// answer.
	Latency map[string]Latency `json:"latency"`
	// Answers counts answers by kind of request ("first", "retry",
	// "concurrent") and answer ("201", "201 replayed", "409", "dropped",
	// "error: timeout").
	Answers map[string]map[string]int `json:"answers"`
	// Check is what the ledger and the rows said at the end of the wait
	// (the settle and any drain).
	Check Check `json:"check"`
	// SettleSeconds is how long the check waited for commands left in
	// flight to be reconciled, and MissingAtSettle what was missing then.
	SettleSeconds   float64 `json:"settle_seconds"`
	MissingAtSettle int     `json:"missing_at_settle"`
	// DrainSeconds is how much longer it waited for those to be resolved.
	DrainSeconds float64 `json:"drain_seconds"`
}

// Latency summarises a group of latencies, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Check is what the provider's ledger and the charges table say about the
// run's logical charges, against what the API answered.
type Check struct {
	Logical int `json:"logical_charges"`
	// Created: logical charges with at least one 201 answer.
	Created int `json:"created"`
	// Unanswered: logical charges no attempt of which got a 2xx or 4xx
	// answer (every attempt dropped, failed or answered 5xx).
	Unanswered int `json:"unanswered"`
	// LedgerCharges: the run's references the provider charged.
	LedgerCharges int `json:"ledger_charges"`
	// ProviderCalls: charge requests the provider received for them.
	ProviderCalls int `json:"provider_calls"`
	// Rows: items in the charges table for the run's tenant.
	Rows int `json:"rows"`
	// Duplicates: provider calls beyond one per reference, plus rows beyond
	// one per logical charge.
	Duplicates int `json:"duplicates"`
	// Missing: logical charges answered 201 without both a ledger charge
	// and a row, plus ledger charges without a row and rows without a
	// ledger charge.
	Missing int `json:"missing"`
	// Stray: rows under keys the run never sent (the tenant is the run's
	// own, so there should be none).
	Stray int  `json:"stray"`
	OK    bool `json:"ok"`
}

// Sustain is what a sustain search (loadgen sustain) reports, and writes
// as JSON.
type Sustain struct {
	Started          string  `json:"started"`
	LoadAvg          string  `json:"loadavg_at_start"`
	PutItemPerSecond float64 `json:"emulator_putitem_per_second"`
	CallsPerRequest  float64 `json:"ddb_calls_per_request"`
	// Ceiling is PutItemPerSecond / CallsPerRequest, requests per second.
	Ceiling float64 `json:"ceiling_rate"`
	// BeginMs and CommitMs are BenchmarkBegin's and BenchmarkCommit's
	// medians; MixCeiling is what the emulator takes of the mix's own
	// calls at those costs, requests per second.
	BeginMs     float64 `json:"begin_ms"`
	CommitMs    float64 `json:"commit_ms"`
	MixCeiling  float64 `json:"mix_ceiling_rate"`
	StepSeconds float64 `json:"step_seconds"`
	Steps       []Step  `json:"steps"`
	// Sustained is the highest offered rate of a passing step (0: none
	// passed), SustainedAnswered what was answered at it.
	Sustained         float64 `json:"sustained_rate"`
	SustainedAnswered float64 `json:"sustained_answered_rate"`
}

// Step is one offered rate of a sustain search.
type Step struct {
	Fraction float64 `json:"of_mix_ceiling"`
	Offered  float64 `json:"offered_rate"`
	Answered float64 `json:"answered_rate"`
	LoadAvg  string  `json:"loadavg_at_start"`
	Requests int     `json:"requests_planned"`
	Dropped  int     `json:"requests_dropped"`
	// Timeouts: the gateway's 500 at the function's timeout, and the
	// client's own.
	Timeouts int `json:"timeouts"`
	// OtherFailures: other 5xx answers and transport errors.
	OtherFailures int `json:"other_failures"`
	Duplicates    int `json:"duplicates"`
	// MissingAtSettle: charges missing after the settle (the stack was
	// behind); Missing: after the drain too (lost).
	MissingAtSettle int     `json:"missing_at_settle"`
	Missing         int     `json:"missing"`
	Stray           int     `json:"stray"`
	First           Latency `json:"first_call"`
	Replay          Latency `json:"replay"`
	OK              bool    `json:"ok"`
}

// Growth is what a growth run (loadgen growth) reports, and writes as
// JSON: the same fixed-rate run after more and more charges.
type Growth struct {
	Started string  `json:"started"`
	Rate    float64 `json:"target_rate"`
	Logical int     `json:"logical_charges"`
	// Reconciles is how many commands each step left to the reconciler.
	Reconciles int          `json:"reconciles"`
	Steps      []GrowthStep `json:"steps"`
}

// GrowthStep is one step of a growth run: the fixed-rate run on the stack
// that has made Charges charges, and the same on a reference stack whose
// tables stay empty, measured in the same minutes (nil without one).
type GrowthStep struct {
	Charges int `json:"charges_before"`
	// FillSeconds is how long making the charges since the last step
	// took.
	FillSeconds float64    `json:"fill_seconds"`
	Stack       GrowthRun  `json:"stack"`
	Reference   *GrowthRun `json:"reference,omitempty"`
}

// GrowthRun is one stack's figures in a step.
type GrowthRun struct {
	LoadAvg string  `json:"loadavg_at_start"`
	First   Latency `json:"first"`
	Replay  Latency `json:"replay"`
	// Reconcile is from when a reconcile message was due to the
	// reconciler's settling of its record.
	Reconcile Latency `json:"reconcile"`
	OK        bool    `json:"ok"`
}
