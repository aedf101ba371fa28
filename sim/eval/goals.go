package eval

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prefixring/prefixring/sim/workload"
)

// overloadRate is the load the study calls twice the fleet's capacity.
const overloadRate = 4

// Goal statuses. A goal is met at a point when it holds on every seed;
// vacuous when it cannot fail there (goal 3 compares prefixring with a
// policy it equals where the bound never fires; goal 2 at a point where
// prefixring alone ran compares it with itself).
const (
	met     = "met"
	missed  = "**missed**"
	vacuous = "VACUOUS"
)

// status is met, missed (on k of n seeds) or vacuous.
func status(ok, n int) string {
	if ok == n {
		return met
	}
	return fmt.Sprintf("%s (%d of %d seeds)", missed, n-ok, n)
}

// goals checks the study's goals 1 to 4 (docs/study.md, "Goals and what
// the report shows") and says, at each miss, why.
func goals(b *strings.Builder, all, pol set) {
	b.WriteString("## Goals, checked on these results\n\nA goal is met at a point when it holds on every seed. Goal 5 (real time against HAProxy) is not the simulator's.\n\n")
	goalDemo(b, all.grid(GridDemo))
	goalBest(b, append(pol.where(func(r Result) bool { return r.RateScale <= 2 }), all.grid(GridClosed)...))
	goalGossip(b, append(pol, all.grid(GridClosed)...))
	goalTrace(b, append(pol, all.grid(GridRecorded)...))
}

// ratios returns, seed by seed, f(prefixring)/f(base) at one point.
func ratios(at set, base string, f func(Result) float64) []float64 {
	return perSeed(at, base, func(c, o Result) float64 { return f(c) / f(o) })
}

// perSeed returns, seed by seed, g of prefixring's run and base's run of
// the same seed at one point.
func perSeed(at set, base string, g func(c, o Result) float64) []float64 {
	var out []float64
	for _, c := range at.where(func(r Result) bool { return r.Policy == prefixring }) {
		for _, o := range at.where(func(r Result) bool { return r.Policy == base && r.Seed == c.Seed }) {
			out = append(out, g(c, o))
		}
	}
	return out
}

func countLE(xs []float64, lim float64) int {
	n := 0
	for _, x := range xs {
		if x <= lim {
			n++
		}
	}
	return n
}

// demoLimits are goal 1's limits, each a ratio to round-robin's: the
// check, the section's title and its reasons all read them here.
var demoLimits = struct{ mean, p50, p99 float64 }{0.8, 0.6, 1}

// demoFails lists what c, prefixring's run of the demo, misses of goal 1
// against o, round-robin's at the same seed: each ratio above its limit,
// rounded as the table rounds it, so a miss may read as "1.00×" when it
// is by less than half a percent. A limit that c's ideal fleet does not
// reach either is said so.
func demoFails(c, o Result) []string {
	var out []string
	for _, x := range []struct {
		name     string
		f, floor func(Result) float64
		lim      float64
	}{{"mean", mean, floorMean, demoLimits.mean}, {"p50", median, floorP50, demoLimits.p50}, {"p99", p99, floorP99, demoLimits.p99}} {
		if r := x.f(c) / x.f(o); r > x.lim {
			miss := fmt.Sprintf("%s %.2f×", x.name, r)
			if lim := x.lim * x.f(o); x.floor(c) > lim {
				miss += fmt.Sprintf(" (its limit, %.1f ms, is below the ideal fleet's %.1f)", lim, x.floor(c))
			}
			out = append(out, miss)
		}
	}
	return out
}

