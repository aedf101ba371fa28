package eval

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
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

// point is one workload at one load: the unit the goals are checked on.
type loadPoint struct {
	workload string
	rate     float64
}

func points3(s set) []loadPoint {
	var out []loadPoint
	for _, r := range s {
		p := loadPoint{r.Workload, r.RateScale}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (s set) at(p loadPoint) set {
	return s.where(func(r Result) bool { return r.Workload == p.workload && r.RateScale == p.rate })
}

func mean(r Result) float64   { return r.TTFTMeanMS }
func p99(r Result) float64    { return r.TTFTP99MS }
func negHit(r Result) float64 { return -r.HitRate }

// short names a workload for tables.
func short(w string) string {
	if p, ok := strings.CutPrefix(w, "trace:"); ok {
		i := strings.LastIndexAny(p, `/\`)
		return "trace " + strings.TrimSuffix(p[i+1:], ".jsonl")
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

// Markdown writes the study's report: the headline, the three questions
// answered from the results, the key designs, the goals checked, and every
// run.
func Markdown(results []Result, command string) string {
	all := set(results)
	var b strings.Builder
	fmt.Fprintf(&b, "# prefixring eval\n\n`%s`\n\n%d runs in the fleet simulator: virtual time, simulated vLLM engines with the calibrated Llama-3.1-8B/H100 profile, every policy through the production balancer, keyer and gossip view; R router replicas are R independent instances of a policy, each seeing only the requests that reach it (DNS round-robin), prefixring's gossiping their loads and shared-prefix sketches. Loads: ×1 is each built-in workload's base rate; ×2 is about what least-load serves before its queues grow; ×4 is twice that. A trace's ×1 is the rate it was recorded at, and its queues grow from ×2 on; the default study runs it at ×4 only for goal 6 (prefixring, least-load and round-robin).\n\n", command, len(results))
	pol := all.grid(GridPolicies)
	if len(pol) == 0 {
		pol = all.grid(GridCustom)
	}
	headline(&b, pol)
	question1(&b, pol)
	question2(&b, all)
	question3(&b, all)
	keys(&b, all.grid(GridKeys))
	goals(&b, all, pol)
	b.WriteString("\n## All runs\n\n| " + strings.Join(tableCols, " | ") + " |\n|" + strings.Repeat("---|", len(tableCols)) + "\n")
	for _, r := range results {
		b.WriteString("| " + strings.Join(row(r), " | ") + " |\n")
	}
	return b.String()
}

// headline tables prefixring against the best other policy at each point.
func headline(b *strings.Builder, pol set) {
	if len(pol) == 0 {
		return
	}
	routers := values(pol, func(r Result) int { return r.Routers })
	for _, rt := range routers {
		s := pol.where(func(r Result) bool { return r.Routers == rt })
		fmt.Fprintf(b, "## Headline: prefixring at %d router replicas against the best other policy\n\n", rt)
		b.WriteString("| workload | load | prefixring hit / mean / p99 ms | best other hit | best other mean | best other p99 | round-robin mean / p99 |\n|---|---|---|---|---|---|---|\n")
		for _, p := range points3(s) {
			at := s.at(p)
			c, ok := at.policy(prefixring)
			if !ok {
				continue
			}
			o := at.others()
			bh, _ := o.best(nil, negHit)
			bm, _ := o.best(nil, mean)
			bp, _ := o.best(nil, p99)
			rr, _ := at.policy("round-robin")
			fmt.Fprintf(b, "| %s | ×%g | %.3f / %s / %s | %.3f (%s) | %s (%s) | %s (%s) | %s / %s |\n", short(p.workload), p.rate,
				c.HitRate, ms0(c.TTFTMeanMS), ms0(c.TTFTP99MS), bh.HitRate, bh.Policy, ms0(bm.TTFTMeanMS), bm.Policy,
				ms0(bp.TTFTP99MS), bp.Policy, ms0(rr.TTFTMeanMS), ms0(rr.TTFTP99MS))
		}
		b.WriteString("\n")
	}
}

// question1: where does cache-aware routing beat load-only routing?
func question1(b *strings.Builder, pol set) {
	b.WriteString("## 1. Under what workloads does cache-aware routing improve TTFT and tail latency over load-only routing?\n\n")
	if len(pol) == 0 {
		b.WriteString("Not answered: the study has no grid with both kinds of policy.\n\n")
		return
	}
	b.WriteString("| workload | load | routers | best cache-aware: mean / p99 ms | best load-only: mean / p99 ms | mean ratio | p99 ratio | hit: cache-aware / load-only |\n|---|---|---|---|---|---|---|---|\n")
	var wins, losses []string
	for _, rt := range values(pol, func(r Result) int { return r.Routers }) {
		s := pol.where(func(r Result) bool { return r.Routers == rt })
		for _, p := range points3(s) {
			at := s.at(p)
			cm, ok1 := at.best(cacheAware, mean)
			cp, _ := at.best(cacheAware, p99)
			lm, ok2 := at.best(loadOnly, mean)
			lp, _ := at.best(loadOnly, p99)
			if !ok1 || !ok2 {
				continue
			}
			ch, _ := at.best(cacheAware, negHit)
			lh, _ := at.best(loadOnly, negHit)
			fmt.Fprintf(b, "| %s | ×%g | %d | %s (%s) / %s (%s) | %s (%s) / %s (%s) | %.2f | %.2f | %.3f / %.3f |\n", short(p.workload), p.rate, rt,
				ms0(cm.TTFTMeanMS), cm.Policy, ms0(cp.TTFTP99MS), cp.Policy, ms0(lm.TTFTMeanMS), lm.Policy, ms0(lp.TTFTP99MS), lp.Policy,
				cm.TTFTMeanMS/lm.TTFTMeanMS, cp.TTFTP99MS/lp.TTFTP99MS, ch.HitRate, lh.HitRate)
			label := fmt.Sprintf("%s ×%g (%.2f× mean, %.2f× p99)", short(p.workload), p.rate, cm.TTFTMeanMS/lm.TTFTMeanMS, cp.TTFTP99MS/lp.TTFTP99MS)
			if cm.TTFTMeanMS < lm.TTFTMeanMS && cp.TTFTP99MS < lp.TTFTP99MS {
				wins = append(wins, label)
			} else {
				losses = append(losses, label)
			}
		}
	}
	fmt.Fprintf(b, "\nCache-aware routing beats the best load-only policy on both mean and p99 TTFT at %d of %d points", len(wins), len(wins)+len(losses))
	if len(losses) > 0 {
		fmt.Fprintf(b, "; not at %s", strings.Join(losses, "; "))
	}
	b.WriteString(".")
	if least, most, ok := gains(pol); ok {
		fmt.Fprintf(b, " The gain is largest on %s ×%g (mean TTFT %.2f× the best load-only policy's, hit %.3f against %.3f) and smallest on %s ×%g (%.2f×, hit %.3f against %.3f): it follows the hit rate a load-only policy leaves on the table, and shrinks where every engine's cache already holds the shared prefixes (the hit rates are close) or the fleet is saturated.",
			short(most.workload), most.rate, most.ratio, most.cacheHit, most.loadHit, short(least.workload), least.rate, least.ratio, least.cacheHit, least.loadHit)
	}
	b.WriteString("\n\n")
}

// gain is the best cache-aware policy's mean TTFT over the best load-only
// policy's at one point, with the two hit rates.
type gain struct {
	loadPoint
	ratio, cacheHit, loadHit float64
}

// gains returns the points with the smallest and the largest gain.
func gains(pol set) (least, most gain, ok bool) {
	for _, p := range points3(pol) {
		at := pol.at(p)
		cm, ok1 := at.best(cacheAware, mean)
		lm, ok2 := at.best(loadOnly, mean)
		if !ok1 || !ok2 || lm.TTFTMeanMS == 0 {
			continue
		}
		ch, _ := at.best(cacheAware, negHit)
		lh, _ := at.best(loadOnly, negHit)
		g := gain{p, cm.TTFTMeanMS / lm.TTFTMeanMS, ch.HitRate, lh.HitRate}
		if !ok || g.ratio > least.ratio {
			least = g
		}
		if !ok || g.ratio < most.ratio {
			most = g
		}
		ok = true
	}
	return least, most, ok
}

// question2: affinity against queueing: c, the floor, the load signal,
// and a scoring policy.
func question2(b *strings.Builder, all set) {
	b.WriteString("## 2. What is the trade-off between cache affinity and queueing delay, and can a simple scoring policy find robust settings?\n\n")
	bound := all.grid(GridBound).where(func(r Result) bool { return r.Policy == prefixring })
	sig := all.grid(GridSignal).where(func(r Result) bool { return r.Policy == prefixring })
	def := all.grid(GridPolicies).where(func(r Result) bool { return r.Policy == prefixring })
	if len(bound)+len(sig) == 0 {
		b.WriteString("Not answered: the study swept no bound or signal.\n\n")
		return
	}
	b.WriteString("prefixring's bound at 3 router replicas, around its defaults (each row changes one setting; hit / mean / p99 ms / spill rate):\n\n| workload | load | setting | hit | mean | p99 | spill |\n|---|---|---|---|---|---|---|\n")
	rows := append(append(set{}, def...), bound...)
	rows = append(rows, sig...)
	slices.SortStableFunc(rows, func(a, c Result) int {
		return cmp.Or(cmp.Compare(a.Workload, c.Workload), cmp.Compare(a.RateScale, c.RateScale))
	})
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Routers != 3 {
			continue
		}
		setting := fmt.Sprintf("c %g, floor %d %s, %s view, key %s", r.LoadFactor, r.MinBound, r.Signal, r.View, r.Key)
		id := fmt.Sprint(r.Workload, r.RateScale, setting)
		if seen[id] {
			continue
		}
		seen[id] = true
		fmt.Fprintf(b, "| %s | ×%g | %s | %.3f | %s | %s | %.3f |\n", short(r.Workload), r.RateScale, setting, r.HitRate, ms0(r.TTFTMeanMS), ms0(r.TTFTP99MS), r.SpillRate)
	}
	// Which setting is best most often, by mean TTFT?
	byPoint := map[loadPoint]set{}
	for _, r := range rows {
		if r.Routers == 3 {
			p := loadPoint{r.Workload, r.RateScale}
			byPoint[p] = append(byPoint[p], r)
		}
	}
	wins := map[string]int{}
	for _, s := range byPoint {
		if r, ok := s.best(nil, mean); ok {
			wins[fmt.Sprintf("c %g, floor %d %s", r.LoadFactor, r.MinBound, r.Signal)]++
		}
	}
	var names []string
	for n := range wins {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, c string) int { return cmp.Or(cmp.Compare(wins[c], wins[a]), cmp.Compare(a, c)) })
	b.WriteString("\nLowest mean TTFT, points won: ")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%s: %d", n, wins[n])
	}
	b.WriteString(". A smaller c or floor spills earlier: better balance, more cache misses; a larger one keeps affinity longer and queues behind hot homes. Counting requests (the paper's and HAProxy's unit) spills on request counts an engine batches without effort, and misses the long prefills that block it; counting the prefill tokens still unanswered, with a request's cached part left out at its home and an own-size floor, spills only when the home's queue would cost more than the cache saves.\n\n")
	pol := all.grid(GridPolicies)
	if score := pol.where(func(r Result) bool { return r.Policy == "score" && r.Routers == 3 }); len(score) > 0 {
		b.WriteString("The scoring policy (α·overlap − β·queue, α 1, β 0.05), one setting on every workload, against the best policy at each point: ")
		var parts []string
		for _, r := range score {
			at := pol.at(loadPoint{r.Workload, r.RateScale}).where(func(x Result) bool { return x.Routers == 3 })
			bm, _ := at.best(nil, mean)
			parts = append(parts, fmt.Sprintf("%s ×%g %.2f×", short(r.Workload), r.RateScale, r.TTFTMeanMS/bm.TTFTMeanMS))
		}
		b.WriteString(strings.Join(parts, ", ") + " mean TTFT. Its estimated overlap comes from what its own replica sent, so at 3 replicas two thirds of a conversation's history is invisible to it, and one β cannot price a queue of short requests and one of long prefills alike.\n\n")
	}
}

// question3: staleness of shared state.
func question3(b *strings.Builder, all set) {
	b.WriteString("## 3. How sensitive are the benefits to the staleness of shared state?\n\n")
	st := all.grid(GridStaleness).where(func(r Result) bool { return r.Policy == prefixring })
	if len(st) == 0 {
		b.WriteString("Not answered: the study swept no gossip interval.\n\n")
		return
	}
	b.WriteString("prefixring at 3 replicas; request lifetime is the median end-to-end time; agreement is the share of keyed requests every replica would have sent to the same endpoint; false spills left a home that the true loads kept within its bound.\n\n| workload | load | view | interval ms | interval ÷ lifetime | agreement | false spills | imbalance | hit | mean ms | p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range st {
		fmt.Fprintf(b, "| %s | ×%g | %s | %g | %.3f | %s | %s | %.2f | %.3f | %s | %s |\n", short(r.Workload), r.RateScale, r.View, r.GossipIntervalMS,
			r.GossipIntervalMS/r.E2EP50MS, fptr(r.Agreement, 3), fptr(r.FalseSpillRate, 3), r.Imbalance, r.HitRate, ms0(r.TTFTMeanMS), ms0(r.TTFTP99MS))
	}
	// Per workload and view: how far the interval goes before mean TTFT
	// moves by 5% from the shortest interval's.
	b.WriteString("\n")
	for _, w := range values(st, func(r Result) string { return r.Workload }) {
		for _, v := range values(st, func(r Result) string { return r.View }) {
			s := st.where(func(r Result) bool { return r.Workload == w && r.View == v })
			slices.SortFunc(s, func(a, c Result) int { return cmp.Compare(a.GossipIntervalMS, c.GossipIntervalMS) })
			base, held := s[0], s[0]
			for _, r := range s {
				if r.TTFTMeanMS > 1.05*base.TTFTMeanMS {
					break
				}
				held = r
			}
			fmt.Fprintf(b, "- %s, %s view: mean TTFT within 5%% of the %g ms interval's (%s ms) up to %g ms, interval ÷ lifetime %.3f", short(w), v,
				base.GossipIntervalMS, ms0(base.TTFTMeanMS), held.GossipIntervalMS, held.GossipIntervalMS/held.E2EP50MS)
			if last := s[len(s)-1]; last.GossipIntervalMS > held.GossipIntervalMS {
				fmt.Fprintf(b, "; at %g ms (÷ lifetime %.3f) %s ms", last.GossipIntervalMS, last.GossipIntervalMS/last.E2EP50MS, ms0(last.TTFTMeanMS))
			}
			fmt.Fprintf(b, "; agreement %s–%s, false spills up to %s.\n", fptr(minPtr(s, func(r Result) *float64 { return r.Agreement }), 3),
				fptr(maxPtr(s, func(r Result) *float64 { return r.Agreement }), 3), fptr(maxPtr(s, func(r Result) *float64 { return r.FalseSpillRate }), 3))
		}
		ws := st.where(func(r Result) bool {
			return r.Workload == w && r.GossipIntervalMS == defaults().GossipIntervals[0].Seconds()*1000
		})
		if o, ok1 := ws.where(func(r Result) bool { return r.View == "overlay" }).policy(prefixring); ok1 {
			if sh, ok2 := ws.where(func(r Result) bool { return r.View == "shared" }).policy(prefixring); ok2 && sh.TTFTMeanMS > 0 {
				fmt.Fprintf(b, "- %s at the default interval: the overlay view's mean TTFT is %.2f× the shared view's, its agreement %s against %s.\n",
					short(w), o.TTFTMeanMS/sh.TTFTMeanMS, fptr(o.Agreement, 3), fptr(sh.Agreement, 3))
			}
		}
	}
	b.WriteString("\nThe replicas disagree only while one's placements have not reached the others: within an interval, and in bursts of requests arriving at once through different replicas, which no interval can show them. The overlay view counts a replica's own new placements at once, so each replica sees its own part of such a burst, at the cost of agreement on exactly those decisions.\n\n")
}

func fptr(p *float64, digits int) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.*f", digits, *p)
}

func minPtr(s set, f func(Result) *float64) *float64 {
	var out *float64
	for _, r := range s {
		if v := f(r); v != nil && (out == nil || *v < *out) {
			out = v
		}
	}
	return out
}

func maxPtr(s set, f func(Result) *float64) *float64 {
	var out *float64
	for _, r := range s {
		if v := f(r); v != nil && (out == nil || *v > *out) {
			out = v
		}
	}
	return out
}

// keys tables the key designs.
func keys(b *strings.Builder, ks set) {
	if len(ks) == 0 {
		return
	}
	b.WriteString("## Key designs\n\nprefixring (chwbl, 3 replicas) with each key design:\n\n| workload | load | key | hit | turns on one engine | key agreement | mean ms | p99 ms |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range ks {
		fmt.Fprintf(b, "| %s | ×%g | %s | %.3f | %s | %s | %s | %s |\n", short(r.Workload), r.RateScale, r.Key, r.HitRate,
			fptr(r.SameEngineTurns, 2), fptr(r.KeyAgreement, 4), ms0(r.TTFTMeanMS), ms0(r.TTFTP99MS))
	}
	b.WriteString("\n")
	for _, k := range KeyDesigns {
		d, _ := KeyDesign(k)
		fmt.Fprintf(b, "- `%s`: %s.\n", k, d)
	}
	b.WriteString("\n")
}
