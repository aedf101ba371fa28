package ring

import (
	"math"
	"math/rand/v2"
	"testing"
)

// acquireSettled acquires n requests of req and settles each (its first
// token came back: a slow request, decoding), returning the count per
// endpoint and the leases.
func acquireSettled(t *testing.T, b *Balancer, req Request, n int) (map[string]int, []Lease) {
	t.Helper()
	per := map[string]int{}
	var ls []Lease
	for range n {
		l, err := b.Acquire(req)
		if err != nil {
			t.Fatal(err)
		}
		l.Settle()
		per[l.Endpoint]++
		ls = append(ls, l)
	}
	return per, ls
}

// TestKVBoundSpreadsSlowRequests: 16 concurrent slow requests on one key
// over 4 endpoints of unknown KV capacity put no endpoint above
// ceil(1.25·16/4)+1 = 6, under either signal: once their prefill is over
// they weigh nothing in P, but they still hold their prompts in KV.
func TestKVBoundSpreadsSlowRequests(t *testing.T) {
	limit := int(math.Ceil(1.25*16/4)) + 1
	for _, sig := range Signals {
		cfg := DefaultConfig()
		cfg.Signal, cfg.KVAverage = sig, true
		if sig == SignalRequests {
			cfg.MinBound = DefaultMinRequests
		}
		b, err := NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetEndpoints([]string{"a", "b", "c", "d"}); err != nil {
			t.Fatal(err)
		}
		per, _ := acquireSettled(t, b, Request{Key: 42, Keyed: true, Tokens: 1000}, 16)
		for id, n := range per {
			if n > limit {
				t.Errorf("%s: %s holds %d of 16 requests, want <= %d (%v)", sig, id, n, limit, per)
			}
		}
	}
}

// TestKVSharedPrefixCountedOnce: a group's shared prefix is counted once
// per endpoint while any request of the group is in flight there, as the
// engine holds it once; each request adds its own part.
func TestKVSharedPrefixCountedOnce(t *testing.T) {
	b := tokensBalancer(t, DefaultConfig(), "a", "b")
	kv := b.Inflight().KV()
	req := func(tokens int64) Request {
		return Request{Key: 1, Keyed: true, Group: 7, SharedTokens: 1000, Tokens: tokens}
	}
	l1 := b.AcquireOn(req(1200), "a", DecisionHome)
	l2 := b.AcquireOn(req(1300), "a", DecisionHome)
	l3 := b.AcquireOn(req(1100), "b", DecisionHome)
	if got := kv.Load("a"); got != 1000+200+300 {
		t.Fatalf("K(a) %d, want the shared 1000 once plus 200 and 300", got)
	}
	if got := kv.Total(); got != 1500+1100 {
		t.Fatalf("K total %d, want 2600", got)
	}
	l1.Release()
	l1.Release()
	if got := kv.Load("a"); got != 1300 {
		t.Fatalf("K(a) %d after one release, want 1300: the shared part stays while l2 runs", got)
	}
	l2.Release()
	l3.Release()
	if a, tot := kv.Load("a"), kv.Total(); a != 0 || tot != 0 {
		t.Fatalf("K(a) %d, total %d after every release, want 0 0", a, tot)
	}
}

