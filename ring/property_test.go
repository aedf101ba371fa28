package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomRequest is a request as the router could build it, with the odd
// values a parsed body or a shares table can give: shares of NaN, ±Inf or
// below 0, shared parts longer than the prompt, new tokens beyond it.
func randomRequest(rng *rand.Rand, ids []string) Request {
	tokens := rng.Int64N(20000)
	req := Request{Key: uint64(rng.IntN(50)), Keyed: rng.IntN(8) != 0, Tokens: tokens, NewKnown: rng.IntN(2) == 0}
	switch rng.IntN(4) {
	case 0:
		req.NewTokens = rng.Int64N(tokens + 1)
	case 1:
		req.NewTokens = rng.Int64N(30000) - 5000
	}
	if rng.IntN(3) != 0 {
		req.Group = uint64(1 + rng.IntN(6))
		req.SharedTokens = rng.Int64N(tokens + 2000)
		shares := []float64{0, 0.01, 0.1, 0.3, 1, 2, -1, math.NaN(), math.Inf(1), math.Inf(-1)}
		req.GroupShare = shares[rng.IntN(len(shares))]
		req.EarlyShare = rng.IntN(4) == 0
	}
	if len(ids) > 0 && rng.IntN(4) == 0 {
		req.Follow = ids[rng.IntN(len(ids))]
	}
	for len(ids) > 0 && rng.IntN(3) == 0 {
		req.Exclude = append(req.Exclude, ids[rng.IntN(len(ids))])
	}
	return req
}

// randomEndpoints is an update as discovery could send it: duplicate IDs,
// unhealthy endpoints, known and unknown KV capacities, or none at all.
func randomEndpoints(rng *rand.Rand, pool []string) []Endpoint {
	var eps []Endpoint
	for range rng.IntN(len(pool) + 2) {
		e := Endpoint{ID: pool[rng.IntN(len(pool))], Healthy: rng.IntN(5) != 0}
		if rng.IntN(2) == 0 {
			e.KVCapacity = rng.Int64N(60000)
		}
		eps = append(eps, e)
	}
	return eps
}

// modelK is what K must hold on one endpoint: each lease's own part, and
// each group's shared part once, as its first lease there added it.
type modelK struct {
	own    int64
	groups map[uint64]*groupCount
}

