package eval

import (
	"reflect"
	"strings"
	"testing"
)

// Each goal's limit holds at the limit itself and not past it: goal 1's
// mean 0.8×, p50 0.6× and p99 1.0× round-robin's, goal 2's 1.05× the
// best's TTFTs and 0.95× its hit, strictly below round-robin's, goal 3's p99 10 % below chwbl-local's
// (0.9×), goal 4's 0.8×. Seed 1 of each is at the limits, every later
// seed a little past one of them; a seed whose TTFT equals round-robin's
// is not above it.
func TestGoalsMeetTheirLimitsExactly(t *testing.T) {
	demo := func(seed uint64, policy string, mean, p50, p99 float64) Result {
		return Result{Grid: GridDemo, Policy: policy, Workload: "demo", Routers: 3, RateScale: 1, Endpoints: 4, Seed: seed,
			TTFTMeanMS: mean, TTFTP50MS: p50, TTFTP99MS: p99}
	}
	var rs []Result
	for seed, c := range [][3]float64{{32, 15, 100}, {32.8, 15, 100}, {32, 15.5, 100}, {32, 15, 101}} {
		rs = append(rs, demo(uint64(seed+1), "chwbl", c[0], c[1], c[2]), demo(uint64(seed+1), "round-robin", 40, 25, 100))
	}
	md := Markdown(rs, "test")
	reportHas(t, md, "**missed** (3 of 4 seeds)", "Missed on seed 2: mean 0.82×; seed 3: p50 0.62×; seed 4: p99 1.01×.",
		"prefixring's mean TTFT is above round-robin's at 0 of 4 seed-runs, its p99 at 1;")

	best := func(seed uint64, policy string, hit, mean, p99 float64) Result {
		return Result{Grid: GridPolicies, Policy: policy, Workload: "agentic", Routers: 3, RateScale: 1, Endpoints: 8, Seed: seed,
			HitRate: hit, TTFTMeanMS: mean, TTFTP99MS: p99}
	}
	rs = nil
	// prefixring's hit, mean and p99, and round-robin's mean: "below
	// round-robin's" is strictly below.
	for seed, c := range [][4]float64{{0.95, 105, 105, 200}, {0.95, 106, 105, 200}, {0.95, 105, 106, 200}, {0.94, 105, 105, 200}, {0.95, 100, 100, 100}} {
		rs = append(rs, best(uint64(seed+1), "chwbl", c[0], c[1], c[2]), best(uint64(seed+1), "prefix-key", 1, 100, 100), best(uint64(seed+1), "round-robin", 0.5, c[3], 200))
	}
	md = Markdown(rs, "test")
	reportHas(t, md, "**missed** (4 of 5 seeds)",
		"seed 2: mean 1.06× prefix-key's; seed 3: p99 1.06× prefix-key's; seed 4: hit 0.940 against prefix-key's 1.000; seed 5: not below round-robin (mean 1.00×, p99 0.50×).")

	gossip := func(seed uint64, policy string, p99 float64) Result {
		f := 0.1
		return Result{Grid: GridPolicies, Policy: policy, Workload: "agentic", Routers: 3, RateScale: 1, Endpoints: 8, Seed: seed,
			HitRate: 0.8, TTFTMeanMS: 20, TTFTP99MS: p99, BoundFired: &f}
	}
	md = Markdown([]Result{gossip(1, "chwbl", 90), gossip(1, "chwbl-local", 100), gossip(2, "chwbl", 91), gossip(2, "chwbl-local", 100)}, "test")
	reportHas(t, md, "| 0.90–0.91 | **missed** (1 of 2 seeds) |")

	trace := func(seed uint64, policy string, mean float64) Result {
		return Result{Grid: GridPolicies, Policy: policy, Workload: "trace:x/conversation_trace.jsonl", Routers: 3, RateScale: 2, Endpoints: 8, Seed: seed,
			TTFTMeanMS: mean, TTFTP50MS: mean, TTFTP99MS: mean, TTFTFloorMeanMS: 455}
	}
	md = Markdown([]Result{trace(1, "chwbl", 800), trace(1, "round-robin", 1000), trace(2, "chwbl", 810), trace(2, "round-robin", 1000)}, "test")
	reportHas(t, md, "| 0.80–0.81 | 0.000 | 0.000 | — | **missed** (1 of 2 seeds) |")
}

