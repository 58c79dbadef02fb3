package benchout

// Isolation is what an isolation run (loadgen isolation) reports, and
// writes as JSON. Tenant B sends at a steady rate in three phases a round:
// alone, beside tenant A at its limit, and beside A at many times it.
type Isolation struct {
	Started string `json:"started"`
	LoadAvg string `json:"loadavg_at_start"`
	Target  string `json:"target"`
	// Tool names the load generator and its version.
	Tool string `json:"tool"`
	// PhaseSeconds is each phase's length; Rounds how many rounds of the
	// three phases ran.
	PhaseSeconds float64 `json:"phase_seconds"`
	Rounds       int     `json:"rounds"`
	// ALimit is A's rate limit, an operator's override; ARate and BRate
	// the rates offered, ARate in A's flood.
	ALimit int     `json:"a_limit"`
	ARate  float64 `json:"a_rate"`
	BRate  float64 `json:"b_rate"`
	// BAlone, BBesideLimit and BBesideFlood are B's requests in each
	// phase; AAtLimit and AFlood are A's, at its limit and past it.
	BAlone       TenantRun `json:"b_alone"`
	BBesideLimit TenantRun `json:"b_beside_limit"`
	BBesideFlood TenantRun `json:"b_beside_flood"`
	AAtLimit     TenantRun `json:"a_at_limit"`
	AFlood       TenantRun `json:"a_flood"`
	// P50Ratio and P99Ratio are B's latencies beside A's flood over B's
	// alone. ExcessP50Ratio and ExcessP99Ratio are over B's beside A at
	// its limit: what A's refused excess alone adds.
	P50Ratio       float64 `json:"p50_ratio"`
	P99Ratio       float64 `json:"p99_ratio"`
	ExcessP50Ratio float64 `json:"excess_p50_ratio"`
	ExcessP99Ratio float64 `json:"excess_p99_ratio"`
	// RoundP99s are B's p99 in each round: alone, beside A at its limit,
	// beside A's flood, in milliseconds. Their spread shows the machine's
	// noise.
	RoundP99s [][3]float64 `json:"round_p99s_ms"`
	// ACheck and BCheck are what the ledger and the rows say of each
	// tenant's keys, all phases together.
	ACheck Check `json:"a_check"`
	BCheck Check `json:"b_check"`
	// ARefusedStored counts A's keys answered 429 that have a record all
	// the same: a refusal must store nothing.
	ARefusedStored int `json:"a_refused_stored"`
	// OK says whether every check held. The ratios are figures: the
	// machine's load moves them, so no check reads them.
	OK bool `json:"ok"`
}

// TenantRun is one tenant's requests in some phases of an isolation run.
type TenantRun struct {
	Tenant   string `json:"tenant"`
	Requests int    `json:"requests"`
	// Answers counts answers by status ("201", "429") or failure.
	Answers map[string]int `json:"answers"`
	// Latency is of every answer, from vegeta's send to the body read.
	Latency Latency `json:"latency"`
	// AdmittedPerSecond is the 201s a second of the phases.
	AdmittedPerSecond float64 `json:"admitted_per_second"`
	// SpanSeconds sums how long each phase's requests were in flight,
	// from the first sent to the last answered.
	SpanSeconds float64 `json:"span_seconds"`
}