// TestCountersBalanceOverRandomSequences drives a balancer through random
// sequences of Acquire, AcquireLocal, AcquireOn, Settle, Release (twice,
// through copies, after Settle or before), Update (duplicates, empty and
// all-unhealthy sets, mixed KV capacities, endpoints leaving with leases
// out and coming back) and checks after every step that no counter is
// negative, that every total is the sum of its endpoints' counts, that K
// and its shared part are what the leases out hold, and that every
// counter is back at zero once every lease is released.
func TestCountersBalanceOverRandomSequences(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 0xacc))
		cfg := DefaultConfig()
		if seed%3 == 0 {
			cfg = requestsConfig()
		}
		cfg.KVAverage = seed%2 == 0
		cfg.Placement.Partitions = 1 + rng.IntN(400)
		cfg.Placement.Replicas = 1 + rng.IntN(20)
		b, err := NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pool := fleet(1+rng.IntN(8), int(seed))
		f := b.Inflight()
		var held []Lease
		check := func(step int, op string) {
			t.Helper()
			where := fmt.Sprintf("seed %d step %d (%s)", seed, step, op)
			// The model: every lease out, on the counter it holds.
			p, reqs, k := map[*counter]int64{}, map[*counter]int64{}, map[*counter]*modelK{}
			for _, l := range held {
				c := l.h.c
				if w := l.h.w.Load(); w >= 0 {
					p[c] += w
					reqs[c]++
					m := k[c]
					if m == nil {
						m = &modelK{groups: map[uint64]*groupCount{}}
						k[c] = m
					}
					m.own += l.h.kv.own
					if l.h.kv.group != 0 && l.h.kv.shared > 0 {
						g := m.groups[l.h.kv.group]
						if g == nil {
							g = &groupCount{}
							m.groups[l.h.kv.group] = g
						}
						g.reqs++
					}
				}
			}
			var pSum, kSum, sharedSum int64
			for c := range p {
				m := k[c]
				var shared int64
				for id, g := range m.groups {
					cg, ok := c.groups[id]
					if !ok || cg.reqs != g.reqs {
						t.Fatalf("%s: group %d holds %d requests, want %d", where, id, cg.reqs, g.reqs)
					}
					shared += cg.shared
				}
				if len(c.groups) != len(m.groups) {
					t.Fatalf("%s: %d groups held, want %d", where, len(c.groups), len(m.groups))
				}
				if c.n.Load() != p[c] || c.reqs.Load() != reqs[c] || c.kv.Load() != m.own+shared || c.shared.Load() != shared {
					t.Fatalf("%s: P %d reqs %d K %d shared %d, want %d %d %d %d", where,
						c.n.Load(), c.reqs.Load(), c.kv.Load(), c.shared.Load(), p[c], reqs[c], m.own+shared, shared)
				}
				pSum, kSum, sharedSum = pSum+p[c], kSum+m.own+shared, sharedSum+shared
			}
			if f.Total() != pSum || f.KV().Total() != kSum || f.sharedTotal.Load() != sharedSum {
				t.Fatalf("%s: totals P %d K %d shared %d, want %d %d %d", where, f.Total(), f.KV().Total(), f.sharedTotal.Load(), pSum, kSum, sharedSum)
			}
			// What the counters report matches the counters the leases hold
			// (the balancer acquires only on tracked endpoints here).
			for id, c := range *f.counters.Load() {
				if f.Load(id) != c.n.Load() || f.Load(id) < 0 || f.KV().Load(id) < 0 || f.Requests(id) < 0 {
					t.Fatalf("%s: %s reports P %d K %d requests %d", where, id, f.Load(id), f.KV().Load(id), f.Requests(id))
				}
				if _, out := p[c]; !out && (c.n.Load() != 0 || c.kv.Load() != 0 || c.reqs.Load() != 0) {
					t.Fatalf("%s: %s counts with no lease out", where, id)
				}
			}
			for c := range p {
				tracked := false
				for _, tc := range *f.counters.Load() {
					tracked = tracked || tc == c
				}
				if !tracked {
					t.Fatalf("%s: a lease's counter is not tracked", where)
				}
			}
		}
		for step := range 600 {
			op := "none"
			switch x := rng.IntN(20); {
			case x < 2:
				op = "update"
				_ = b.Update(randomEndpoints(rng, pool))
			case x < 9:
				op = "acquire"
				req := randomRequest(rng, pool)
				var l Lease
				var err error
				if rng.IntN(4) == 0 {
					l, err = b.AcquireLocal(req)
				} else {
					l, err = b.Acquire(req)
				}
				if err == nil {
					held = append(held, l)
				}
			case x < 10:
				op = "acquire on"
				if cands := b.Candidates(nil, nil); len(cands) > 0 {
					held = append(held, b.AcquireOn(randomRequest(rng, pool), cands[rng.IntN(len(cands))].ID, DecisionHome))
				}
			case x < 13 && len(held) > 0:
				op = "settle"
				held[rng.IntN(len(held))].Settle()
			case len(held) > 0:
				op = "release"
				i := rng.IntN(len(held))
				l := held[i]
				l.Release()
				if rng.IntN(3) == 0 {
					l.Settle() // after the release: nothing
					l.Release()
				}
				held[i] = held[len(held)-1]
				held = held[:len(held)-1]
			}
			check(step, op)
		}
		for len(held) > 0 {
			held[0].Release()
			held = held[1:]
			check(-1, "drain")
		}
		if f.Total() != 0 || f.KV().Total() != 0 || f.sharedTotal.Load() != 0 {
			t.Fatalf("seed %d: after every release P %d K %d shared %d", seed, f.Total(), f.KV().Total(), f.sharedTotal.Load())
		}
		if len(f.Counts()) != 0 || len(f.KVCounts()) != 0 || len(f.KVSharedCounts()) != 0 {
			t.Fatalf("seed %d: after every release %v %v %v", seed, f.Counts(), f.KVCounts(), f.KVSharedCounts())
		}
	}
}

