package ring

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBoundIsTextbook pins the bound to CHWBL's (Mirrokni et al.) and
// HAProxy's: an endpoint takes a request only if its load after taking it,
// load+1, is at most ceil(c·(total+1)/n). At 8 endpoints, c = 1.25 and 5 in
// flight on each but the home, which holds 7: total 42, the bound is
// ceil(1.25·43/8) = 7, so the home is full and the key spills. A bound of
// "load <= 7" would let the home reach 8, 1.6x the mean.
func TestBoundIsTextbook(t *testing.T) {
	ids := fleet(8, 0)
	r := mustRing(t, ids)
	const key = 0xfeed
	home := r.ID(r.Home(key))
	loads := mapLoads{}
	for _, id := range ids {
		loads[id] = 5
	}
	loads[home] = 7
	s := NewState(r, nil, loads, Bound{LoadFactor: 1.25})
	if got := s.Bound(); got != 7 {
		t.Fatalf("bound %d, want ceil(1.25*43/8) = 7", got)
	}
	i, d, err := r.Pick(Request{Key: key, Keyed: true}, s)
	if err != nil || i == r.Home(key) || d != DecisionSpill {
		t.Fatalf("home at the bound took the request: pick %s %v %v", r.ID(i), d, err)
	}
	loads[home] = 6
	if i, d, _ := r.Pick(Request{Key: key, Keyed: true}, s); i != r.Home(key) || d != DecisionHome {
		t.Fatalf("home one under the bound refused: pick %s %v", r.ID(i), d)
	}
}

// TestMinBound: with Min = K every endpoint may hold K requests whatever
// the total, so at low load a key stays home; above K the textbook bound
// governs.
func TestMinBound(t *testing.T) {
	ids := fleet(8, 0)
	r := mustRing(t, ids)
	const key = 0xfeed
	home := r.ID(r.Home(key))
	for _, tc := range []struct {
		min, homeLoad int64
		wantHome      bool
	}{
		{0, 2, false}, // bound ceil(1.25*3/8) = 1
		{1, 2, false},
		{3, 2, true}, // the floor lets the home hold a 3rd
		{3, 3, false},
		{16, 15, true},
	} {
		s := NewState(r, nil, mapLoads{home: tc.homeLoad}, Bound{LoadFactor: 1.25, Min: tc.min})
		i, _, err := r.Pick(Request{Key: key, Keyed: true}, s)
		if err != nil || (i == r.Home(key)) != tc.wantHome {
			t.Errorf("min %d, home load %d: picked %s, want home=%v", tc.min, tc.homeLoad, r.ID(i), tc.wantHome)
		}
	}
}

// TestSequentialPicksNeverExceedTheBound places requests one after another
// (each pick sees the previous ones), with random releases: no endpoint
// ever holds more than the bound computed at its pick. This holds for
// sequential picks over one view of the loads; concurrent replicas that see
// each other's counts late can overshoot (docs/gossip-measures.md).
func TestSequentialPicksNeverExceedTheBound(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		ids := fleet(2+rng.IntN(10), int(seed))
		r := mustRing(t, ids)
		loads := mapLoads{}
		b := Bound{LoadFactor: 1 + rng.Float64(), Min: int64(rng.IntN(4))}
		hot := rng.Uint64() // half the requests share one key
		for range 2000 {
			if rng.IntN(3) == 0 { // a release
				id := ids[rng.IntN(len(ids))]
				if loads[id] > 0 {
					loads[id]--
				}
				continue
			}
			key := rng.Uint64()
			if rng.IntN(2) == 0 {
				key = hot
			}
			s := NewState(r, nil, loads, b)
			slots := s.Bound()
			i, _, err := r.Pick(Request{Key: key, Keyed: true}, s)
			if err != nil {
				t.Fatal(err)
			}
			loads[r.ID(i)]++
			if loads[r.ID(i)] > slots {
				t.Fatalf("seed %d: %s holds %d after the pick, bound %d", seed, r.ID(i), loads[r.ID(i)], slots)
			}
		}
	}
}

func TestBoundFormula(t *testing.T) {
	r := mustRing(t, fleet(8, 0))
	for total := range int64(100) {
		loads := mapLoads{r.ID(0): total}
		for _, c := range []float64{1, 1.25, 2} {
			want := int64(math.Ceil(c * float64(total+1) / 8))
			if got := NewState(r, nil, loads, Bound{LoadFactor: c}).Bound(); got != max(want, 1) {
				t.Fatalf("total %d c %v: bound %d, want %d", total, c, got, want)
			}
		}
	}
}