// goalDemo: the demo's shape, mean TTFT <= 0.8x round-robin's, p99 <=
// 1.0x, p50 <= 0.6x.
func goalDemo(b *strings.Builder, demo set) {
	fmt.Fprintf(b, "### 1. The demo's shape (virtual time): mean TTFT ≤ %.1f × round-robin's, p99 ≤ %.1f ×, p50 ≤ %.1f ×\n\n", demoLimits.mean, demoLimits.p99, demoLimits.p50)
	if len(demo) == 0 {
		b.WriteString("Not checked: no demo runs.\n\n")
		return
	}
	b.WriteString("| fleet | prefixring mean / p50 / p99 ms | round-robin mean / p50 / p99 ms | ideal fleet mean / p50 / p99 ms | mean × | p50 × | p99 × | spill | fired | status |\n|---|---|---|---|---|---|---|---|---|---|\n")
	var why []string
	for _, p := range goalPoints(demo) {
		at := demo.atGP(p)
		c := aggregate(at.where(func(r Result) bool { return r.Policy == prefixring }))
		rr := aggregate(at.where(func(r Result) bool { return r.Policy == "round-robin" }))
		if len(c) == 0 || len(rr) == 0 {
			continue
		}
		m, p50, p9 := ratios(at, "round-robin", mean), ratios(at, "round-robin", median), ratios(at, "round-robin", p99)
		ok, n, fails := demoMeets(at, prefixring)
		st := status(ok, n)
		fmt.Fprintf(b, "| %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s | %s | %s | %s | %s | %s |\n", fleetName(p.kv)+p.tag(demo),
			c[0].rng(mean, 0), c[0].rng(median, 0), c[0].rng(p99, 0),
			rr[0].rng(mean, 0), rr[0].rng(median, 0), rr[0].rng(p99, 0),
			c[0].rng(floorMean, 1), c[0].rng(floorP50, 1), c[0].rng(floorP99, 1),
			rangeOf(m, 2), rangeOf(p50, 2), rangeOf(p9, 2), c[0].rng(spill, 3), c[0].rng(fired, 3), st)
		if ok < n {
			bm, _ := bestOther(at, mean)
			why = append(why, fmt.Sprintf("demo on %s: mean %s× (limit %.1f), p50 %s× (%.1f), p99 %s× (%.1f) round-robin's; hit %s against round-robin's %s; the best other policy by mean is %s (%s ms, hit %s). Missed on %s. %s",
				fleetName(p.kv)+p.tag(demo), rangeOf(m, 2), demoLimits.mean, rangeOf(p50, 2), demoLimits.p50, rangeOf(p9, 2), demoLimits.p99, c[0].rng(hit, 3), rr[0].rng(hit, 3), bm.Policy, bm.rng(mean, 0), bm.rng(hit, 3), strings.Join(fails, "; "), demoOthers(at)))
		}
	}
	b.WriteString("\n")
	bullets(b, why)
}

// demoMeets checks goal 1 for policy q at one point of the demo grid,
// seed by seed against round-robin's run at the same seed: the seeds it
// meets the goal on, the seeds checked, and how it misses on each other.
func demoMeets(at set, q string) (ok, n int, fails []string) {
	for _, run := range at.where(func(r Result) bool { return r.Policy == q }) {
		for _, base := range at.where(func(r Result) bool { return r.Policy == "round-robin" && r.Seed == run.Seed }) {
			n++
			if f := demoFails(run, base); len(f) == 0 {
				ok++
			} else {
				fails = append(fails, fmt.Sprintf("seed %d: %s", run.Seed, strings.Join(f, ", ")))
			}
		}
	}
	return ok, n, fails
}

// demoOthers is goal 1's check applied to every other policy at the
// point, so that a miss no policy avoids reads apart from one that
// prefixring alone has: the policies that meet it on some seed, most
// seeds first.
func demoOthers(at set) string {
	type tally struct {
		policy string
		ok, n  int
	}
	var ts []tally
	for _, q := range policiesAt(at) {
		if q == prefixring || q == "round-robin" {
			continue
		}
		if ok, n, _ := demoMeets(at, q); ok > 0 {
			ts = append(ts, tally{q, ok, n})
		}
	}
	if len(ts) == 0 {
		return "No other policy meets it on any seed."
	}
	slices.SortStableFunc(ts, func(a, b tally) int { return cmp.Compare(b.ok, a.ok) })
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s on %d of %d", t.policy, t.ok, t.n)
	}
	return "The same check for every other policy, seeds met: " + strings.Join(parts, ", ") + "."
}