// TestWorstCasesHoldOverRandomLoads checks "The worst case, with one view
// of the loads" of the package doc as it states it, over random fleets
// (health, KV capacities known, unknown or mixed), configurations and
// requests, picks made one after another over this replica's own counts.
func TestWorstCasesHoldOverRandomLoads(t *testing.T) {
	picks := map[Decision]int{}
	for seed := range uint64(80) {
		rng := rand.New(rand.NewPCG(seed, 0xb0))
		cfg := DefaultConfig()
		if seed%4 == 0 {
			cfg = requestsConfig()
		}
		cfg.LoadFactor = 1 + 2*rng.Float64()
		cfg.MinBound = []int64{0, 4, 16384}[rng.IntN(3)]
		cfg.KVAverage = rng.IntN(2) == 0
		cfg.KVMinBound = []int64{0, 5000}[rng.IntN(2)]
		cfg.KVLoadFactor = []float64{0, 1, 1.5}[rng.IntN(3)]
		cfg.KVCapacityFactor = []float64{0, 0.5, 1}[rng.IntN(3)]
		b, err := NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids := fleet(2+rng.IntN(9), int(seed))
		var eps []Endpoint
		capacity := map[string]int64{}
		allKnown := rng.IntN(2) == 0
		for _, id := range ids {
			e := Endpoint{ID: id, Healthy: rng.IntN(6) != 0}
			if allKnown || rng.IntN(2) == 0 {
				e.KVCapacity = 2000 + rng.Int64N(80000)
			}
			capacity[id] = e.KVCapacity
			eps = append(eps, e)
		}
		if err := b.Update(eps); err != nil {
			t.Fatal(err)
		}
		st := b.snap.Load().state
		n := st.nHealthy
		if n == 0 {
			continue
		}
		var fleetCap int64 // the healthy endpoints', 0 unless all known
		for i, id := range b.snap.Load().ring.ids {
			if st.Healthy(i) {
				if capacity[id] == 0 {
					fleetCap = -1 << 62
				}
				fleetCap += capacity[id]
			}
		}
		fleetCap = max(fleetCap, 0)
		c := cfg.LoadFactor
		f, kv := b.Inflight(), b.Inflight().KV()
		var held []Lease
		for step := range 400 {
			if len(held) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(held))
				if rng.IntN(2) == 0 {
					held[k].Settle()
				} else {
					held[k].Release()
					held[k] = held[len(held)-1]
					held = held[:len(held)-1]
				}
				continue
			}
			req := randomRequest(rng, ids)
			req.Keyed = true
			if rng.IntN(2) == 0 {
				req.Exclude = nil
			}
			pTotal, kTotal := f.Total(), kv.Total()
			var least int64 = math.MaxInt64
			for i, id := range b.snap.Load().ring.ids {
				if st.usable(b.snap.Load().ring, i, req.Exclude) {
					least = min(least, f.Load(id))
				}
			}
			l, err := b.Acquire(req)
			if err != nil {
				continue
			}
			held = append(held, l)
			picks[l.Decision]++
			where := fmt.Sprintf("seed %d step %d: %+v to %s (%v)", seed, step, req, l.Endpoint, l.Decision)
			p, k := f.Load(l.Endpoint), kv.Load(l.Endpoint)
			w := max(req.Tokens, 1)
			if cfg.Signal == SignalRequests {
				w = 1
			}
			bound := Bound{LoadFactor: c, Min: cfg.MinBound}
			if cfg.Signal == SignalTokens {
				bound.Own = 1
			}
			// P, on the walk: max(ceil(c·(total+w)/n), Min, (1+Own)·w).
			pLimit := bound.Limit(pTotal, w, n)
			if l.Decision == DecisionHome || l.Endpoint == req.Follow && l.Decision == DecisionSpill {
				// At the home: that limit for w = its new tokens, plus
				// the cached tokens Tokens - NewTokens.
				// Its new tokens: NewTokens (0: all), less a recurring
				// group's shared part, which the home holds.
				nw := w
				if cfg.Signal == SignalTokens {
					if req.NewTokens > 0 {
						nw = min(nw, req.NewTokens)
					}
					if cfg.share(req, n, fleetCap) > 0 && req.SharedTokens > 0 {
						nw = min(nw, req.Tokens-req.SharedTokens)
					}
					if nw <= 0 {
						nw = w
					}
				}
				pLimit = bound.Limit(pTotal, nw, n) + w - nw
				// Above c·average by at most max(Min, (1+Own)·w) + Tokens.
				if most := c*float64(pTotal+nw)/float64(n) + float64(max(cfg.MinBound, nw+int64(bound.Own)*nw)+req.Tokens); float64(p) > most {
					t.Fatalf("%s: P %d, above c·average by more than max(Min, (1+Own)·w) + Tokens: %v", where, p, most)
				}
			}
			// K's weight: its own part, and the group's shared part where
			// the group was not held there.
			kw := l.h.kv.own
			if l.h.kv.shared > 0 && l.h.c.groups[l.h.kv.group].reqs == 1 {
				kw += l.h.kv.shared
			}
			kw = max(kw, 1)
			var kLimit int64
			switch {
			case capacity[l.Endpoint] > 0:
				kLimit = KVCapacityBound(orDefault(cfg.KVCapacityFactor, DefaultKVCapacityFactor), capacity[l.Endpoint])
				if fleetCap > 0 {
					kLimit = max(kLimit, int64(math.Ceil(orDefault(cfg.KVLoadFactor, DefaultKVLoadFactor)*float64(kTotal+kw)*float64(capacity[l.Endpoint])/float64(fleetCap))))
				}
			case cfg.KVAverage:
				kLimit = Bound{LoadFactor: c, Min: cfg.KVMinBound, Own: 1}.Limit(kTotal, kw, n)
			default:
				kLimit = math.MaxInt64
			}
			within := p <= pLimit && (k <= kLimit || k == kw) // or w on an idle endpoint
			if l.Decision == DecisionFallback && !within {
				// No candidate within both bounds: the least P-loaded, at
				// most floor(total/n) + w where the request excludes none.
				if p-l.Weight() != least {
					t.Fatalf("%s: fallback above the bounds (P %d of %d, K %d of %d) to P %d, not the least loaded (%d)", where, p, pLimit, k, kLimit, p-l.Weight(), least)
				}
				if len(req.Exclude) == 0 && p > pTotal/int64(n)+w {
					t.Fatalf("%s: fallback ends at P %d, above floor(total/n) + w = %d", where, p, pTotal/int64(n)+w)
				}
				continue
			}
			if p > pLimit {
				t.Fatalf("%s: P %d (total before %d), above %d", where, p, pTotal, pLimit)
			}
			if !within {
				t.Fatalf("%s: K %d (total before %d, weight %d), above %d", where, k, kTotal, kw, kLimit)
			}
		}
	}
	t.Logf("picks: %v", picks)
}

