package eval

import (
	"fmt"
	"strings"
)

// DemoGrid is `make demo`'s shape in virtual time: the demo workload (48
// conversations at a time, closed loop) on 4 engines behind 3 router
// replicas, the other axes at prefixring's defaults; run it with
// [DemoKVBlocks].
func DemoGrid(policies []string) Grid {
	g := defaults()
	g.Name, g.Workloads, g.Policies = GridCustom, []string{"demo"}, policies
	g.Endpoints = []int{4}
	return g
}

// DemoKVBlocks is the demo engines' KV cache, in 16-token blocks.
const DemoKVBlocks = 1000

// DemoSeeds runs grid once per seed with kvBlocks per engine (kvUnknown:
// the routers do not know it) and returns a
// markdown table: per seed and policy, TTFT mean, p50 and p99, the hit
// rate and spill rate, and the TTFTs' ratios to the first policy's.
func DemoSeeds(grid Grid, seeds []uint64, kvBlocks int, kvUnknown bool) (string, error) {
	var b strings.Builder
	b.WriteString("| seed | policy | mean ms | p50 ms | p99 ms | hit | spill | mean × | p50 × | p99 × |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, seed := range seeds {
		res, err := Run(Config{Grids: []Grid{grid}, Seed: seed, KVBlocks: kvBlocks, KVCapacityUnknown: kvUnknown})
		if err != nil {
			return "", err
		}
		base := res[0]
		for _, r := range res {
			fmt.Fprintf(&b, "| %d | %s | %.0f | %.0f | %.0f | %.3f | %.3f | %.2f | %.2f | %.2f |\n", seed, r.Policy,
				r.TTFTMeanMS, r.TTFTP50MS, r.TTFTP99MS, r.HitRate, r.SpillRate,
				r.TTFTMeanMS/base.TTFTMeanMS, r.TTFTP50MS/base.TTFTP50MS, r.TTFTP99MS/base.TTFTP99MS)
		}
	}
	return b.String(), nil
}