// goalBest: on every workload at loads up to x2 on both fleets, at 3
// replicas, mean and p99 TTFT <= 1.05x the best policy's and below
// round-robin's, and hit >= 0.95x the best.
func goalBest(b *strings.Builder, pol set) {
	b.WriteString("### 2. Every workload at loads ≤ ×2 on both fleets, 3 router replicas: mean and p99 TTFT ≤ 1.05 × the best policy's and below round-robin's; hit ≥ 0.95 × the best\n\n")
	b.WriteString("Bound idle: the bound never fired on any seed, so no load entered prefixring's placement there: each request's key, and its group's set where its shared part is long, placed it by consistent hashing (rendezvous, not chash's ring, so the results can differ). Queues grew (k of n): prefixring's queues grew through the run at k of the n seeds, past the fleet's capacity, where TTFT depends on how long the run is (\"Queues that grew\").\n\n")
	b.WriteString("| workload | load | fleet | mean / best | p99 / best | hit / best | spill | fired | status |\n|---|---|---|---|---|---|---|---|---|\n")
	var whys []string
	nmet, nvac, total, nobody := 0, 0, 0, 0
	others := map[string]int{} // points where each other policy meets the same check
	for _, p := range goalPoints(pol) {
		at := pol.atGP(p)
		cs := at.where(func(r Result) bool { return r.Policy == prefixring })
		if len(cs) == 0 {
			continue
		}
		var mr, pr, hr []float64
		ok := 0
		var fails []string
		for _, c := range cs {
			seed := at.where(func(r Result) bool { return r.Seed == c.Seed })
			b := bestOf(seed)
			mr, pr, hr = append(mr, c.TTFTMeanMS/b.mean.TTFTMeanMS), append(pr, c.TTFTP99MS/b.p99.TTFTP99MS), append(hr, c.HitRate/b.hit.HitRate)
			if f := bestFails(seed, b, c); len(f) == 0 {
				ok++
			} else {
				fails = append(fails, fmt.Sprintf("seed %d: %s", c.Seed, strings.Join(f, ", ")))
			}
		}
		anyone := ok == len(cs)
		for _, q := range policiesAt(at) {
			if q != prefixring && q != "round-robin" && meetsBest(at, q) {
				others[q]++
				anyone = true
			}
		}
		if !anyone {
			nobody++
		}
		c := aggregate(cs)[0]
		st := status(ok, len(cs))
		if fv := c.vals(fired); len(fv) > 0 && slices.Max(fv) == 0 {
			st += ", bound idle"
		}
		st += grewNote(cs)
		total++
		switch {
		case len(policiesAt(at)) == 1:
			// prefixring alone ran here: it is its own best and has no
			// round-robin to be below, so the check cannot fail.
			st = vacuous
			nvac++
		case ok == len(cs):
			nmet++
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", short(p.workload)+p.tag(pol), loadName(c.Result), fleetName(p.kv),
			rangeOf(mr, 2), rangeOf(pr, 2), rangeOf(hr, 3), c.rng(spill, 3), c.rng(fired, 3), st)
		if len(fails) > 0 {
			whys = append(whys, fmt.Sprintf("%s %s, %s fleet (spill %s, fired %s, hit %s): %s.", short(p.workload)+p.tag(pol), loadName(c.Result), fleetName(p.kv),
				c.rng(spill, 3), c.rng(fired, 3), c.rng(hit, 3), strings.Join(fails, "; ")))
		}
	}
	fmt.Fprintf(b, "\nMet at %d of %d points", nmet, total)
	if nvac > 0 {
		fmt.Fprintf(b, "; vacuous at %d, where prefixring alone ran (its own best, and no round-robin to be below)", nvac)
	}
	b.WriteString(".\n\n")
	names := slices.Sorted(maps.Keys(others))
	slices.SortStableFunc(names, func(x, y string) int { return cmp.Compare(others[y], others[x]) }) // most points first
	var ranked []string
	for _, q := range names {
		ranked = append(ranked, fmt.Sprintf("%s %d", q, others[q]))
	}
	if len(ranked) == 0 {
		ranked = []string{"none"}
	}
	fmt.Fprintf(b, "The same check for every other policy (each against the best at its seed, round-robin aside): points met by %s; points no policy meets, prefixring included: %d of %d.\n\n",
		strings.Join(ranked, ", "), nobody, total)
	bullets(b, whys)
}

// bests are the runs of one seed of a point with the best mean TTFT, the
// best p99 and the best hit.
type bests struct{ mean, p99, hit Result }

func bestOf(seed set) bests {
	bm, _ := seed.best(nil, mean)
	bp, _ := seed.best(nil, p99)
	bh, _ := seed.best(nil, negHit)
	return bests{bm, bp, bh}
}

