package eval

import (
	"math"
	"testing"
	"time"

	"github.com/prefixring/prefixring/sim/fleet"
)

// Quantiles are nearest rank, as the load generator's: the ceil(q·n)-th
// smallest value.
func TestQuantileIsNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	for _, c := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{hundred, 0.5, 50}, {hundred, 0.95, 95}, {hundred, 0.99, 99}, {hundred, 1, 100},
		{hundred[:10], 0.5, 5}, {hundred[:10], 0.99, 10}, {hundred[:3], 0.5, 2},
		{hundred[:1], 0.01, 1},
	} {
		if got := quantile(c.xs, c.q); got != c.want {
			t.Errorf("quantile of 1..%d at %v: %v, want %v", len(c.xs), c.q, got, c.want)
		}
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Error("the quantile of nothing is a number")
	}
}

// A run's TTFTs, hit rate, spill rate and throughput count the answered
// requests only: a request the engines refused (Err) counts in Requests
// and Errors and nowhere else. The ideal fleet's figures are its floors'
// mean, p50 and p99; imbalance divides by every engine of the fleet, idle
// ones too.
func TestMeasureCountsAnsweredRequestsOnly(t *testing.T) {
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	// The refused request arrives first and would be the slowest.
	recs := []fleet.Record{{Endpoint: "e0", Decision: "spill", Arrival: 0, TTFT: ms(5000), E2E: ms(5000), PromptTokens: 1000, Err: "too long"}}
	floors := make([]float64, 100)
	for i := range 100 {
		d := "home"
		if i%4 == 0 {
			d = "spill"
		}
		// Listed latest first: the run's first answered arrival is the last.
		recs = append(recs, fleet.Record{Endpoint: []string{"e0", "e1"}[i%2], Decision: d, Arrival: ms(199 - i),
			TTFT: ms(i + 1), E2E: ms(10), PromptTokens: 10, CachedTokens: 4, OutputTokens: 2})
		floors[i] = float64(i + 1) // sorted, as IdealOf returns them
	}
	r := measure(&fleet.Result{Records: recs, End: ms(1100)}, nil, 16, 4, false, func() Ideal { return Ideal{FloorsMS: floors} })
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"requests", float64(r.Requests), 101}, {"errors", float64(r.Errors), 1},
		{"TTFT mean", r.TTFTMeanMS, 50.5}, {"TTFT p50", r.TTFTP50MS, 50}, {"TTFT p95", r.TTFTP95MS, 95}, {"TTFT p99", r.TTFTP99MS, 99},
		{"hit rate", r.HitRate, 0.4}, {"spill rate", r.SpillRate, 0.25},
		{"output tokens per s", r.OutputTokensPerS, 200}, // 200 tokens from the first answered arrival, 0.1 s, to the end, 1.1 s
		{"floor mean", r.TTFTFloorMeanMS, 50.5}, {"floor p50", r.TTFTFloorP50MS, 50}, {"floor p99", r.TTFTFloorP99MS, 99},
		{"imbalance", r.Imbalance, 2}, // two engines of four held every request-second
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}

// A run's queue depth is, at each arrival at an engine, the requests there
// that arrived before it and were not yet admitted: one admitted at the
// instant of the arrival no longer waits.
func TestQueueDepthCountsRequestsStillWaiting(t *testing.T) {
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	recs := []fleet.Record{
		{Endpoint: "e0", Arrival: 0, QueueDelay: ms(10), TTFT: ms(11), E2E: ms(20)},
		{Endpoint: "e0", Arrival: ms(2), TTFT: ms(1), E2E: ms(20)},  // the first still waits: 1
		{Endpoint: "e0", Arrival: ms(10), TTFT: ms(1), E2E: ms(20)}, // the first was admitted now: 0
		{Endpoint: "e1", Arrival: ms(3), TTFT: ms(1), E2E: ms(20)},  // another engine's queue: 0
	}
	r := measure(&fleet.Result{Records: recs, End: ms(40)}, nil, 16, 2, false, func() Ideal { return Ideal{} })
	if r.QueueDepthMax != 1 || r.QueueDepthMean != 0.25 {
		t.Errorf("queue depth max %d mean %v, want 1 and 0.25", r.QueueDepthMax, r.QueueDepthMean)
	}
}
