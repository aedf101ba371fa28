// Package eval runs the routing study in the fleet simulator: every
// combination of workload, policy, engines, router replicas, rate scale,
// load factor, floor, load signal, gossip view and interval and key design,
// each a deterministic virtual-time run of the production balancer,
// policies, gossip view and keyer over simulated vLLM engines. Report
// writes results.json, report.md and index.html.
package eval

// Result is one run; JSON names are the study's interface.
type Result struct {
	// Grid names the study's grid the run belongs to.
	Grid             string  `json:"grid"`
	Policy           string  `json:"policy"`
	Workload         string  `json:"workload"`
	Endpoints        int     `json:"endpoints"`
	Routers          int     `json:"routers"`
	RateScale        float64 `json:"rate_scale"`
	LoadFactor       float64 `json:"load_factor"`
	MinBound         int64   `json:"min_bound"`
	Signal           string  `json:"signal"`
	View             string  `json:"gossip_view"`
	GossipIntervalMS float64 `json:"gossip_interval_ms"`
	Key              string  `json:"key"`
	// KVBlocks per engine (0: the H100 profile's), Concurrency (0: the
	// workload's own), GossipLoss and Seed: the run's fleet, loop, gossip
	// network and seed. SlowEngines are the fleet's slow engines,
	// engine:factor as --slow-engines gives them ("" for none).
	KVBlocks     int     `json:"kv_blocks"`
	Concurrency  int     `json:"concurrency"`
	GossipLoss   float64 `json:"gossip_loss"`
	Seed         uint64  `json:"seed"`
	SlowEngines  string  `json:"slow_engines,omitempty"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	HitRate      float64 `json:"hit_rate"`
	IdealHitRate float64 `json:"ideal_hit_rate"`
	TTFTMeanMS   float64 `json:"ttft_mean_ms"`
	TTFTP50MS    float64 `json:"ttft_p50_ms"`
	TTFTP95MS    float64 `json:"ttft_p95_ms"`
	TTFTP99MS    float64 `json:"ttft_p99_ms"`
	// TTFTFloor*: the quantiles of the run's requests' TTFTs in an ideal
	// fleet (Ideal.FloorsMS): what no policy is expected to beat.
	TTFTFloorMeanMS  float64 `json:"ttft_floor_mean_ms"`
	TTFTFloorP50MS   float64 `json:"ttft_floor_p50_ms"`
	TTFTFloorP99MS   float64 `json:"ttft_floor_p99_ms"`
	E2EP50MS         float64 `json:"e2e_p50_ms"`
	E2EP99MS         float64 `json:"e2e_p99_ms"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	PrefillTokens    int64   `json:"prefill_tokens"`
	QueueDepthMean   float64 `json:"queue_depth_mean"`
	QueueDepthMax    int     `json:"queue_depth_max"`
	// QueueEarlyMS and QueueLateMS are the mean engine queue delay of the
	// first and the third quarter of the run's requests by arrival (the
	// last quarter is left out: an open-loop workload thins out at its
	// end). QueuesGrew marks an open-loop run past its fleet's capacity
	// for its policy (see [queuesGrew]); a closed loop's queues are
	// bounded by its sessions, and it is never marked.
	QueueEarlyMS float64 `json:"queue_early_ms"`
	QueueLateMS  float64 `json:"queue_late_ms"`
	QueuesGrew   bool    `json:"queues_grew"`
	Imbalance    float64 `json:"imbalance"`
	SpillRate    float64 `json:"spill_rate"`
	// BoundFired is the share of keyed picks whose home the bound refused,
	// in P or in K (chwbl and chwbl-local; null for the others).
	BoundFired *float64 `json:"bound_fired"`
	// Agreement is the share of keyed requests every router replica would
	// have sent to the same endpoint (chwbl runs, which the replicas model
	// measures; null for the others).
	Agreement *float64 `json:"agreement"`
	// FalseSpillRate is the share of keyed requests that left their home
	// though, by the true cluster-wide loads, it was within its bound:
	// spills caused by a stale or partial view (chwbl and chwbl-local;
	// null for the others).
	FalseSpillRate *float64 `json:"false_spill_rate"`
	// KeyAgreement is the share of keyed requests every replica would have
	// given the same key (key designs with a gossiped sketch; null
	// otherwise).
	KeyAgreement *float64 `json:"key_agreement"`
	// SameEngineTurns is the share of conversations' turns that went to
	// their conversation's most used engine (null for workloads without
	// conversations).
	SameEngineTurns *float64 `json:"same_engine_turns"`
	// FollowRate is the share of keyed requests that went where their
	// key's last turn went off its home (the follow variants; null for
	// the others). Those turns count in SpillRate too.
	FollowRate *float64 `json:"follow_rate,omitempty"`
	// TTFTsMS are the sorted TTFTs, for the CDF chart; not in results.json.
	TTFTsMS []float64 `json:"-"`
}