// The report's points over the seeds (aggregate) group runs that differ
// in their seed alone: a run that differs on any other axis is a point of
// its own.
func TestAggregateGroupsRunsThatDifferOnlyInTheirSeed(t *testing.T) {
	base := Result{Grid: GridPolicies, Policy: "chwbl", Workload: "multi-turn", Endpoints: 8, Routers: 3, RateScale: 1, LoadFactor: 1.25,
		MinBound: 1, Signal: "tokens", View: "overlay", GossipIntervalMS: 10, Key: "k", KVBlocks: 0, Concurrency: 0, GossipLoss: 0.01, Seed: 1}
	runs := []Result{base}
	other := base
	other.Seed = 2
	runs = append(runs, other)
	v := reflect.ValueOf(&base).Elem()
	for _, name := range []string{"Grid", "Policy", "Workload", "Endpoints", "Routers", "RateScale", "LoadFactor", "MinBound", "Signal",
		"View", "GossipIntervalMS", "Key", "KVBlocks", "Concurrency", "GossipLoss"} {
		r := base
		f := reflect.ValueOf(&r).Elem().FieldByName(name)
		switch f.Kind() {
		case reflect.String:
			f.SetString(v.FieldByName(name).String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(v.FieldByName(name).Int() + 1)
		case reflect.Float64:
			f.SetFloat(v.FieldByName(name).Float() + 1)
		default:
			t.Fatalf("field %s is a %s", name, f.Kind())
		}
		runs = append(runs, r)
	}
	aggs := aggregate(runs)
	if len(aggs) != len(runs)-1 || len(aggs[0].runs) != 2 {
		var names []string
		for _, a := range aggs {
			names = append(names, pointID(a.Result))
		}
		t.Errorf("%d points of %d runs (two seeds of one point), want %d:\n%s", len(aggs), len(runs), len(runs)-1, strings.Join(names, "\n"))
	}
}

// Goals 2 and 4 are about loads up to ×2: a point at ×4 is in neither.
func TestGoalsTwoAndFourLeaveOutLoadsPastTwice(t *testing.T) {
	run := func(policy, workload string, mean float64) Result {
		return Result{Grid: GridPolicies, Policy: policy, Workload: workload, Routers: 3, RateScale: 4, Endpoints: 8, Seed: 1,
			HitRate: 0.5, TTFTMeanMS: mean, TTFTP50MS: mean, TTFTP99MS: mean}
	}
	md := Markdown([]Result{run("chwbl", "agentic", 10), run("round-robin", "agentic", 20),
		run("chwbl", "trace:x/conversation_trace.jsonl", 10), run("round-robin", "trace:x/conversation_trace.jsonl", 20)}, "test")
	reportHas(t, md, "Met at 0 of 0 points.", "Not checked: the study did not replay the conversation trace")
}

// Goal 2 counts a point that prefixring meets on some seeds and no policy
// meets on all as one that no policy meets, and calls its bound idle only
// where it fired on no seed.
func TestGoalBestCountsEverySeed(t *testing.T) {
	run := func(seed uint64, policy string, mean, fired float64) Result {
		f := fired
		return Result{Grid: GridPolicies, Policy: policy, Workload: "agentic", Routers: 3, RateScale: 1, Endpoints: 8, Seed: seed,
			HitRate: 0.9, TTFTMeanMS: mean, TTFTP99MS: mean, BoundFired: &f}
	}
	md := Markdown([]Result{run(1, "chwbl", 20, 0), run(1, "chash", 30, 0), run(1, "round-robin", 40, 0),
		run(2, "chwbl", 30, 0.1), run(2, "chash", 20, 0), run(2, "round-robin", 40, 0)}, "test")
	reportHas(t, md, "| **missed** (1 of 2 seeds) |", "points no policy meets, prefixring included: 1 of 1.")
	if strings.Contains(md, "bound idle") {
		t.Errorf("a bound that fired on seed 2 is called idle:\n%s", md)
	}
}
