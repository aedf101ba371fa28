package eval

import (
	"cmp"
	"slices"
	"time"

	"github.com/prefixring/prefixring/sim/engine"
	"github.com/prefixring/prefixring/sim/workload"
)

// Ideal is what an ideal fleet does with a run's requests: one engine of
// the run's configuration per request, admitting it on arrival and running
// nothing else, whose prefix cache holds every block that any request that
// arrived before it computed, its answer's included as vLLM caches them
// (an infinite cache shared by the whole fleet).
// A request that such an engine refuses, too long for its context or its
// KV cache (engine.Config.Holds), is left out, as a run's TTFTs and hit
// rate leave out the requests its engines refused.
type Ideal struct {
	// HitRate is the share of prompt tokens that cache holds: each
	// request's leading full blocks already computed.
	HitRate float64
	// FloorsMS are the requests' TTFTs there, sorted: each prompt less its
	// cached prefix (short of the last token, which the engine computes)
	// prefilled alone, in chunks of the token budget, each priced as the
	// engine prices a step. Nil when cfg has no profile to price steps.
	//
	// A request's TTFT in any fleet is at least its floor but where it
	// waits in a queue while a request that arrived after it computes
	// their shared prefix, so the floors' quantiles are what a goal on
	// TTFT can ask of any policy at that point.
	FloorsMS []float64
}

// IdealOf computes reqs' [Ideal] on engines of configuration cfg.
func IdealOf(reqs []workload.Request, cfg engine.Config) Ideal {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Arrival, reqs[b].Arrival) })
	bs, price := cfg.BlockSize, cfg.Profile.PeakFLOPS > 0
	seen := map[engine.BlockHash]bool{}
	chain := engine.NewChain(bs)
	var id Ideal
	var hit, total int
	for _, i := range order {
		p := reqs[i].EnginePrompt(chain)
		out := max(reqs[i].OutputLen, 1)
		if !cfg.Holds(p.Len, out) {
			continue
		}
		total += p.Len
		n := 0 // leading blocks computed before
		for n < p.Len/bs && seen[p.Blocks[n]] {
			n++
		}
		hit += n * bs
		// The prompt's blocks, and the answer's that have KV (all its
		// tokens but the last), as the engine caches them.
		for _, b := range p.Blocks[:min(len(p.Blocks), (p.Len+out-1)/bs)] {
			seen[b] = true
		}
		if price {
			cached := min(n, (p.Len-1)/bs) * bs
			id.FloorsMS = append(id.FloorsMS, ms(soloPrefill(cfg, cached, p.Len)))
		}
	}
	if total > 0 {
		id.HitRate = float64(hit) / float64(total)
	}
	slices.Sort(id.FloorsMS)
	return id
}

// soloPrefill is the time an engine running nothing else takes to prefill
// tokens [cached, total) of a prompt: one step per chunk of the budget.
func soloPrefill(cfg engine.Config, cached, total int) time.Duration {
	var d time.Duration
	for c := cached; c < total; {
		n := min(total-c, cfg.MaxNumBatchedTokens)
		var b engine.Batch
		b.AddPrefill(c, n)
		d += cfg.Profile.StepTime(b)
		c += n
	}
	return d
}
