package ring

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestGoldenPlacement pins homes and candidate orders for fixed endpoints
// and keys. If it fails, this build places keys differently from earlier
// builds, and replicas of mixed versions would disagree: change placement
// only on purpose, and say so in the release notes.
func TestGoldenPlacement(t *testing.T) {
	r := mustRing(t, []string{"http://vllm-0:8000", "http://vllm-1:8000", "http://vllm-2:8000", "http://vllm-3:8000", "http://vllm-4:8000"})
	golden := []struct{ key, home, order string }{
		{"model\x00prefix-0", "http://vllm-3:8000", "30214"},
		{"model\x00prefix-1", "http://vllm-4:8000", "40231"},
		{"model\x00prefix-2", "http://vllm-3:8000", "31024"},
		{"model\x00prefix-3", "http://vllm-0:8000", "04231"},
		{"model\x00prefix-4", "http://vllm-3:8000", "32041"},
		{"model\x00prefix-5", "http://vllm-3:8000", "32041"},
		{"model\x00prefix-6", "http://vllm-2:8000", "23401"},
		{"model\x00prefix-7", "http://vllm-2:8000", "23401"},
		{"model\x00prefix-8", "http://vllm-0:8000", "03124"},
		{"model\x00prefix-9", "http://vllm-2:8000", "21034"},
		{"model\x00prefix-10", "http://vllm-3:8000", "32041"},
		{"model\x00prefix-11", "http://vllm-3:8000", "30412"},
		{"model\x00prefix-12", "http://vllm-2:8000", "20143"},
		{"model\x00prefix-13", "http://vllm-2:8000", "20143"},
		{"model\x00prefix-14", "http://vllm-1:8000", "12043"},
		{"model\x00prefix-15", "http://vllm-3:8000", "31240"},
	}
	for _, g := range golden {
		k := xxhash.Sum64String(g.key)
		if got := r.ID(r.Home(k)); got != g.home {
			t.Errorf("%q: home %s, golden %s", g.key, got, g.home)
		}
		var order []byte
		for _, i := range r.Candidates(k, nil) {
			order = append(order, byte('0'+i))
		}
		if string(order) != g.order {
			t.Errorf("%q: candidates %s, golden %s", g.key, order, g.order)
		}
	}
}

// mapLoads is a Loads for tests.
type mapLoads map[string]int64

func (m mapLoads) Load(id string) int64 { return m[id] }
func (m mapLoads) Total() int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

// TestBoundNeverExceededWhileSomeEndpointIsUnder checks the walk on random
// loads, health and exclusions: the pick is within the bound whenever any
// usable endpoint is; it is the home whenever the home is usable and within
// the bound; otherwise it is the least loaded.
// randomLoads draws, for each of r's endpoints, a load below maxLoad,
// health (unhealthy one time in five) and exclusion (one time in eight).
func randomLoads(rng *rand.Rand, r *Ring, maxLoad int) (mapLoads, []bool, []string) {
	loads, healthy, exclude := mapLoads{}, make([]bool, r.Len()), []string(nil)
	for i, id := range r.IDs() {
		loads[id] = int64(rng.IntN(maxLoad))
		healthy[i] = rng.IntN(5) != 0
		if rng.IntN(8) == 0 {
			exclude = append(exclude, id)
		}
	}
	return loads, healthy, exclude
}

func TestBoundNeverExceededWhileSomeEndpointIsUnder(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ids := fleet(1+rng.IntN(12), int(seed))
		r := mustRing(t, ids)
		for range 200 {
			loads, healthy, exclude := randomLoads(rng, r, 20)
			s := NewState(r, healthy, loads, Bound{LoadFactor: 1 + rng.Float64()})
			req := Request{Key: rng.Uint64(), Keyed: true, Exclude: exclude}
			i, d, err := r.Pick(req, s)
			bound, anyUsable, anyUnder := s.Bound(), false, false
			minLoad := int64(1 << 62)
			for j, id := range r.IDs() {
				if s.usable(r, j, exclude) {
					anyUsable = true
					anyUnder = anyUnder || loads[id] < bound
					minLoad = min(minLoad, loads[id])
				}
			}
			if !anyUsable {
				if err == nil {
					t.Fatalf("seed %d: picked %d with no usable endpoint", seed, i)
				}
				continue
			}
			if err != nil || !s.usable(r, i, exclude) {
				t.Fatalf("seed %d: pick %d (%v), usable endpoints exist", seed, i, err)
			}
			got := loads[r.ID(i)]
			if anyUnder && got >= bound {
				t.Fatalf("seed %d: picked load %d > bound %d while some endpoint is under", seed, got, bound)
			}
			home := r.Home(req.Key)
			homeFits := s.usable(r, home, exclude) && loads[r.ID(home)] < bound
			if homeFits != (d == DecisionHome) || (homeFits && i != home) {
				t.Fatalf("seed %d: decision %v, pick %d, home %d fits=%v", seed, d, i, home, homeFits)
			}
			if !anyUnder && got != minLoad {
				t.Fatalf("seed %d: none under the bound, picked load %d, least %d", seed, got, minLoad)
			}
		}
	}
}