// TestKVSharedPartReleasedAsAdded: two requests of one group may
// estimate its shared part differently (the public Request allows it).
// The endpoint counts the part once, at the first request's size, so the
// last request to leave must remove that size, not its own, in every
// order of arrival and departure; else K, its total and the shared total
// stay wrong forever.
func TestKVSharedPartReleasedAsAdded(t *testing.T) {
	for _, shared := range [][2]int64{{2000, 1500}, {1500, 2000}} {
		for _, firstLeavesFirst := range []bool{true, false} {
			b := tokensBalancer(t, DefaultConfig(), "a")
			kv := b.Inflight().KV()
			sh := kv.(SharedLoads)
			l1 := b.AcquireOn(Request{Key: 1, Keyed: true, Group: 9, SharedTokens: shared[0], Tokens: 3000}, "a", DecisionHome)
			l2 := b.AcquireOn(Request{Key: 2, Keyed: true, Group: 9, SharedTokens: shared[1], Tokens: 3000}, "a", DecisionHome)
			// The first request's shared part once, then each one's own part.
			if got, want := kv.Load("a"), shared[0]+(3000-shared[0])+(3000-shared[1]); got != want {
				t.Fatalf("shared %v: K(a) %d with both in flight, want %d", shared, got, want)
			}
			if got := sh.Shared("a"); got != shared[0] {
				t.Fatalf("shared %v: shared part of K(a) %d with both in flight, want %d", shared, got, shared[0])
			}
			if firstLeavesFirst {
				l1.Release()
				l2.Release()
			} else {
				l2.Release()
				l1.Release()
			}
			if k, tot, s, st := kv.Load("a"), kv.Total(), sh.Shared("a"), sh.SharedTotal(); k != 0 || tot != 0 || s != 0 || st != 0 {
				t.Errorf("shared %v, first leaves first %v: K(a) %d, K total %d, shared %d, shared total %d after both left, want all 0",
					shared, firstLeavesFirst, k, tot, s, st)
			}
		}
	}
}

// TestKVCapacityBoundsTheHome: where an endpoint's KV capacity is known,
// K is bounded by KVCapacityFactor times it (by default 0.85) rather
// than by c·average: the home keeps a request that fits, and refuses one
// that does not.
func TestKVCapacityBoundsTheHome(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		factor   float64
		wantHome bool
	}{
		{0, 0, false},      // unknown: c·average, ceil(1.25·4000/4) = 1250 < 3000+1000
		{100_000, 0, true}, // the engine holds it
		{4800, 0, true},    // the default 0.85·capacity does: 4080 >= 4000
		{4700, 0, false},   // 3995 does not
		{4000, 1, true},    // the capacity itself holds 4000
		{3500, 1, false},   // but not in 3500
		{3500, 1.25, true}, // 4375 does
		{3100, 1.25, false},
		{0, 0.5, false}, // unknown capacity: the factor does not apply
	} {
		cfg := kvAverage()
		cfg.KVCapacityFactor = tc.factor
		b, err := NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var eps []Endpoint
		for _, id := range []string{"a", "b", "c", "d"} {
			eps = append(eps, Endpoint{ID: id, Healthy: true, KVCapacity: tc.capacity})
		}
		if err := b.Update(eps); err != nil {
			t.Fatal(err)
		}
		home, _ := b.Home(9)
		for range 3 {
			b.AcquireOn(Request{Key: 9, Keyed: true, Tokens: 1000}, home, DecisionHome).Settle()
		}
		l, err := b.Acquire(Request{Key: 9, Keyed: true, Tokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if (l.Endpoint == home) != tc.wantHome {
			t.Errorf("capacity %d, factor %v: went to %s (%v), want home=%v", tc.capacity, tc.factor, l.Endpoint, l.Decision, tc.wantHome)
		}
	}
}

// TestSetKVLoads: the K bound reads the view it is given (gossip's
// cluster-wide one), not only this replica's counters.
func TestSetKVLoads(t *testing.T) {
	b, err := NewBalancer(kvAverage())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints([]string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	home, _ := b.Home(5)
	req := Request{Key: 5, Keyed: true, Tokens: 100}
	if l, _ := b.Acquire(req); l.Endpoint != home {
		t.Fatalf("idle fleet: went to %s, want home %s", l.Endpoint, home)
	}
	b.SetKVLoads(mapLoads{home: 50_000})
	if l, _ := b.Acquire(req); l.Endpoint == home {
		t.Fatalf("home holds 50000 KV tokens of 50000 cluster-wide: still took the request")
	}
}

// TestHomeSlackIsBounded: over one view of the loads (sequential picks),
// an endpoint that takes a request by affinity (home or spill) ends at
// most at P's limit for the request's weight plus, at the home only, the
// request's cached tokens (its slack: Tokens - NewTokens, never more than
// Tokens), and K at most at max(ceil(c·(K total + w)/n), 2w) for its K
// weight w, or w alone on an endpoint that held nothing. A fallback (no
// candidate within both bounds) goes to the least P-loaded endpoint and is
// bounded by neither; it is counted, not checked.
func TestHomeSlackIsBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cfg := kvAverage()
	cfg.MinBound = 0
	ids := fleet(6, 0)
	b := tokensBalancer(t, cfg, ids...)
	f, kv := b.Inflight(), b.Inflight().KV()
	kb := Bound{LoadFactor: cfg.LoadFactor, Own: 1}
	var held []Lease
	fallbacks := 0
	for range 5000 {
		if len(held) > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(len(held))
			if rng.IntN(2) == 0 {
				held[k].Settle()
			} else {
				held[k].Release()
				held = append(held[:k], held[k+1:]...)
			}
			continue
		}
		tokens := int64(100 + rng.IntN(4000))
		req := Request{Key: uint64(rng.IntN(20)), Keyed: true, Tokens: tokens, NewTokens: 1 + rng.Int64N(tokens)}
		pTotal, kTotal := f.Total(), kv.Total()
		l, err := b.Acquire(req)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if l.Decision == DecisionFallback {
			fallbacks++
			continue
		}
		pLimit := cfg.bound().Limit(pTotal, tokens, len(ids))
		if l.Decision == DecisionHome {
			pLimit = cfg.bound().Limit(pTotal, req.NewTokens, len(ids)) + tokens - req.NewTokens
		}
		if p := f.Load(l.Endpoint); p > pLimit {
			t.Fatalf("%v: P %d on %s, limit %d", l.Decision, p, l.Endpoint, pLimit)
		}
		if k, lim := kv.Load(l.Endpoint), kb.Limit(kTotal, tokens, len(ids)); k > lim && k != tokens {
			t.Fatalf("%v: K %d on %s, limit %d", l.Decision, k, l.Endpoint, lim)
		}
	}
	if fallbacks == 5000 {
		t.Fatal("every pick fell back")
	}
	t.Logf("%d fallbacks", fallbacks)
}

