package eval

import (
	"fmt"
	"slices"
	"strings"
)

// againstRoundRobin tables, point by point at 3 router replicas, the seeds
// at which prefixring's mean or p99 TTFT is above round-robin's in the
// same setting: seed-runs counted, not ranges, so that a default that
// loses to round-robin on some seeds of a point reads as often as it does.
func againstRoundRobin(b *strings.Builder, s set) {
	type row struct {
		p        goalPoint
		m, q     []float64 // per seed: mean and p99 over round-robin's
		mUp, qUp int       // seeds above 1
	}
	var rows []row
	var runs, mUp, qUp, lossy int
	for _, p := range goalPoints(s) {
		at := s.atGP(p)
		r := row{p: p, m: ratios(at, "round-robin", mean), q: ratios(at, "round-robin", p99)}
		if len(r.m) == 0 {
			continue
		}
		r.mUp, r.qUp = len(r.m)-countLE(r.m, 1), len(r.q)-countLE(r.q, 1)
		runs, mUp, qUp = runs+len(r.m), mUp+r.mUp, qUp+r.qUp
		if r.mUp+r.qUp > 0 {
			lossy++
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Against round-robin, seed by seed\n\n")
	fmt.Fprintf(b, "prefixring's mean TTFT is above round-robin's at %d of %d seed-runs, its p99 at %d; at %d of %d points on some seed. Each row is one point at 3 router replicas, each seed against round-robin's run of the same seed.\n\n",
		mUp, runs, qUp, lossy, len(rows))
	b.WriteString("| workload | load | fleet | endpoints | seeds | mean above | p99 above | mean × | p99 × (median) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s (%.2f) |\n", short(r.p.workload)+r.p.tag(s), loadOf(r.p.rate, r.p.conc), fleetName(r.p.kv), r.p.n, len(r.m),
			above(r.mUp), above(r.qUp), rangeOf(r.m, 2), rangeOf(r.q, 2), medianOf(r.q))
	}
	b.WriteString("\n")
}

// above writes a count of seeds, in bold when any.
func above(n int) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("**%d**", n)
}

// medianOf is the middle of xs (the upper middle of an even count).
func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