// bestFails says how c misses goal 2 at its seed, whose runs are seed
// and whose bests are b: mean or p99 TTFT above 1.05x the best's, hit
// below 0.95x the best's, or mean and p99 not both below round-robin's.
// None: c meets it.
func bestFails(seed set, b bests, c Result) []string {
	bm, bp, bh := b.mean, b.p99, b.hit
	var f []string
	if c.TTFTMeanMS > 1.05*bm.TTFTMeanMS {
		f = append(f, fmt.Sprintf("mean %.2f× %s's", c.TTFTMeanMS/bm.TTFTMeanMS, bm.Policy))
	}
	if c.TTFTP99MS > 1.05*bp.TTFTP99MS {
		f = append(f, fmt.Sprintf("p99 %.2f× %s's", c.TTFTP99MS/bp.TTFTP99MS, bp.Policy))
	}
	if c.HitRate < 0.95*bh.HitRate {
		f = append(f, fmt.Sprintf("hit %.3f against %s's %.3f", c.HitRate, bh.Policy, bh.HitRate))
	}
	if rr, ok := seed.policy("round-robin"); ok && !(c.TTFTMeanMS < rr.TTFTMeanMS && c.TTFTP99MS < rr.TTFTP99MS) {
		f = append(f, fmt.Sprintf("not below round-robin (mean %.2f×, p99 %.2f×)", c.TTFTMeanMS/rr.TTFTMeanMS, c.TTFTP99MS/rr.TTFTP99MS))
	}
	return f
}

// meetsBest reports whether policy q meets goal 2 on every seed of the
// point at.
func meetsBest(at set, q string) bool {
	runs := at.where(func(r Result) bool { return r.Policy == q })
	for _, c := range runs {
		seed := at.where(func(r Result) bool { return r.Seed == c.Seed })
		if len(bestFails(seed, bestOf(seed), c)) > 0 {
			return false
		}
	}
	return len(runs) > 0
}

// policiesAt lists the policies with runs at a point, in order of first run.
func policiesAt(at set) []string {
	var out []string
	for _, r := range at {
		if !slices.Contains(out, r.Policy) {
			out = append(out, r.Policy)
		}
	}
	return out
}

// goalGossip: where the bound fires, prefixring's p99 at 3 replicas is at
// least 10% below chwbl-local's; vacuous where it fires for neither.
func goalGossip(b *strings.Builder, pol set) {
	b.WriteString("### 3. Gossip earns its place: where the bound fires, prefixring's p99 at 3 replicas ≥ 10 % below chwbl-local's\n\n")
	b.WriteString("| workload | load | fleet | prefixring p99 ms (fired) | chwbl-local p99 ms (fired) | p99 × | status |\n|---|---|---|---|---|---|---|\n")
	var why []string
	counts := map[string]int{}
	for _, p := range goalPoints(pol) {
		at := pol.atGP(p)
		c := aggregate(at.where(func(r Result) bool { return r.Policy == prefixring }))
		l := aggregate(at.where(func(r Result) bool { return r.Policy == "chwbl-local" }))
		if len(c) == 0 || len(l) == 0 {
			continue
		}
		rs := ratios(at, "chwbl-local", p99)
		fv := append(c[0].vals(fired), l[0].vals(fired)...)
		st := vacuous
		if len(fv) > 0 && slices.Max(fv) > 0 {
			st = status(countLE(rs, 0.9), len(rs))
		}
		counts[strings.SplitN(st, " ", 2)[0]]++
		fmt.Fprintf(b, "| %s | %s | %s | %s (%s) | %s (%s) | %s | %s |\n", short(p.workload)+p.tag(pol), loadName(c[0].Result), fleetName(p.kv),
			c[0].rng(p99, 0), c[0].rng(fired, 3), l[0].rng(p99, 0), l[0].rng(fired, 3), rangeOf(rs, 2), st)
		if st != vacuous && st != met {
			cause := gossipMissCause(c[0].vals(fired), l[0].vals(fired))
			why = append(why, fmt.Sprintf("%s %s, %s fleet: p99 %s× chwbl-local's; prefixring fired on %s of its picks, chwbl-local on %s; false spills %s against %s, agreement %s: %s.",
				short(p.workload)+p.tag(pol), loadName(c[0].Result), fleetName(p.kv), rangeOf(rs, 2), c[0].rng(fired, 3), l[0].rng(fired, 3),
				c[0].rng(falseSpill, 3), l[0].rng(falseSpill, 3), c[0].rng(agreement, 3), cause))
		}
	}
	fmt.Fprintf(b, "\nMet at %d points, missed at %d, vacuous at %d.\n\n", counts[met], counts[missed], counts[vacuous])
	bullets(b, why)
}