// TestOverflowSpreads: requests whose home is one hot endpoint spill over
// all the others, none taking more than twice its fair share.
func TestOverflowSpreads(t *testing.T) {
	for seed := range uint64(10) {
		ids := fleet(8, int(seed))
		r := mustRing(t, ids)
		hot := ids[seed%8]
		loads := mapLoads{hot: 1000}
		s := NewState(r, nil, loads, Bound{LoadFactor: 1.25})
		took := map[string]int{}
		spilled := 0
		for _, k := range randomKeys(seed, 200000) {
			if r.ID(r.Home(k)) != hot {
				continue
			}
			i, d, err := r.Pick(Request{Key: k, Keyed: true}, s)
			if err != nil || d != DecisionSpill {
				t.Fatalf("pick %d %v %v, want a spill", i, d, err)
			}
			took[r.ID(i)]++
			spilled++
		}
		fair := float64(spilled) / 7
		for id, n := range took {
			if float64(n) > 2*fair {
				t.Errorf("seed %d: %s took %d of %d spilled requests, fair share %.0f", seed, id, n, spilled, fair)
			}
		}
		if len(took) != 7 {
			t.Errorf("seed %d: overflow reached %d endpoints, want 7", seed, len(took))
		}
	}
}

func TestUnhealthyHomeFallsBackWithoutMovingOtherKeys(t *testing.T) {
	ids := fleet(6, 0)
	r := mustRing(t, ids)
	healthy := []bool{true, false, true, true, true, true}
	all, sick := NewState(r, nil, nil, Bound{LoadFactor: 1.25}), NewState(r, healthy, nil, Bound{LoadFactor: 1.25})
	for _, k := range randomKeys(9, 5000) {
		req := Request{Key: k, Keyed: true}
		before, _, _ := r.Pick(req, all)
		after, d, err := r.Pick(req, sick)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case before != 1 && (after != before || d != DecisionHome):
			t.Fatalf("key %x homed on healthy %d moved to %d (%v)", k, before, after, d)
		case before == 1 && (after == 1 || d != DecisionFallback):
			t.Fatalf("key %x homed on the unhealthy endpoint went to %d (%v)", k, after, d)
		case before == 1 && after != r.Candidates(k, nil)[1]:
			t.Fatalf("key %x: fallback %d is not its next candidate", k, after)
		}
	}
}

func TestExcludeWalksToNextCandidate(t *testing.T) {
	r := mustRing(t, fleet(5, 0))
	s := NewState(r, nil, nil, Bound{LoadFactor: 1.25})
	k := uint64(42)
	order := r.Candidates(k, nil)
	var tried []string
	for _, want := range order {
		i, _, err := r.Pick(Request{Key: k, Keyed: true, Exclude: tried}, s)
		if err != nil || i != want {
			t.Fatalf("after %v: picked %d (%v), want %d", tried, i, err, want)
		}
		tried = append(tried, r.ID(i))
	}
	if _, _, err := r.Pick(Request{Key: k, Keyed: true, Exclude: tried}, s); err != ErrNoEndpoints {
		t.Fatalf("all tried: err %v, want ErrNoEndpoints", err)
	}
}

func TestUnkeyedGoesToLeastLoaded(t *testing.T) {
	r := mustRing(t, []string{"a", "b", "c"})
	s := NewState(r, nil, mapLoads{"a": 3, "b": 1, "c": 2}, Bound{LoadFactor: 1.25})
	for k := range uint64(10) {
		i, d, err := r.Pick(Request{Key: k}, s)
		if err != nil || r.ID(i) != "b" || d != DecisionFallback {
			t.Fatalf("unkeyed pick %d %v %v, want b fallback", i, d, err)
		}
	}
}
