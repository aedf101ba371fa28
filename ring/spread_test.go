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

// groupSpread is the request the balancer makes of a group of share s on
// n endpoints under the default GroupSpread (Config.spread): its Spread.
func groupSpread(share float64, n int) Request {
	req := Request{Keyed: true, Group: 1, GroupShare: share}
	DefaultConfig().spread(&req, n)
	return req
}

// movedPicks returns the fraction of requests whose unloaded pick differs
// between a (with spread sa) and b (with spread sb): keys[g] are group
// groups[g]'s request keys.
func movedPicks(a, b *Ring, sa, sb Request, groups []uint64, keys [][]uint64) float64 {
	sta, stb := NewState(a, nil, nil, Bound{LoadFactor: 1.25}), NewState(b, nil, nil, Bound{LoadFactor: 1.25})
	moved, all := 0, 0
	for j, g := range groups {
		for _, k := range keys[j] {
			sa.Key, sa.Group, sb.Key, sb.Group = k, g, k, g
			ia, _, _ := a.Pick(sa, sta)
			ib, _, _ := b.Pick(sb, stb)
			if a.ID(ia) != b.ID(ib) {
				moved++
			}
			all++
		}
	}
	return float64(moved) / float64(all)
}

// groupKeys returns groups random groups of perGroup random keys each.
func groupKeys(seed uint64, groups, perGroup int) ([]uint64, [][]uint64) {
	all := randomKeys(seed, groups*(perGroup+1))
	keys := make([][]uint64, groups)
	for g := range keys {
		keys[g] = all[groups+g*perGroup : groups+(g+1)*perGroup]
	}
	return all[:groups], keys
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
	groups, keys := groupKeys(11, 40, 200)
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
		t.Logf("share %.3f: spread %.2f -> %.2f, worst moved %.3f", s, groupSpread(s, 8).Spread, groupSpread(s, 9).Spread, worst[j])
		if worst[j] > limit {
			t.Errorf("share %.3f: adding a 9th endpoint moved %.3f of picks (worst of %d fleets), limit %.2f", s, worst[j], fleets, limit)
		}
	}
}

// TestGroupSpreadMovementShareDrift: a group whose share drifts by 10%
// across a point where ceil(8·n·s) crosses an integer (and across 1/8,
// where the group reaches every endpoint) moves few of its picks: the
// ideal is the 1 - 0.95/1.05 = 0.095 of its picks that the spread's growth
// hands to the new room.
func TestGroupSpreadMovementShareDrift(t *testing.T) {
	groups, keys := groupKeys(13, 40, 200)
	const limit = 0.14
	for set := range 10 {
		rng := rand.New(rand.NewPCG(uint64(set), 0xd))
		r := mustRing(t, randomFleet(rng, 8))
		for m := 1; m <= 8; m++ {
			edge := float64(m) / 64 // 8·8·edge = m
			a, b := groupSpread(0.95*edge, 8), groupSpread(1.05*edge, 8)
			if f := movedPicks(r, r, a, b, groups, keys); f > limit {
				t.Errorf("fleet %d: share %.4f -> %.4f (spread %v -> %v) moved %.3f of picks, limit %.2f", set, 0.95*edge, 1.05*edge, a.Spread, b.Spread, f, limit)
			}
		}
	}
}
