package eval

import (
	"fmt"
	"slices"
	"strings"
)

var loadOnly = []string{"round-robin", "random", "least-load", "p2c"}

// group is the results of one combination of every axis but the policy.
type group struct {
	key  string
	runs []Result
}

func byPolicy(results []Result) []group {
	var out []group
	idx := map[string]int{}
	for _, r := range results {
		k := fmt.Sprintf("%s, %d engines, %d routers, rate ×%g, c %g, gossip %g ms", r.Workload, r.Endpoints, r.Routers, r.RateScale, r.LoadFactor, r.GossipIntervalMS)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, group{key: k})
		}
		out[i].runs = append(out[i].runs, r)
	}
	return out
}

func (g group) get(policy string) (Result, bool) {
	for _, r := range g.runs {
		if r.Policy == policy {
			return r, true
		}
	}
	return Result{}, false
}

// best returns the run among names (all when nil) with the least f.
func (g group) best(names []string, f func(Result) float64) (Result, bool) {
	var b Result
	found := false
	for _, r := range g.runs {
		if (names == nil || slices.Contains(names, r.Policy)) && (!found || f(r) < f(b)) {
			b, found = r, true
		}
	}
	return b, found
}

func mean(r Result) float64 { return r.TTFTMeanMS }
func p99(r Result) float64  { return r.TTFTP99MS }
func negHit(r Result) float64 {
	return -r.HitRate
}

