package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// randomFleet returns n endpoint IDs drawn from rng, pod IPs of one
// cluster.
func randomFleet(rng *rand.Rand, n int) []string {
	seen := map[string]bool{}
	ids := make([]string, 0, n)
	for len(ids) < n {
		id := fmt.Sprintf("10.%d.%d.%d:8000", rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// groupSpread is the Spread the balancer derives for a group of share s
// on n endpoints under the default GroupSpread (Config.spread).
func groupSpread(share float64, n int) int {
	req := Request{Group: 1, GroupShare: share}
	DefaultConfig().spread(&req, n)
	return req.Spread
}

// movedPicks returns the fraction of (group, key) requests whose unloaded
// pick differs between a (with spread sa) and b (with spread sb).
func movedPicks(a, b *Ring, sa, sb int, groups, keys []uint64) float64 {
	sta, stb := NewState(a, nil, nil, Bound{LoadFactor: 1.25}), NewState(b, nil, nil, Bound{LoadFactor: 1.25})
	moved := 0
	for _, g := range groups {
		for _, k := range keys {
			ia, _, _ := a.Pick(Request{Key: k, Keyed: true, Group: g, Spread: sa}, sta)
			ib, _, _ := b.Pick(Request{Key: k, Keyed: true, Group: g, Spread: sb}, stb)
			if a.ID(ia) != b.ID(ib) {
				moved++
			}
		}
	}
	return float64(moved) / float64(len(groups)*len(keys))
}

// spreadShares are group shares on both sides of the points where
// ceil(8·n·s) crosses an integer for n = 8 or 9.
var spreadShares = []float64{0.01, 0.015, 0.02, 0.03, 0.05, 0.08, 0.1, 0.11, 0.12, 0.15, 0.2, 0.3, 0.5}

// TestGroupSpreadMovementAddNinth: adding a 9th endpoint to 8 moves near
// 1/9 of grouped picks at every group share, as it moves 1/9 of bare homes
// (TestMovementAddNinthAcrossFleets), worst over 30 random fleets.
func TestGroupSpreadMovementAddNinth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 60 rings")
	}
	const fleets, limit = 30, 0.14
	groups, keys := randomKeys(11, 40), randomKeys(12, 100)
	worst := make([]float64, len(spreadShares))
	for set := range fleets {
		rng := rand.New(rand.NewPCG(uint64(set), 0x9))
		ids := randomFleet(rng, 9)
		eight, nine := mustRing(t, ids[:8]), mustRing(t, ids)
		for j, s := range spreadShares {
			f := movedPicks(eight, nine, groupSpread(s, 8), groupSpread(s, 9), groups, keys)
			worst[j] = max(worst[j], f)
		}
	}
	for j, s := range spreadShares {
		t.Logf("share %.3f: spread %d -> %d, worst moved %.3f", s, groupSpread(s, 8), groupSpread(s, 9), worst[j])
		if worst[j] > limit {
			t.Errorf("share %.3f: adding a 9th endpoint moved %.3f of picks (worst of %d fleets), limit %.2f", s, worst[j], fleets, limit)
		}
	}
}

// TestGroupSpreadMovementShareDrift: a group whose share drifts so its
// spread grows from m to m+1 endpoints moves only the picks the new
// endpoint takes, about 1/(m+1) of them, never more than 1.3/(m+1).
func TestGroupSpreadMovementShareDrift(t *testing.T) {
	groups, keys := randomKeys(13, 40), randomKeys(14, 100)
	for set := range 10 {
		rng := rand.New(rand.NewPCG(uint64(set), 0xd))
		r := mustRing(t, randomFleet(rng, 8))
		for m := 1; m < 7; m++ {
			f := movedPicks(r, r, m, m+1, groups, keys)
			if limit := 1.3 / float64(m+1); f > limit {
				t.Errorf("fleet %d: spread %d -> %d moved %.3f of picks, limit %.3f", set, m, m+1, f, limit)
			}
		}
		// Spread n-1 -> off (the share reaches 1/GroupSpread): the key
		// alone places the request.
		if f := movedPicks(r, r, 7, 0, groups, keys); f > 1.3/8 {
			t.Errorf("fleet %d: spread 7 -> off moved %.3f of picks, limit %.3f", set, f, 1.3/8)
		}
	}
}
