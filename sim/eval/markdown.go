package eval

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/prefixring/prefixring/sim/workload"
)

// loadOnly and cacheAware split the policies for the study's first
// question.
var (
	loadOnly   = []string{"round-robin", "random", "least-load", "p2c"}
	cacheAware = []string{"session", "prefix-key", "chash", "score", "radix", "dualmap", "chwbl-local", "chwbl"}
)

// prefixring is the policy the goals are about.
const prefixring = "chwbl"

// set is a selection of results.
type set []Result

func (s set) where(f func(Result) bool) set {
	var out set
	for _, r := range s {
		if f(r) {
			out = append(out, r)
		}
	}
	return out
}

func (s set) grid(name string) set { return s.where(func(r Result) bool { return r.Grid == name }) }

func (s set) policy(p string) (Result, bool) {
	for _, r := range s {
		if r.Policy == p {
			return r, true
		}
	}
	return Result{}, false
}

// best returns the result among names (all when nil) with the least f.
func (s set) best(names []string, f func(Result) float64) (Result, bool) {
	var b Result
	found := false
	for _, r := range s {
		if (names == nil || slices.Contains(names, r.Policy)) && (!found || f(r) < f(b)) {
			b, found = r, true
		}
	}
	return b, found
}

// others are the results of every policy but prefixring.
func (s set) others() set { return s.where(func(r Result) bool { return r.Policy != prefixring }) }

