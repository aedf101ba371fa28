package ring

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// requestsConfig is CHWBL as the paper and HAProxy count: requests.
func requestsConfig() Config {
	c := DefaultConfig()
	c.Signal, c.MinBound = SignalRequests, DefaultMinRequests
	return c
}

func mustBalancer(t testing.TB, ids ...string) *Balancer {
	t.Helper()
	b, err := NewBalancer(requestsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(ids); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLeaseCountsAndReleasesOnce(t *testing.T) {
	b := mustBalancer(t, "a", "b")
	l, err := b.Acquire(Request{Key: 1, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Inflight().Load(l.Endpoint); got != 1 {
		t.Fatalf("load %d after acquire, want 1", got)
	}
	l.Release()
	l.Release()
	if got, total := b.Inflight().Load(l.Endpoint), b.Inflight().Total(); got != 0 || total != 0 {
		t.Fatalf("after double release: load %d total %d, want 0 0", got, total)
	}
}

func TestCountsSurviveRebuildAndRemoval(t *testing.T) {
	b := mustBalancer(t, "a", "b", "c")
	var leases []Lease
	for k := range uint64(30) {
		l, err := b.Acquire(Request{Key: k, Keyed: true})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	before := b.Inflight().Counts()
	if err := b.SetEndpoints([]string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	for id, n := range before {
		if got := b.Inflight().Load(id); got != n {
			t.Fatalf("%s: %d in flight after adding d, want %d", id, got, n)
		}
	}
	// Remove an endpoint that still has requests: they release into the
	// same counter, and nothing goes negative or leaks into the total.
	if err := b.SetEndpoints([]string{"b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	for i := range leases {
		leases[i].Release()
		leases[i].Release()
	}
	if err := b.SetEndpoints([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if total, counts := b.Inflight().Total(), b.Inflight().Counts(); total != 0 || len(counts) != 0 {
		t.Fatalf("after releasing everything: total %d counts %v", total, counts)
	}
}

func TestNoEndpointsAndAllUnhealthy(t *testing.T) {
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(Request{Keyed: true}); err != ErrNoEndpoints {
		t.Fatalf("no endpoints: %v", err)
	}
	if err := b.SetEndpoints([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	_ = b.Update([]Endpoint{{ID: "a"}, {ID: "b"}})
	if _, err := b.Acquire(Request{Key: 5, Keyed: true}); err != ErrNoEndpoints {
		t.Fatalf("all unhealthy: %v", err)
	}
	_ = b.Update([]Endpoint{{ID: "a"}, {ID: "b", Healthy: true}})
	if l, err := b.Acquire(Request{Key: 5, Keyed: true}); err != nil || l.Endpoint != "b" {
		t.Fatalf("b healthy again: %v %v", l.Endpoint, err)
	}
	if err := b.SetEndpoints(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(Request{Keyed: true}); err != ErrNoEndpoints {
		t.Fatalf("emptied: %v", err)
	}
}

// TestHealthComesWithTheEndpointSet: one Update carries the set and its
// health, so an endpoint that leaves forgets its health, and one that
// returns healthy is used again (the Kubernetes NotReady -> Ready path).
func TestHealthComesWithTheEndpointSet(t *testing.T) {
	b := mustBalancer(t, "a", "b")
	_ = b.Update([]Endpoint{{ID: "a"}, {ID: "b", Healthy: true}, {ID: "c", Healthy: true}})
	st, _ := b.Status()
	for _, e := range st {
		if e.Healthy != (e.ID != "a") {
			t.Fatalf("%+v after rebuild", e)
		}
	}
	_ = b.Update([]Endpoint{{ID: "b", Healthy: true}})
	_ = b.SetEndpoints([]string{"a", "b"})
	st, _ = b.Status()
	for _, e := range st {
		if !e.Healthy {
			t.Fatalf("%s came back healthy but is held out", e.ID)
		}
	}
}

// TestOlderBuildNeverReplacesNewerState: an update whose placement is still
// being built when a later one is swapped in is dropped.
func TestOlderBuildNeverReplacesNewerState(t *testing.T) {
	b := mustBalancer(t, fleet(4, 0)...)
	big := fleet(100, 0) // ~100 ms to build (O(n²·vnodes)): the small update wins the race
	done := make(chan error)
	go func() { done <- b.SetEndpoints(big) }()
	for b.gen.Load() < 2 { // wait until the slow update has its generation
		runtime.Gosched()
	}
	if err := b.SetEndpoints(fleet(5, 0)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, _ := b.Status()
	if len(st) != 5 {
		t.Fatalf("%d endpoints: the older, slower build replaced the newer state", len(st))
	}
}

func TestBadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LoadFactor = 0.9
	if _, err := NewBalancer(cfg); err == nil {
		t.Fatal("load factor 0.9 accepted")
	}
}

// TestConcurrentAcquireReleaseAndRebuild runs leases against endpoint and
// health changes under the race detector; the books must balance at the end.
func TestConcurrentAcquireReleaseAndRebuild(t *testing.T) {
	b := mustBalancer(t, fleet(8, 0)...)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 2000 {
				l, err := b.Acquire(Request{Key: uint64(g*10000 + k), Keyed: k%5 != 0})
				if err == nil {
					l.Release()
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			_ = b.SetEndpoints(fleet(6+i%4, 0))
			eps := []Endpoint{}
			for j, id := range fleet(6+i%4, 0) {
				eps = append(eps, Endpoint{ID: id, Healthy: (i+j)%3 != 0})
			}
			_ = b.Update(eps)
		}
	})
	wg.Wait()
	if total := b.Inflight().Total(); total != 0 {
		t.Fatalf("total %d after all leases released", total)
	}
}

// TestHotKeySpillsWithinBound holds many leases on one key: the home takes
// requests up to the bound, then they spill, and no endpoint goes over it.
func TestHotKeySpillsWithinBound(t *testing.T) {
	b := mustBalancer(t, fleet(4, 0)...)
	var leases []Lease
	decisions := map[Decision]int{}
	for range 100 {
		_, bound := b.Status()
		l, err := b.Acquire(Request{Key: 77, Keyed: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Inflight().Load(l.Endpoint); got > bound {
			t.Fatalf("%s holds %d after the pick, bound %d", l.Endpoint, got, bound)
		}
		decisions[l.Decision]++
		leases = append(leases, l)
	}
	if decisions[DecisionHome] < 25 || decisions[DecisionSpill] == 0 {
		t.Fatalf("decisions %v: want the home filled to its share, then spills", decisions)
	}
	for i := range leases {
		leases[i].Release()
	}
}

// TestPeekLeavesNoTrace: what a balancer is asked through Peek and
// Decide does not change where it later places anything. The simulator
// peeks every replica's balancer on every request, to measure agreement
// and false spills; a Peek that recorded state (stop 35's cold-groups
// prototype recorded each group it was asked about) made every replica
// behave as if it had seen every request, and its measured gains with
// it.
func TestPeekLeavesNoTrace(t *testing.T) {
	peeked, fresh := tokensBalancer(t, DefaultConfig(), fleet(4, 0)...), tokensBalancer(t, DefaultConfig(), fleet(4, 0)...)
	rng := rand.New(rand.NewPCG(3, 5))
	req := func() Request {
		r := Request{Key: rng.Uint64(), Keyed: rng.IntN(6) > 0, Tokens: 300 + rng.Int64N(3000)}
		if rng.IntN(2) == 0 {
			r.Group, r.SharedTokens = 1+rng.Uint64N(40), 1100+rng.Int64N(2000)
			r.GroupShare = []float64{0, 0, 0.02, 0.3}[rng.IntN(4)]
			r.NewKnown = rng.IntN(2) == 0
		}
		return r
	}
	// Only peeked is asked about a stream of requests it never serves.
	for range 300 {
		r := req()
		if _, _, err := peeked.Peek(r); err != nil {
			t.Fatal(err)
		}
		if _, _, err := peeked.Decide(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Then both serve the same requests, and must place them alike.
	var held [][2]Lease
	for n := range 400 {
		r := req()
		a, errA := peeked.Acquire(r)
		b, errB := fresh.Acquire(r)
		if errA != nil || errB != nil || a.Endpoint != b.Endpoint || a.Decision != b.Decision {
			t.Fatalf("request %d %+v: the peeked balancer placed it on %s (%s, %v), a fresh one on %s (%s, %v)",
				n, r, a.Endpoint, a.Decision, errA, b.Endpoint, b.Decision, errB)
		}
		held = append(held, [2]Lease{a, b})
		if rng.IntN(3) == 0 {
			k := rng.IntN(len(held))
			held[k][0].Release()
			held[k][1].Release()
			held = append(held[:k], held[k+1:]...)
		}
	}
}

// TestPeekIsTheNextAcquire: Peek answers where Acquire would send the
// request, for keyed, grouped and unkeyed requests while the held leases
// push homes over the bound, and asking twice changes nothing (the
// unkeyed tie-break counter included).
func TestPeekIsTheNextAcquire(t *testing.T) {
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(fleet(4, 0)); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var leases []Lease
	decisions := map[Decision]int{}
	for n := range 400 {
		req := Request{Key: rng.Uint64N(8), Keyed: rng.IntN(5) > 0, Tokens: 500 + rng.Int64N(4000)}
		if rng.IntN(2) == 0 {
			req.Group, req.SharedTokens = 1+rng.Uint64N(3), 1200
			req.GroupShare = []float64{0, 0.05, 0.3}[rng.IntN(3)]
		}
		id, d, err := b.Peek(req)
		id2, d2, err2 := b.Peek(req)
		if err != nil || err2 != nil || id != id2 || d != d2 {
			t.Fatalf("request %d %+v: peeked %s %s %v, then %s %s %v", n, req, id, d, err, id2, d2, err2)
		}
		l, err := b.Acquire(req)
		if err != nil || l.Endpoint != id || l.Decision != d {
			t.Fatalf("request %d %+v: peeked %s %s, acquired %s %s %v", n, req, id, d, l.Endpoint, l.Decision, err)
		}
		decisions[d]++
		leases = append(leases, l)
		if rng.IntN(3) == 0 { // some requests end, so loads also fall
			k := rng.IntN(len(leases))
			leases[k].Release()
			leases = append(leases[:k], leases[k+1:]...)
		}
	}
	if decisions[DecisionHome] == 0 || decisions[DecisionSpill] == 0 || decisions[DecisionFallback] == 0 {
		t.Fatalf("decisions %v: want homes, spills and unkeyed fallbacks", decisions)
	}
	for _, l := range leases {
		l.Release()
	}
	// Idle endpoints tie, and an unkeyed request's tie-break moves on with
	// every Acquire: Peek must break it as the next Acquire will.
	seen := map[string]bool{}
	for range 8 {
		id, _, _ := b.Peek(Request{})
		l, err := b.Acquire(Request{})
		if err != nil || l.Endpoint != id {
			t.Fatalf("idle fleet: peeked %s, acquired %s %v", id, l.Endpoint, err)
		}
		seen[id] = true
		l.Release()
	}
	if len(seen) < 2 {
		t.Fatalf("unkeyed picks on an idle fleet all went to %v: the tie-break did not move", seen)
	}
}

func ExampleBalancer() {
	b, _ := NewBalancer(DefaultConfig())
	_ = b.SetEndpoints([]string{"http://vllm-0:8000", "http://vllm-1:8000", "http://vllm-2:8000"})
	lease, _ := b.Acquire(Request{Key: 0x5eed, Keyed: true})
	defer lease.Release()
	fmt.Println(lease.Endpoint, lease.Decision)
	// Output: http://vllm-1:8000 home
}

// TestCopiedLeaseReleasesOnce: a Lease is a value; a copy released as well
// as the original (a struct copied into a retry loop, a deferred release
// of a stale copy) must still give the slot back exactly once.
func TestCopiedLeaseReleasesOnce(t *testing.T) {
	b := mustBalancer(t, fleet(2, 0)...)
	keep, err := b.Acquire(Request{Key: 1, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Acquire(Request{Key: 1, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	cp := l
	l.Release()
	cp.Release()
	cp2 := cp
	cp2.Release()
	if got := b.Inflight().Total(); got != 1 {
		t.Fatalf("total %d after releasing one of two leases through three copies, want 1", got)
	}
	keep.Release()
	if got := b.Inflight().Total(); got != 0 {
		t.Fatalf("total %d, want 0", got)
	}
}

// Home is the pick of an idle balancer, and skips an unhealthy home.
func TestHomeIsTheIdlePick(t *testing.T) {
	b, err := NewBalancer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Home(1); ok {
		t.Fatal("a home without endpoints")
	}
	ids := []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1"}
	if err := b.SetEndpoints(ids); err != nil {
		t.Fatal(err)
	}
	for key := range uint64(200) {
		h, _ := b.Home(key * 0x9e3779b97f4a7c15)
		l, err := b.Acquire(Request{Key: key * 0x9e3779b97f4a7c15, Keyed: true})
		if err != nil || l.Endpoint != h || l.Decision != DecisionHome {
			t.Fatalf("key %d: home %s, idle pick %s %v", key, h, l.Endpoint, l.Decision)
		}
		l.Release()
	}
	eps := []Endpoint{{ID: ids[0], Healthy: true}, {ID: ids[1], Healthy: false}, {ID: ids[2], Healthy: true}, {ID: ids[3], Healthy: true}}
	if err := b.Update(eps); err != nil {
		t.Fatal(err)
	}
	for key := range uint64(200) {
		if h, _ := b.Home(key); h == ids[1] {
			t.Fatalf("key %d: home on the unhealthy endpoint", key)
		}
	}
}
