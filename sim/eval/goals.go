package eval

import (
	"fmt"
	"slices"
	"strings"
)

// goals checks the study's six goals and says, for each miss, why.
func goals(b *strings.Builder, all, pol set) {
	b.WriteString("## Goals, checked on these results\n\n")
	goalBest(b, pol)
	goalTrace(b, all, pol)
	goalTurns(b, pol)
	goalReplicas(b, all, pol)
	goalSpill(b, pol)
	goalOverload(b, append(all.grid(GridOverload), pol...))
}

// overloadRate is the load the study calls twice the fleet's capacity.
const overloadRate = 4

// goalBest: at 3 replicas, on every point, hit >= 0.95 x the best, mean and
// p99 <= 1.05 x the best, and below round-robin's.
func goalBest(b *strings.Builder, pol set) {
	s := pol.where(func(r Result) bool { return r.Routers == 3 })
	b.WriteString("### 1. Best everywhere (3 router replicas)\n\nhit ≥ 0.95 × the best policy's, mean and p99 TTFT ≤ 1.05 × the best policy's and below round-robin's.\n\n| workload | load | hit / best | mean / best | p99 / best | below round-robin | met |\n|---|---|---|---|---|---|---|\n")
	var whys []string
	met, total := 0, 0
	for _, p := range points3(s) {
		at := s.at(p)
		c, ok := at.policy(prefixring)
		if !ok {
			continue
		}
		bh, _ := at.best(nil, negHit)
		bm, _ := at.best(nil, mean)
		bp, _ := at.best(nil, p99)
		rr, hasRR := at.policy("round-robin")
		hitOK := c.HitRate >= 0.95*bh.HitRate
		meanOK, p99OK := c.TTFTMeanMS <= 1.05*bm.TTFTMeanMS, c.TTFTP99MS <= 1.05*bp.TTFTP99MS
		rrOK := !hasRR || (c.TTFTMeanMS < rr.TTFTMeanMS && c.TTFTP99MS < rr.TTFTP99MS)
		pass := hitOK && meanOK && p99OK && rrOK
		total++
		if pass {
			met++
		}
		fmt.Fprintf(b, "| %s | ×%g | %.3f / %.3f (%s) | %s / %s (%s) | %s / %s (%s) | %s | %s |\n", short(p.workload), p.rate,
			c.HitRate, bh.HitRate, bh.Policy, ms0(c.TTFTMeanMS), ms0(bm.TTFTMeanMS), bm.Policy, ms0(c.TTFTP99MS), ms0(bp.TTFTP99MS), bp.Policy, yes(rrOK), yes(pass))
		if !hitOK {
			whys = append(whys, whyHit(p, c, bh))
		}
		if !meanOK || !p99OK {
			w := bm
			if meanOK {
				w = bp
			}
			whys = append(whys, whyTTFT(p, c, w, meanOK))
		}
	}
	fmt.Fprintf(b, "\nMet at %d of %d points.\n\n", met, total)
	bullets(b, whys)
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

// whyHit explains a hit rate below 0.95 x the best.
func whyHit(p loadPoint, c, best Result) string {
	s := fmt.Sprintf("%s ×%g, hit %.3f against %s's %.3f: ", short(p.workload), p.rate, c.HitRate, best.Policy, best.HitRate)
	if c.SpillRate > 0.02 && best.TTFTMeanMS > c.TTFTMeanMS {
		return s + fmt.Sprintf("prefixring spilled %.0f%% of requests off homes whose queues would have cost more than the cache saves; %s kept more of the cache at %.2f× prefixring's mean TTFT. Keeping both would take knowing how much of each request its home holds (a completions prompt does not say where the previous turn ended; the engines' KV events would).",
			100*c.SpillRate, best.Policy, best.TTFTMeanMS/c.TTFTMeanMS)
	}
	if best.Policy == "prefix-key" || best.Policy == "radix" || best.Policy == "score" {
		return s + fmt.Sprintf("%s keeps a system prompt's requests together; prefixring keys each request on its own first user message, so a system prompt is computed once on every engine its requests reach. Keying on the shared part would take knowing that a request's own text is never reused (a single-turn workload): see the two-level key in \"Key designs\".", best.Policy)
	}
	return s + fmt.Sprintf("spill rate %.3f, imbalance %.2f against %.2f.", c.SpillRate, c.Imbalance, best.Imbalance)
}

// whyTTFT explains a TTFT above 1.05 x the best.
func whyTTFT(p loadPoint, c, best Result, p99Only bool) string {
	metric, cv, bv := "mean", c.TTFTMeanMS, best.TTFTMeanMS
	if p99Only {
		metric, cv, bv = "p99", c.TTFTP99MS, best.TTFTP99MS
	}
	s := fmt.Sprintf("%s ×%g, %s TTFT %s ms against %s's %s (%.2f×): ", short(p.workload), p.rate, metric, ms0(cv), best.Policy, ms0(bv), cv/bv)
	switch {
	case p.rate >= overloadRate:
		return s + fmt.Sprintf("at twice the fleet's capacity the queues grow for the whole run, and TTFT measures how the backlog builds; prefixring's throughput was %.0f tokens/s against %s's %.0f.", c.OutputTokensPerS, best.Policy, best.OutputTokensPerS)
	case (best.Policy == "prefix-key" || best.Policy == "radix" || best.Policy == "score") && c.SameEngineTurns == nil:
		return s + fmt.Sprintf("single-turn requests under shared system prompts: %s routes by the system prompt (hit %.3f), prefixring by the whole first user message (hit %.3f), so every engine a system prompt's requests reach computes it once. Routing by the shared part would take knowing that a request's own text will not be reused.", best.Policy, best.HitRate, c.HitRate)
	case c.SpillRate > best.SpillRate+0.02:
		return s + fmt.Sprintf("prefixring spilled %.0f%% (false spills %s), %s %.0f%%.", 100*c.SpillRate, fptr(c.FalseSpillRate, 3), best.Policy, 100*best.SpillRate)
	}
	return s + fmt.Sprintf("hit %.3f against %.3f, imbalance %.2f against %.2f.", c.HitRate, best.HitRate, c.Imbalance, best.Imbalance)
}

// goalTrace: on the Mooncake conversation trace, mean TTFT <= 0.9 x
// round-robin's, at every router count measured.
func goalTrace(b *strings.Builder, all, pol set) {
	b.WriteString("### 2. Mooncake conversation trace at H100 capacity: mean TTFT ≤ 0.9 × round-robin's\n\n")
	rows := append(append(set{}, pol...), all.grid(GridReplicas)...)
	rows = rows.where(func(r Result) bool { return strings.Contains(r.Workload, "conversation_trace") })
	if len(rows) == 0 {
		b.WriteString("Not checked: the study did not replay the conversation trace (give --traces).\n\n")
		return
	}
	b.WriteString("| load | routers | prefixring mean ms | round-robin mean ms | ratio | met |\n|---|---|---|---|---|---|\n")
	for _, rt := range values(rows, func(r Result) int { return r.Routers }) {
		for _, rate := range values(rows, func(r Result) float64 { return r.RateScale }) {
			at := rows.where(func(r Result) bool { return r.Routers == rt && r.RateScale == rate })
			c, ok1 := at.policy(prefixring)
			rr, ok2 := at.policy("round-robin")
			if ok1 && ok2 {
				fmt.Fprintf(b, "| ×%g | %d | %s | %s | %.2f | %s |\n", rate, rt, ms0(c.TTFTMeanMS), ms0(rr.TTFTMeanMS), c.TTFTMeanMS/rr.TTFTMeanMS, yes(c.TTFTMeanMS <= 0.9*rr.TTFTMeanMS))
			}
		}
	}
	b.WriteString("\n")
}

// goalTurns: multi-turn over /v1/completions at low load keeps >= 95% of
// a conversation's turns on one engine.
func goalTurns(b *strings.Builder, pol set) {
	b.WriteString("### 3. Multi-turn conversations over /v1/completions at low load: ≥ 95 % of a conversation's turns on one engine\n\n")
	rows := pol.where(func(r Result) bool { return r.Workload == "multi-turn-completions" && r.Policy == prefixring })
	if len(rows) == 0 {
		b.WriteString("Not checked: no multi-turn-completions runs.\n\n")
		return
	}
	b.WriteString("| load | routers | turns on one engine | key agreement | met (the lowest load) |\n|---|---|---|---|---|\n")
	low := slices.Min(values(rows, func(r Result) float64 { return r.RateScale }))
	for _, r := range rows {
		met := "—"
		if r.RateScale == low && r.SameEngineTurns != nil {
			met = yes(*r.SameEngineTurns >= 0.95)
		}
		fmt.Fprintf(b, "| ×%g | %d | %s | %s | %s |\n", r.RateScale, r.Routers, fptr(r.SameEngineTurns, 3), fptr(r.KeyAgreement, 4), met)
	}
	b.WriteString("\n")
}

// goalReplicas: hit(8)/hit(1) >= 0.99 for prefixring, beside the
// per-replica policies.
func goalReplicas(b *strings.Builder, all, pol set) {
	b.WriteString("### 4. Replicas: prefixring's hit(8)/hit(1) ≥ 0.99\n\n")
	rows := append(append(set{}, all.grid(GridReplicas)...), pol...)
	policies := []string{prefixring, "chwbl-local", "radix", "score"}
	b.WriteString("| workload | load | " + strings.Join(policies, " | ") + " | met |\n|---|---|" + strings.Repeat("---|", len(policies)) + "---|\n")
	found := false
	for _, p := range points3(all.grid(GridReplicas)) {
		at := rows.at(p)
		var cells []string
		met := "—"
		for _, name := range policies {
			one, ok1 := at.where(func(r Result) bool { return r.Policy == name && r.Routers == 1 }).policy(name)
			eight, ok8 := at.where(func(r Result) bool { return r.Policy == name && r.Routers == 8 }).policy(name)
			if !ok1 || !ok8 || one.HitRate == 0 {
				cells = append(cells, "—")
				continue
			}
			ratio := eight.HitRate / one.HitRate
			cells = append(cells, fmt.Sprintf("%.3f (%.3f → %.3f)", ratio, one.HitRate, eight.HitRate))
			if name == prefixring {
				found, met = true, yes(ratio >= 0.99)
			}
		}
		fmt.Fprintf(b, "| %s | ×%g | %s | %s |\n", short(p.workload), p.rate, strings.Join(cells, " | "), met)
	}
	if !found {
		b.WriteString("\nNot checked: no runs at 1 and 8 router replicas.\n")
	}
	b.WriteString("\n")
}

// goalSpill: at most 1% of requests spilled off a home that was within
// its bound by the true cluster-wide loads.
func goalSpill(b *strings.Builder, pol set) {
	b.WriteString("### 5. No spill when balanced: ≤ 1 % of requests spilled off a home the true loads kept within its bound\n\n")
	rows := pol.where(func(r Result) bool { return r.FalseSpillRate != nil })
	if len(rows) == 0 {
		b.WriteString("Not checked.\n\n")
		return
	}
	b.WriteString("| workload | load | routers | prefixring false spills (all spills) | chwbl-local false spills (all spills) | met |\n|---|---|---|---|---|---|\n")
	var why []string
	for _, r := range rows.where(func(r Result) bool { return r.Policy == prefixring }) {
		local, ok := pol.at(loadPoint{r.Workload, r.RateScale}).where(func(x Result) bool { return x.Routers == r.Routers }).policy("chwbl-local")
		lc := "—"
		if ok {
			lc = fmt.Sprintf("%s (%.3f)", fptr(local.FalseSpillRate, 3), local.SpillRate)
		}
		fmt.Fprintf(b, "| %s | ×%g | %d | %s (%.3f) | %s | %s |\n", short(r.Workload), r.RateScale, r.Routers, fptr(r.FalseSpillRate, 3), r.SpillRate, lc, yes(*r.FalseSpillRate <= 0.01))
		if *r.FalseSpillRate > 0.01 {
			why = append(why, fmt.Sprintf("%s ×%g: %.1f%% of requests spilled off a home within its bound; agreement %s, imbalance %.2f. A replica spills on what it has heard, up to an interval late, and near capacity the loads move most within an interval; a router with one view of every placement would not have spilled them (chwbl-local, blind to the other replicas: false spills and, in brackets, all spills %s).",
				short(r.Workload), r.RateScale, 100**r.FalseSpillRate, fptr(r.Agreement, 3), r.Imbalance, lc))
		}
	}
	b.WriteString("\n")
	bullets(b, why)
}

// goalOverload: at twice the capacity, throughput >= least-load's and hit
// above round-robin's.
func goalOverload(b *strings.Builder, pol set) {
	fmt.Fprintf(b, "### 6. No collapse under overload (×%d): throughput ≥ least-load's, hit above round-robin's\n\n", overloadRate)
	rows := pol.where(func(r Result) bool { return r.RateScale == overloadRate })
	if len(rows) == 0 {
		b.WriteString("Not checked: no runs at that load.\n\n")
		return
	}
	b.WriteString("| workload | routers | prefixring tok/s | least-load tok/s | prefixring hit | round-robin hit | met |\n|---|---|---|---|---|---|---|\n")
	var why []string
	for _, c := range rows.where(func(r Result) bool { return r.Policy == prefixring }) {
		at := rows.where(func(r Result) bool { return r.Workload == c.Workload && r.Routers == c.Routers })
		ll, ok1 := at.policy("least-load")
		rr, ok2 := at.policy("round-robin")
		if !ok1 || !ok2 {
			continue
		}
		met := c.OutputTokensPerS >= ll.OutputTokensPerS && c.HitRate > rr.HitRate
		fmt.Fprintf(b, "| %s | %d | %.0f | %.0f | %.3f | %.3f | %s |\n", short(c.Workload), c.Routers, c.OutputTokensPerS, ll.OutputTokensPerS, c.HitRate, rr.HitRate, yes(met))
		if !met {
			why = append(why, fmt.Sprintf("%s: throughput %.3f× least-load's, with imbalance (max/mean in flight) %.2f against its %.2f and hit %.3f against %.3f: prefixring keeps more of each engine's cache, least-load keeps every engine equally busy.",
				short(c.Workload), c.OutputTokensPerS/ll.OutputTokensPerS, c.Imbalance, ll.Imbalance, c.HitRate, ll.HitRate))
		}
	}
	b.WriteString("\n")
	bullets(b, why)
}
