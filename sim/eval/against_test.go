package eval

import "testing"

// The report counts, point by point, the seeds at which prefixring's
// mean or p99 is above round-robin's, and sums them.
func TestReportCountsSeedsAboveRoundRobin(t *testing.T) {
	mk := func(workload string, seed uint64, policy string, mean, p99 float64) Result {
		return Result{Grid: GridPolicies, Policy: policy, Workload: workload, Routers: 3, RateScale: 1, Endpoints: 8, Seed: seed,
			TTFTMeanMS: mean, TTFTP50MS: mean, TTFTP99MS: p99}
	}
	var rs []Result
	for seed := uint64(1); seed <= 3; seed++ {
		rs = append(rs, mk("multi-turn", seed, "round-robin", 30, 100), mk("agentic", seed, "round-robin", 30, 100),
			mk("agentic", seed, "chwbl", 20, 90)) // below on every seed
	}
	rs = append(rs, mk("multi-turn", 1, "chwbl", 20, 120), mk("multi-turn", 2, "chwbl", 31, 90), mk("multi-turn", 3, "chwbl", 20, 110))
	md := Markdown(rs, "test")
	reportHas(t, md,
		"prefixring's mean TTFT is above round-robin's at 1 of 6 seed-runs, its p99 at 2; at 1 of 2 points on some seed.",
		"| multi-turn | ×1 | H100 | 8 | 3 | **1** | **2** | 0.67–1.03 | 0.90–1.20 (1.10) |",
		"| agentic | ×1 | H100 | 8 | 3 | 0 | 0 | 0.67 | 0.90 (0.90) |",
	)
}
