package eval

import (
	"fmt"
	"math"
	"slices"
)

// agg is one point of the study over its seeds: the runs that differ
// only in their seed.
type agg struct {
	Result // the first seed's run, for its labels
	runs   []Result
}

// pointID names a run's point: every axis but the seed.
func pointID(r Result) string {
	return fmt.Sprint(r.Grid, "|", r.Policy, "|", r.Workload, "|", r.Endpoints, "|", r.Routers, "|", r.RateScale, "|", r.LoadFactor, "|",
		r.MinBound, "|", r.Signal, "|", r.View, "|", r.GossipIntervalMS, "|", r.Key, "|", r.KVBlocks, "|", r.Concurrency, "|", r.GossipLoss, "|", r.SlowEngines)
}

// aggregate groups results by point, in first-seen order.
func aggregate(results []Result) []agg {
	var out []agg
	index := map[string]int{}
	for _, r := range results {
		id := pointID(r)
		i, ok := index[id]
		if !ok {
			i = len(out)
			index[id] = i
			out = append(out, agg{Result: r})
		}
		out[i].runs = append(out[i].runs, r)
	}
	return out
}

// vals returns f of each seed's run.
func (a agg) vals(f func(Result) float64) []float64 {
	out := make([]float64, 0, len(a.runs))
	for _, r := range a.runs {
		if v := f(r); !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

// avg is f's mean over the seeds.
func (a agg) avg(f func(Result) float64) float64 {
	v := a.vals(f)
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// rng formats f's range over the seeds, "min–max", or one value when they
// agree at that precision.
func (a agg) rng(f func(Result) float64, digits int) string { return rangeOf(a.vals(f), digits) }

func rangeOf(v []float64, digits int) string {
	if len(v) == 0 {
		return "—"
	}
	lo, hi := fmt.Sprintf("%.*f", digits, slices.Min(v)), fmt.Sprintf("%.*f", digits, slices.Max(v))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// fired is the share of picks where the bound fired (NaN: not a bounded
// policy).
func fired(r Result) float64 {
	if r.BoundFired == nil {
		return math.NaN()
	}
	return *r.BoundFired
}

var nan = math.NaN()

func spill(r Result) float64 { return r.SpillRate }
func hit(r Result) float64   { return r.HitRate }