// TestWeightedPicksExceedTheBoundOnlyByFallingBack pins what the package
// doc promises of P's bound for weighted requests (the tokens signal).
// Unit weights always find an endpoint within the bound; a request of w
// tokens does only while the least loaded endpoint, at load m, has
// m + w within it, which holds whenever m <= w (Own is 1), m + w <= Min,
// or w·(n−c) <= (c−1)·total. Otherwise no endpoint passes and the pick
// falls back to the least loaded, ending at most floor(total/n) + w: above
// the bound by at most floor(total/n) − w and by at most
// (w·(n−c) − (c−1)·total)/n.
func TestWeightedPicksExceedTheBoundOnlyByFallingBack(t *testing.T) {
	// The example in the doc: 18000 tokens on four endpoints at 20000
	// each. The bound is max(ceil(1.25·98000/4), 16384, 2·18000) = 36000,
	// and every endpoint would end at 38000.
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ids := fleet(4, 0)
	if err := b.SetEndpoints(ids); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		defer b.AcquireOn(Request{Key: 1, Keyed: true, Tokens: 20000}, id, DecisionHome).Release()
	}
	if got := b.snap.Load().state.Limit(18000); got != 36000 {
		t.Fatalf("bound for 18000 tokens %d, want 36000", got)
	}
	l, err := b.Acquire(Request{Key: 5, Keyed: true, Tokens: 18000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if got := b.Inflight().Load(l.Endpoint); l.Decision != DecisionFallback || got != 38000 {
		t.Fatalf("went to %s %v ending at %d, want a fallback ending at 38000", l.Endpoint, l.Decision, got)
	}

	fallbacks := 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 11))
		n := 2 + rng.IntN(11)
		r := mustRing(t, fleet(n, int(seed)))
		cfg := DefaultConfig()
		cfg.LoadFactor = 1 + rng.Float64()
		if rng.IntN(2) == 0 {
			cfg.MinBound = 0
		}
		c := cfg.LoadFactor
		for range 200 {
			// Near-even loads, where a long prompt finds no room, as often
			// as uneven ones.
			loads, base := mapLoads{}, rng.Int64N(40000)
			for _, id := range r.IDs() {
				loads[id] = base + rng.Int64N(1+base/4)
			}
			total, least := loads.Total(), int64(math.MaxInt64)
			for _, v := range loads {
				least = min(least, v)
			}
			w := 1 + rng.Int64N(40000)
			req := Request{Key: rng.Uint64(), Keyed: true, Tokens: w}
			pw, _ := cfg.weights(req, n, 0)
			s := NewState(r, nil, loads, cfg.bound())
			limit := s.Limit(w)
			i, d, err := r.pick(req, pw, s)
			if err != nil {
				t.Fatal(err)
			}
			got := loads[r.ID(i)] + w
			if least+w <= limit {
				if got > limit {
					t.Fatalf("seed %d: %s ends at %d %v though the least loaded fits the bound %d", seed, r.ID(i), got, d, limit)
				}
				continue
			}
			// None fits: the doc's sufficient conditions must all be false.
			if least <= w || least+w <= cfg.MinBound || float64(w)*(float64(n)-c) <= (c-1)*float64(total) {
				t.Fatalf("seed %d: n %d c %v total %d w %d least %d: a sufficient condition held, yet %d > bound %d",
					seed, n, c, total, w, least, least+w, limit)
			}
			fallbacks++
			if d != DecisionFallback || loads[r.ID(i)] != least {
				t.Fatalf("seed %d: went to %s (load %d) %v, want a fallback to the least loaded (%d)", seed, r.ID(i), loads[r.ID(i)], d, least)
			}
			over := got - limit
			if over > total/int64(n)-w {
				t.Fatalf("seed %d: %d above the bound, more than floor(total/n) − w = %d", seed, over, total/int64(n)-w)
			}
			if most := (float64(w)*(float64(n)-c) - (c-1)*float64(total)) / float64(n); float64(over) > most+1e-9 {
				t.Fatalf("seed %d: %d above the bound, more than (w·(n−c) − (c−1)·total)/n = %.1f", seed, over, most)
			}
		}
	}
	if fallbacks == 0 {
		t.Fatal("no pick fell back: the test checked nothing of the fallback")
	}
	t.Logf("%d of %d picks fell back above the bound", fallbacks, 40*200)
}