// Markdown writes the study's report: the three questions answered from
// the results, the goals checked against them, and every run.
func Markdown(results []Result, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# prefixring eval\n\n`%s`\n\n%d runs in the fleet simulator (virtual time, the calibrated Llama-3.1-8B/H100 engine profile, the production balancer, policies and gossip view).\n\n", command, len(results))
	groups := byPolicy(results)

	b.WriteString("## 1. Where does cache-aware routing beat load-only routing on TTFT?\n\n")
	for _, g := range groups {
		c, ok1 := g.get("chwbl")
		lo, ok2 := g.best(loadOnly, mean)
		if !ok1 || !ok2 {
			continue
		}
		lp, _ := g.best(loadOnly, p99)
		verdict := "beats"
		if c.TTFTMeanMS > lo.TTFTMeanMS {
			verdict = "loses to"
		}
		fmt.Fprintf(&b, "- %s: chwbl %s the best load-only policy on mean TTFT, %.0f ms against %s's %.0f ms (×%.2f); p99 %.0f against %s's %.0f ms (×%.2f); hit rate %.3f against %.3f (ideal %.3f).\n",
			g.key, verdict, c.TTFTMeanMS, lo.Policy, lo.TTFTMeanMS, c.TTFTMeanMS/lo.TTFTMeanMS, c.TTFTP99MS, lp.Policy, lp.TTFTP99MS, c.TTFTP99MS/lp.TTFTP99MS, c.HitRate, lo.HitRate, c.IdealHitRate)
	}

	b.WriteString("\n## 2. Cache affinity against queueing: the load factor c\n\n")
	var cs []float64
	for _, r := range results {
		if r.Policy == "chwbl" && !slices.Contains(cs, r.LoadFactor) {
			cs = append(cs, r.LoadFactor)
		}
	}
	if len(cs) < 2 {
		fmt.Fprintf(&b, "This sweep ran chwbl at one load factor (%v); sweep `--load-factor` (a comma list) to answer it.\n", cs)
	} else {
		for _, r := range results {
			if r.Policy == "chwbl" {
				fmt.Fprintf(&b, "- c %g (%s, %d routers, rate ×%g): hit rate %.3f, queue depth mean %.2f, spill rate %.3f, mean TTFT %.0f ms, p99 %.0f ms.\n",
					r.LoadFactor, r.Workload, r.Routers, r.RateScale, r.HitRate, r.QueueDepthMean, r.SpillRate, r.TTFTMeanMS, r.TTFTP99MS)
			}
		}
	}

	b.WriteString("\n## 3. Staleness of shared state: router replicas and gossip interval\n\n")
	for _, r := range results {
		if r.Policy == "chwbl" && r.Agreement != nil {
			fmt.Fprintf(&b, "- %s, %d routers, gossip %g ms, rate ×%g: agreement %.4f, hit rate %.3f, TTFT p99 %.0f ms.\n",
				r.Workload, r.Routers, r.GossipIntervalMS, r.RateScale, *r.Agreement, r.HitRate, r.TTFTP99MS)
		}
	}

	b.WriteString("\n## Goals, checked on these results\n\n| where | goal | measured | met |\n|---|---|---|---|\n")
	for _, g := range groups {
		c, ok := g.get("chwbl")
		if !ok {
			continue
		}
		bh, _ := g.best(nil, negHit)
		bm, _ := g.best(nil, mean)
		bp, _ := g.best(nil, p99)
		rr, hasRR := g.get("round-robin")
		fmt.Fprintf(&b, "| %s | hit ≥ 0.95 × best (%s) | %.3f / %.3f | %v |\n", g.key, bh.Policy, c.HitRate, bh.HitRate, c.HitRate >= 0.95*bh.HitRate)
		fmt.Fprintf(&b, "| %s | mean TTFT ≤ 1.05 × best (%s) | %.0f / %.0f ms | %v |\n", g.key, bm.Policy, c.TTFTMeanMS, bm.TTFTMeanMS, c.TTFTMeanMS <= 1.05*bm.TTFTMeanMS)
		fmt.Fprintf(&b, "| %s | p99 TTFT ≤ 1.05 × best (%s) | %.0f / %.0f ms | %v |\n", g.key, bp.Policy, c.TTFTP99MS, bp.TTFTP99MS, c.TTFTP99MS <= 1.05*bp.TTFTP99MS)
		if hasRR {
			fmt.Fprintf(&b, "| %s | mean and p99 below round-robin's | %.0f, %.0f / %.0f, %.0f ms | %v |\n", g.key, c.TTFTMeanMS, c.TTFTP99MS, rr.TTFTMeanMS, rr.TTFTP99MS, c.TTFTMeanMS < rr.TTFTMeanMS && c.TTFTP99MS < rr.TTFTP99MS)
		}
		// Overload: where least-load queues (its requests wait for a step
		// on average), throughput is the engines', not the arrivals'.
		if ll, ok := g.get("least-load"); ok && hasRR && ll.QueueDepthMean >= 1 {
			fmt.Fprintf(&b, "| %s | overloaded (least-load queue %.0f): throughput ≥ least-load's, hit > round-robin's | %.0f / %.0f tok/s, %.3f / %.3f | %v |\n", g.key, ll.QueueDepthMean, c.OutputTokensPerS, ll.OutputTokensPerS, c.HitRate, rr.HitRate, c.OutputTokensPerS >= ll.OutputTokensPerS && c.HitRate > rr.HitRate)
		}
	}
	// hit(R)/hit(1) for chwbl, per workload, rate and c.
	for _, r := range results {
		if r.Policy != "chwbl" || r.Routers == 1 {
			continue
		}
		for _, one := range results {
			if one.Policy == "chwbl" && one.Routers == 1 && otherAxes(one, "routers") == otherAxes(r, "routers") && one.HitRate > 0 {
				fmt.Fprintf(&b, "| %s, rate ×%g | hit(%d)/hit(1) ≥ 0.99 | %.3f | %v |\n", r.Workload, r.RateScale, r.Routers, r.HitRate/one.HitRate, r.HitRate/one.HitRate >= 0.99)
			}
		}
	}

	b.WriteString("\n## All runs\n\n| " + strings.Join(tableCols, " | ") + " |\n|" + strings.Repeat("---|", len(tableCols)) + "\n")
	for _, r := range results {
		b.WriteString("| " + strings.Join(row(r), " | ") + " |\n")
	}
	return b.String()
}