// kvAverage is the default with K bounded by c·average where the capacity
// is unknown.
func kvAverage() Config {
	c := DefaultConfig()
	c.KVAverage = true
	return c
}

// A group's shared part is counted once per endpoint in K, and
// KVSharedCounts reports it apart, for gossip to count it once across
// replicas; it leaves with the group's last request there.
func TestKVSharedCounts(t *testing.T) {
	b := tokensBalancer(t, DefaultConfig(), "a", "b")
	req := Request{Key: 1, Keyed: true, Group: 7, Tokens: 3000, SharedTokens: 2000}
	l1, l2 := b.AcquireOn(req, "a", DecisionHome), b.AcquireOn(req, "a", DecisionHome)
	other := b.AcquireOn(Request{Key: 2, Keyed: true, Group: 8, Tokens: 900, SharedTokens: 500}, "a", DecisionHome)
	f := b.Inflight()
	if k, sh := f.KVCounts()["a"], f.KVSharedCounts()["a"]; k != 1000+1000+2000+400+500 || sh != 2000+500 {
		t.Fatalf("K %d shared %d, want 4900 and 2500", k, sh)
	}
	if v, ok := f.KV().(SharedLoads); !ok || v.Shared("a") != 2500 || v.SharedTotal() != 2500 {
		t.Fatalf("the K view does not report the shared parts: %v", ok)
	}
	l1.Release()
	other.Release()
	if k, sh := f.KVCounts()["a"], f.KVSharedCounts()["a"]; k != 1000+2000 || sh != 2000 {
		t.Fatalf("after two releases K %d shared %d, want 3000 and 2000", k, sh)
	}
	l2.Release()
	if n := len(f.KVSharedCounts()); n != 0 || len(f.KVCounts()) != 0 {
		t.Fatalf("after every release: %v %v", f.KVCounts(), f.KVSharedCounts())
	}
}