// gossipMissCause says, from how often each bound fired over the seeds
// (prefixring's cf, chwbl-local's lf), what stood behind a point where
// prefixring's p99 is not 10 % below chwbl-local's. Each reason is a
// reading of those shares alone, so each holds of the numbers it is
// printed beside.
func gossipMissCause(cf, lf []float64) string {
	switch c, l := slices.Max(cf), slices.Max(lf); {
	case l < 0.01:
		return "chwbl-local's bound hardly fired: each replica holds a third of the load against the same floor and capacity, so it kept homes that prefixring's gossiped view spilled off, and those spills did not buy a p99 10 % lower"
	case min(slices.Min(cf), slices.Min(lf)) >= 0.5:
		return "both bounds fired on most picks: the fleet is past what any keyed placement serves, and the view changes which engine is overfull, not whether one is"
	case c >= 2*l:
		return "prefixring's bound fired at least twice as often as chwbl-local's: its gossiped view, which counts the other replicas' load, spilled requests that each replica's own view kept home, and those spills did not buy a p99 10 % lower"
	case l >= 2*c:
		return "chwbl-local's bound fired at least twice as often as prefixring's"
	}
	return "the two bounds fired about as often (within a factor of 2)"
}

func falseSpill(r Result) float64 {
	if r.FalseSpillRate == nil {
		return nan
	}
	return *r.FalseSpillRate
}

func agreement(r Result) float64 {
	if r.Agreement == nil {
		return nan
	}
	return *r.Agreement
}

// goalTrace: on the Mooncake conversation trace at x1 and x2, mean TTFT
// <= 0.8x round-robin's, with its ticks spread (trace:PATH) and, where the
// study ran it, as recorded (trace-recorded:PATH).
func goalTrace(b *strings.Builder, pol set) {
	b.WriteString("### 4. Mooncake conversation trace ×1 and ×2: mean TTFT ≤ 0.8 × round-robin's\n\n")
	rows := pol.where(func(r Result) bool { return strings.Contains(r.Workload, "conversation_trace") && r.RateScale <= 2 })
	if len(rows) == 0 {
		b.WriteString("Not checked: the study did not replay the conversation trace (give --traces).\n\n")
		return
	}
	b.WriteString("The trace stamps its requests on a 3-second grid. Spread: the requests of a tick arrive at seeded uniform times within it (each seed its own draw). As recorded: all at the tick's instant, replayed as written.\n\n")
	b.WriteString("| arrivals | load | fleet | prefixring mean ms | round-robin mean ms | ideal fleet mean ms | ratio | hit | spill | fired | status |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	var why []string
	for _, p := range goalPoints(rows) {
		at := rows.atGP(p)
		c := aggregate(at.where(func(r Result) bool { return r.Policy == prefixring }))
		rr := aggregate(at.where(func(r Result) bool { return r.Policy == "round-robin" }))
		if len(c) == 0 || len(rr) == 0 {
			continue
		}
		arrivals := "spread"
		if _, recorded, _ := workload.TraceName(p.workload); recorded {
			arrivals = "as recorded"
		}
		rs := ratios(at, "round-robin", mean)
		ok := countLE(rs, 0.8)
		st := status(ok, len(rs)) + grewNote(c[0].runs)
		fmt.Fprintf(b, "| %s | ×%g | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", arrivals+p.tag(rows), p.rate, fleetName(p.kv), c[0].rng(mean, 0), rr[0].rng(mean, 0), c[0].rng(floorMean, 0), rangeOf(rs, 2),
			c[0].rng(hit, 3), c[0].rng(spill, 3), c[0].rng(fired, 3), st)
		if ok < len(rs) {
			bm, _ := bestOther(at, mean)
			reach := "within the ideal fleet's reach on every seed"
			// The ideal fleet's mean over round-robin's, seed by seed.
			ideal := perSeed(at, "round-robin", func(c, o Result) float64 { return floorMean(c) / mean(o) })
			if n := countLE(ideal, 0.8); n < len(rs) {
				reach = fmt.Sprintf("below the ideal fleet's mean on %d of %d seeds", len(rs)-n, len(rs))
			}
			others := len(aggregate(at.others()))
			why = append(why, fmt.Sprintf("trace ×%g, %s, %s fleet: mean %s× round-robin's, hit %s against %s; the best other policy by mean of the %d run there, %s, has %s ms (hit %s). The limit is %s (the ideal fleet: %s ms).",
				p.rate, arrivals+p.tag(rows), fleetName(p.kv), rangeOf(rs, 2), c[0].rng(hit, 3), rr[0].rng(hit, 3), others, bm.Policy, bm.rng(mean, 0), bm.rng(hit, 3), reach, c[0].rng(floorMean, 0)))
		}
	}
	b.WriteString("\n")
	bullets(b, why)
}

// bullets writes a list of reasons, one bullet each, and a blank line.
func bullets(b *strings.Builder, lines []string) {
	if len(lines) == 0 {
		return
	}
	for _, l := range lines {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString("\n")
}