// values returns the distinct values of f in first-seen order.
func values[T comparable](s set, f func(Result) T) []T {
	var out []T
	for _, r := range s {
		if v := f(r); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func mean(r Result) float64   { return r.TTFTMeanMS }
func median(r Result) float64 { return r.TTFTP50MS }
func p99(r Result) float64    { return r.TTFTP99MS }
func negHit(r Result) float64 { return -r.HitRate }

// The ideal fleet's TTFTs (Ideal.FloorsMS).
func floorMean(r Result) float64 { return r.TTFTFloorMeanMS }
func floorP50(r Result) float64  { return r.TTFTFloorP50MS }
func floorP99(r Result) float64  { return r.TTFTFloorP99MS }

// short names a workload for tables.
func short(w string) string {
	if p, recorded, ok := workload.TraceName(w); ok {
		i := strings.LastIndexAny(p, `/\`)
		name := "trace " + strings.TrimSuffix(p[i+1:], ".jsonl")
		if recorded {
			name += " as recorded"
		}
		return name
	}
	return w
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func ms0(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.0f", x)
}

// Markdown writes the study's report: the seeds, the headline per fleet,
// the goals checked point by point over the seeds, the demo, the bound and
// staleness sweeps, and every run. Every figure is a range over the seeds.
func Markdown(results []Result, command string) string {
	all := set(results)
	var b strings.Builder
	seeds := values(all, func(r Result) uint64 { return r.Seed })
	fmt.Fprintf(&b, "# prefixring eval\n\n`%s`\n\n%d runs in the fleet simulator (virtual time, simulated vLLM engines with the calibrated Llama-3.1-8B/H100 profile, every policy through the production balancer, keyer and gossip view; R router replicas are R independent instances of a policy, prefixring's gossiping P and K %v late, losing %g%% of publications).\n\n",
		command, len(results), GossipLatency, 100*DefaultGossipLoss)
	fmt.Fprintf(&b, "Seeds: %v. Each figure is the range over them (min–max). prefixring's defaults were chosen on seeds 1–5; the default study reports seeds %v, which no default was tuned on.\n\n", seeds, DefaultSeeds)
	b.WriteString("Fleets: \"H100\" is the profile's KV (about 431k tokens an engine), \"N blk\" N blocks of 16 tokens. Spill is the share of requests that left their home; fired the share of keyed picks whose home the bound refused (P or K). Loads: ×1 is each workload's base rate, ×2 about what least-load serves before its queues grow; cN is closed loop, N sessions at a time.\n\n")
	if slow := values(all, func(r Result) string { return r.SlowEngines }); slices.ContainsFunc(slow, func(s string) bool { return s != "" }) {
		fmt.Fprintf(&b, "Slow engines (engine:factor, every step that many times the profile's): %q.\n\n", slow)
	}
	pol := all.grid(GridPolicies)
	if len(pol) == 0 {
		pol = all.grid(GridCustom)
	}
	headline(&b, append(pol, all.grid(GridClosed)...))
	seeded := slices.Concat(pol, all.grid(GridClosed), all.grid(GridDemo))
	againstRoundRobin(&b, seeded)
	queuesThatGrew(&b, seeded)
	goals(&b, all, pol)
	sweeps(&b, all)
	b.WriteString("\n## All runs\n\n| " + strings.Join(tableCols, " | ") + " |\n|" + strings.Repeat("---|", len(tableCols)) + "\n")
	for _, r := range results {
		b.WriteString("| " + strings.Join(row(r), " | ") + " |\n")
	}
	return b.String()
}

// fleet names a run's fleet.
func fleetName(kv int) string {
	if kv == 0 {
		return "H100"
	}
	return fmt.Sprintf("%d blk", kv)
}

// fleetOf names a run's fleet with its slow engines, if any: "H100, slow
// 0:10".
func fleetOf(r Result) string {
	if r.SlowEngines != "" {
		return fleetName(r.KVBlocks) + ", slow " + r.SlowEngines
	}
	return fleetName(r.KVBlocks)
}

// loadName names a run's load: its rate scale, or its closed loop.
func loadName(r Result) string { return loadOf(r.RateScale, r.Concurrency) }

// loadOf names a load: the rate scale, or a closed loop of conc sessions.
func loadOf(rate float64, conc int) string {
	if conc > 0 {
		return fmt.Sprintf("c%d", conc)
	}
	return fmt.Sprintf("×%g", rate)
}

// goalPoint is one workload at one load on one fleet, at one setting of
// prefixring's own axes: the unit the goals are checked on, over the
// seeds.
type goalPoint struct {
	workload    string
	rate        float64
	kv, conc, n int
	set         setting
}

func gpOf(r Result) goalPoint {
	return goalPoint{r.Workload, r.RateScale, r.KVBlocks, r.Concurrency, r.Endpoints, settingOf(r)}
}

// setting is what a run was labelled with on the axes of prefixring's own
// settings. A custom grid may sweep them (`prefixring eval --load-factor
// 1.25,2`) and labels every run of a combination with its values, the
// baselines' too, so that a goal compares the runs of one setting, seed
// by seed, and never prefixring at one c with itself at another.
type setting struct {
	loadFactor, intervalMS, loss float64
	minBound                     int64
	signal, view, key            string
}

func settingOf(r Result) setting {
	return setting{r.LoadFactor, r.GossipIntervalMS, r.GossipLoss, r.MinBound, r.Signal, r.View, r.Key}
}

// settingAxes name the axes of a setting for the tables.
var settingAxes = []struct {
	name string
	f    func(setting) string
}{
	{"c", func(x setting) string { return fmt.Sprint(x.loadFactor) }},
	{"floor", func(x setting) string { return fmt.Sprint(x.minBound) }},
	{"signal", func(x setting) string { return x.signal }},
	{"view", func(x setting) string { return x.view }},
	{"interval ms", func(x setting) string { return fmt.Sprint(x.intervalMS) }},
	{"loss", func(x setting) string { return fmt.Sprint(x.loss) }},
	{"key", func(x setting) string { return x.key }},
}

// tag tells p's row from the rows of other settings in a table of s: the
// axes whose values vary over s, with p's, in parentheses; nothing where
// none varies (the default study).
func (p goalPoint) tag(s set) string {
	var parts []string
	for _, a := range settingAxes {
		if len(values(s, func(r Result) string { return a.f(settingOf(r)) })) > 1 {
			parts = append(parts, a.name+" "+a.f(p.set))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// goalPoints lists the points of s at 3 router replicas, in order.
func goalPoints(s set) []goalPoint {
	var out []goalPoint
	for _, r := range s {
		if p := gpOf(r); r.Routers == 3 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (s set) atGP(p goalPoint) set {
	return s.where(func(r Result) bool { return r.Routers == 3 && gpOf(r) == p })
}

// bestOther is the policy other than prefixring with the least mean of f
// over the seeds.
func bestOther(at set, f func(Result) float64) (agg, bool) {
	var best agg
	found := false
	for _, a := range aggregate(at.others()) {
		if !found || a.avg(f) < best.avg(f) {
			best, found = a, true
		}
	}
	return best, found
}

// headline tables prefixring against round-robin and the best other
// policy, fleet by fleet.
func headline(b *strings.Builder, pol set) {
	for _, kv := range values(pol, func(r Result) int { return r.KVBlocks }) {
		s := pol.where(func(r Result) bool { return r.KVBlocks == kv && r.Routers == 3 })
		fmt.Fprintf(b, "## Headline, %s fleet: prefixring at 3 router replicas, round-robin, and the best other policy (by mean over the seeds)\n\n", fleetName(kv))
		b.WriteString("| workload | load | prefixring mean / p99 ms | hit | spill | fired | round-robin mean / p99 ms | best other mean (policy) | best other p99 (policy) | best other hit |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range goalPoints(s) {
			at := s.atGP(p)
			c := aggregate(at.where(func(r Result) bool { return r.Policy == prefixring }))
			rr := aggregate(at.where(func(r Result) bool { return r.Policy == "round-robin" }))
			if len(c) == 0 {
				continue
			}
			bm, _ := bestOther(at, mean)
			bp, _ := bestOther(at, p99)
			bh, _ := bestOther(at, negHit)
			rrs := "—"
			if len(rr) > 0 {
				rrs = rr[0].rng(mean, 0) + " / " + rr[0].rng(p99, 0)
			}
			fmt.Fprintf(b, "| %s | %s | %s / %s | %s | %s | %s | %s | %s (%s) | %s (%s) | %s (%s) |\n", short(p.workload)+p.tag(s), loadName(c[0].Result),
				c[0].rng(mean, 0), c[0].rng(p99, 0), c[0].rng(hit, 3), c[0].rng(spill, 3), c[0].rng(fired, 3), rrs,
				bm.rng(mean, 0), bm.Policy, bp.rng(p99, 0), bp.Policy, bh.rng(hit, 3), bh.Policy)
		}
		b.WriteString("\n")
	}
}

// sweeps tables the bound and staleness grids.
func sweeps(b *strings.Builder, all set) {
	for _, g := range []struct{ name, title string }{
		{GridBound, "The bound: c and the floor at ×2"},
		{GridStaleness, "Staleness: the gossip interval and a lossy network at ×2"},
	} {
		s := all.grid(g.name)
		if len(s) == 0 {
			continue
		}
		fmt.Fprintf(b, "## %s\n\n| workload | fleet | policy | c | floor | interval ms | loss | hit | mean ms | p99 ms | spill | fired | false spills |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", g.title)
		for _, a := range aggregate(s) {
			fmt.Fprintf(b, "| %s | %s | %s | %g | %d | %g | %g | %s | %s | %s | %s | %s | %s |\n", short(a.Workload), fleetName(a.KVBlocks), a.Policy,
				a.LoadFactor, a.MinBound, a.GossipIntervalMS, a.GossipLoss, a.rng(hit, 3), a.rng(mean, 0), a.rng(p99, 0), a.rng(spill, 3), a.rng(fired, 3),
				a.rng(func(r Result) float64 {
					if r.FalseSpillRate == nil {
						return math.NaN()
					}
					return *r.FalseSpillRate
				}, 3))
		}
		b.WriteString("\n")
	}
}

func fptr(p *float64, digits int) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.*f", digits, *p)
}