// orDefault is v, or def where v is 0.
func orDefault(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// TestPickWalksTheCandidates: whatever the placement, a pick takes the
// first usable endpoint of Ring.Candidates within the bound ("It is the
// order Ring.Pick walks"), as the home when it is the first, else the
// least loaded usable endpoint; with placements of fewer partitions than
// endpoints, where some endpoints own none.
func TestPickWalksTheCandidates(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 0xca))
		ids := fleet(1+rng.IntN(12), int(seed))
		r, err := NewRing(ids, PlacementConfig{Partitions: 1 + rng.IntN(2*len(ids)), Replicas: 1 + rng.IntN(8), Load: 1 + rng.Float64()})
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			loads, healthy, exclude := randomLoads(rng, r, 6)
			s := NewState(r, healthy, loads, Bound{LoadFactor: 1 + rng.Float64()})
			req := Request{Key: rng.Uint64(), Keyed: true, Exclude: exclude}
			want, wantD := -1, DecisionFallback
			for k, i := range r.Candidates(req.Key, nil) {
				if s.usable(r, i, exclude) && loads[r.ID(i)] < s.Bound() {
					want = i
					switch {
					case k == 0:
						wantD = DecisionHome
					case s.usable(r, r.Home(req.Key), exclude):
						wantD = DecisionSpill
					}
					break
				}
			}
			if want < 0 {
				want = r.leastLoaded(req, s)
			}
			i, d, _ := r.Pick(req, s)
			if i != want || d != wantD {
				t.Fatalf("seed %d: %d endpoints, %d partitions: picked %d (%v), want %d (%v) of candidates %v, loads %v, bound %d",
					seed, r.Len(), len(r.owner), i, d, want, wantD, r.Candidates(req.Key, nil), loads, s.Bound())
			}
		}
	}
}

// TestHomeExcludingIsTheFirstUsableCandidate: Balancer.HomeExcluding is
// the first usable endpoint of Ring.Candidates, and the idle pick (Peek),
// whatever the placement: with fewer partitions than endpoints, where
// every endpoint that owns one is excluded, it is one that owns none.
func TestHomeExcludingIsTheFirstUsableCandidate(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 0x40))
		cfg := requestsConfig()
		ids := fleet(1+rng.IntN(10), int(seed))
		cfg.Placement = PlacementConfig{Partitions: 1 + rng.IntN(2*len(ids)), Replicas: 1 + rng.IntN(8), Load: 1.25}
		b, err := NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetEndpoints(ids); err != nil {
			t.Fatal(err)
		}
		r := b.snap.Load().ring
		for range 20 {
			key := rng.Uint64()
			var exclude []string
			for _, id := range ids {
				if rng.IntN(3) == 0 {
					exclude = append(exclude, id)
				}
			}
			want := ""
			for _, i := range r.Candidates(key, nil) {
				if !slices.Contains(exclude, r.ID(i)) {
					want = r.ID(i)
					break
				}
			}
			got, ok := b.HomeExcluding(key, exclude)
			if got != want || ok != (want != "") {
				t.Fatalf("seed %d: %d endpoints, %d partitions, excluding %v: home %q %v, want %q", seed, len(ids), len(r.owner), exclude, got, ok, want)
			}
			if peek, _, err := b.Peek(Request{Key: key, Keyed: true, Exclude: exclude}); ok && (err != nil || peek != got) {
				t.Fatalf("seed %d: home %s, idle pick %s %v", seed, got, peek, err)
			}
		}
	}
}