// Where every healthy endpoint's capacity is known, K's bound is also
// KVLoadFactor times the endpoint's share of the fleet's K: when the
// fleet's memory is full everywhere, the home keeps a request that would
// find no room elsewhere either, and at KVLoadFactor 1 (no slack above
// the share) it does not; one endpoint of unknown capacity turns the
// relative bound off.
func TestKVLoadFactorKeepsAFullFleetHome(t *testing.T) {
	for _, tc := range []struct {
		name     string
		factor   float64
		caps     []int64
		wantHome bool
	}{
		// Both hold 3400 (0.85·4000); with the request 7400 in all, the
		// home's share is 3700, and 1.1·3700 = 4070 >= 3400+600.
		{"default", 0, []int64{4000, 4000}, true},
		{"factor 1", 1, []int64{4000, 4000}, false},
		{"the other's capacity unknown", 0, []int64{4000, 0}, false},
	} {
		cfg := DefaultConfig()
		cfg.KVLoadFactor = tc.factor
		b, err := NewBalancer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetEndpoints([]string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		home, _ := b.Home(9)
		other := "a"
		if home == "a" {
			other = "b"
		}
		// caps[0] is the home's, caps[1] the other's.
		eps := []Endpoint{{ID: home, Healthy: true, KVCapacity: tc.caps[0]}, {ID: other, Healthy: true, KVCapacity: tc.caps[1]}}
		if err := b.Update(eps); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{home, other} {
			b.AcquireOn(Request{Key: 1, Keyed: true, Tokens: 3400}, id, DecisionHome).Settle()
		}
		l, err := b.Acquire(Request{Key: 9, Keyed: true, Tokens: 600})
		if err != nil {
			t.Fatal(err)
		}
		if (l.Endpoint == home && l.Decision == DecisionHome) != tc.wantHome {
			t.Errorf("%s: went to %s (%v), want home=%v", tc.name, l.Endpoint, l.Decision, tc.wantHome)
		}
	}
}

// TestKVCapacityBoundsDoNotWrap: an engine may report a capacity up to
// 2^62 tokens (upstream.ParseKVCapacity) and KVCapacityFactor may be up
// to MaxLoadFactor; their product, and the fleet's capacity summed over
// such engines, stay at the top of int64 instead of wrapping around to a
// negative or small bound that would refuse the engine every request.
func TestKVCapacityBoundsDoNotWrap(t *testing.T) {
	const huge = int64(1) << 62
	for _, factor := range []float64{1, 2, MaxLoadFactor} {
		if got := KVCapacityBound(factor, huge); got < huge {
			t.Errorf("factor %v of %d tokens: bound %d", factor, huge, got)
		}
	}
	if got := capTotal([]int64{huge, huge, huge, huge + 1000}, nil); got < huge {
		t.Errorf("four engines of 2^62 tokens: fleet capacity %d", got)
	}
	cfg := DefaultConfig()
	cfg.KVCapacityFactor = 2
	b, err := NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setKVCapacity(t, b, huge, "a", "b")
	home, _ := b.Home(9)
	b.AcquireOn(Request{Key: 9, Keyed: true, Tokens: 1000}, home, DecisionHome).Settle()
	if l, err := b.Acquire(Request{Key: 9, Keyed: true, Tokens: 1000}); err != nil || l.Endpoint != home || l.Decision != DecisionHome {
		t.Errorf("an engine of 2^62 tokens holding 1000 refused 1000 more: %s %v %v", l.Endpoint, l.Decision, err)
	}
}

// TestDecideKVReadsTheGivenK: Decide bounds K by the balancer's own K,
// DecideKV by the K it is given, as a replica with that view would.
func TestDecideKVReadsTheGivenK(t *testing.T) {
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d"}
	setKVCapacity(t, b, 1000, ids...)
	home, _ := b.Home(7)
	hold := b.AcquireOn(Request{Key: 7, Keyed: true, Tokens: 900}, home, DecisionHome)
	defer hold.Release()
	req := Request{Key: 7, Keyed: true, Tokens: 200}
	if id, d, _ := b.Decide(req, nil); id == home || d != DecisionSpill {
		t.Fatalf("own K full at home: Decide went to %s %v, want a spill off %s", id, d, home)
	}
	if id, d, _ := b.DecideKV(req, nil, mapLoads{}); id != home || d != DecisionHome {
		t.Fatalf("given no K: DecideKV went to %s %v, want home %s", id, d, home)
	}
	if id, d, _ := b.DecideKV(req, nil, mapLoads{home: 900}); id == home || d != DecisionSpill {
		t.Fatalf("given the home's K: DecideKV went to %s %v, want a spill off %s", id, d, home)
	}
}
