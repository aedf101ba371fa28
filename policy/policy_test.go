package policy

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prefixring/prefixring/ring"
)

var ids = []string{"a", "b", "c", "d"}

// balancer counts requests (the unit of the baselines' real counterparts,
// and the easiest to reason about in these tests).
func balancer(t *testing.T, unhealthy ...string) *ring.Balancer {
	t.Helper()
	cfg := ring.DefaultConfig()
	cfg.Signal, cfg.MinBound = ring.SignalRequests, ring.DefaultMinRequests
	b, err := ring.NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var eps []ring.Endpoint
	for _, id := range ids {
		eps = append(eps, ring.Endpoint{ID: id, Healthy: !slices.Contains(unhealthy, id)})
	}
	if err := b.Update(eps); err != nil {
		t.Fatal(err)
	}
	return b
}

func picker(t *testing.T, name string, b *ring.Balancer) Picker {
	t.Helper()
	p, err := New(name, b, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pick acquires and releases at once, returning the endpoint.
func pick(t *testing.T, p Picker, req ring.Request) string {
	t.Helper()
	l, err := p.Acquire(req)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	return l.Endpoint
}

func TestRoundRobinTakesEachUsableEndpointInTurn(t *testing.T) {
	b := balancer(t, "c")
	p := picker(t, "round-robin", b)
	var got []string
	for i := range 6 {
		got = append(got, pick(t, p, ring.Request{Key: uint64(i % 2), Keyed: true})) // keys are ignored
	}
	if fmt.Sprint(got) != "[a b d a b d]" {
		t.Fatalf("round-robin over a, b, d (c unhealthy): %v", got)
	}
	if ep := pick(t, p, ring.Request{Exclude: []string{"a", "b"}}); ep != "d" {
		t.Fatalf("a retry that tried a and b went to %s", ep)
	}
}

func TestRoundRobinStartsWhereTold(t *testing.T) {
	b := balancer(t, "c")
	p := NewRoundRobin(b, 5) // 5 mod 3 usable: the third, d
	var got []string
	for range 4 {
		got = append(got, pick(t, p, ring.Request{}))
	}
	if fmt.Sprint(got) != "[d a b d]" {
		t.Fatalf("round-robin over a, b, d from 5: %v", got)
	}
}

func TestLeastLoadAvoidsBusyEndpoints(t *testing.T) {
	b := balancer(t)
	p := picker(t, "least-load", b)
	var held []ring.Lease
	counts := map[string]int{}
	for range 8 {
		l, err := p.Acquire(ring.Request{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		counts[l.Endpoint]++
	}
	for _, id := range ids {
		if counts[id] != 2 {
			t.Fatalf("8 held requests over 4 endpoints: %v, want 2 each", counts)
		}
	}
	for _, l := range held {
		l.Release()
	}
	if c := b.Candidates(nil, nil); c[0].Load+c[1].Load+c[2].Load+c[3].Load != 0 {
		t.Fatalf("loads after release: %+v", c)
	}
}

func TestP2CNeverTakesTheBusierOfItsTwo(t *testing.T) {
	b := balancer(t)
	busy := b.AcquireOn(ring.Request{}, "a", ring.DecisionFallback) // a holds 1, the rest 0
	defer busy.Release()
	p := picker(t, "p2c", b)
	seen := map[string]int{}
	for range 300 {
		seen[pick(t, p, ring.Request{})]++
	}
	if seen["a"] != 0 || seen["b"] == 0 || seen["c"] == 0 || seen["d"] == 0 {
		t.Fatalf("p2c with a busy: %v (a can lose to any other draw, never win)", seen)
	}
}

func TestRandomIsSeededAndCoversEveryEndpoint(t *testing.T) {
	b := balancer(t)
	p1, p2 := picker(t, "random", b), picker(t, "random", b)
	seen := map[string]int{}
	for range 200 {
		e1, e2 := pick(t, p1, ring.Request{}), pick(t, p2, ring.Request{})
		if e1 != e2 {
			t.Fatal("two random policies with one seed disagree")
		}
		seen[e1]++
	}
	if len(seen) != 4 {
		t.Fatalf("random over 4 endpoints: %v", seen)
	}
}

// Every load-only policy counts its requests where chwbl does, answers
// ErrNoEndpoints with nothing usable, and never picks an excluded or
// unhealthy endpoint.
func TestEveryPolicyCountsAndRespectsHealth(t *testing.T) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			b := balancer(t, "b")
			p := picker(t, name, b)
			for i := range 50 {
				l, err := p.Acquire(ring.Request{Key: uint64(i), Keyed: true, Exclude: []string{"d"}})
				if err != nil {
					t.Fatal(err)
				}
				if l.Endpoint == "b" || l.Endpoint == "d" {
					t.Fatalf("picked %s (b unhealthy, d excluded)", l.Endpoint)
				}
				if got := b.Inflight().Load(l.Endpoint); got != 1 {
					t.Fatalf("%s counts %d while its lease is held", l.Endpoint, got)
				}
				l.Release()
			}
			if _, err := p.Acquire(ring.Request{Exclude: []string{"a", "c", "d"}}); !errors.Is(err, ErrNoEndpoints) {
				t.Fatalf("nothing usable: %v", err)
			}
		})
	}
	if _, err := New("nope", nil, nil, 0); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

// hold keeps n leases on id.
func hold(b *ring.Balancer, id string, n int) []ring.Lease {
	var out []ring.Lease
	for range n {
		out = append(out, b.AcquireOn(ring.Request{}, id, ring.DecisionFallback))
	}
	return out
}

func release(ls []ring.Lease) {
	for _, l := range ls {
		l.Release()
	}
}

// chash keeps a key home however loaded the home is (no bound), skips a
// tried or unhealthy home, and sends unkeyed requests to the least loaded.
func TestCHashIgnoresLoad(t *testing.T) {
	b := balancer(t)
	p := picker(t, "chash", b)
	const key = 42
	home, _ := b.Home(key)
	held := hold(b, home, 50)
	defer release(held)
	if got := pick(t, p, ring.Request{Key: key, Keyed: true}); got != home {
		t.Fatalf("chash moved a key off its home at 50 in flight: %s, home %s", got, home)
	}
	if bounded := pick(t, picker(t, "chwbl-local", b), ring.Request{Key: key, Keyed: true}); bounded == home {
		t.Fatal("the bounded picker did not spill either: the test does not load the home")
	}
	if got := pick(t, p, ring.Request{Key: key, Keyed: true, Exclude: []string{home}}); got == home {
		t.Fatal("chash retried on the tried home")
	}
	if got := pick(t, p, ring.Request{}); got == home {
		t.Fatal("an unkeyed request went to the busiest endpoint")
	}
	u := balancer(t, home)
	if got := pick(t, picker(t, "chash", u), ring.Request{Key: key, Keyed: true}); got == home {
		t.Fatal("chash used an unhealthy home")
	}
}

// session follows the session id alone: a session's requests share one
// endpoint whatever their prompts; a request without one goes to the least
// loaded endpoint even when it has a prompt key.
func TestSessionFollowsTheSessionOnly(t *testing.T) {
	b := balancer(t)
	p := picker(t, "session", b)
	home, _ := b.Home(7)
	for range 5 {
		if got := pick(t, p, ring.Request{Key: 7, Keyed: true, Session: true}); got != home {
			t.Fatalf("session 7 went to %s, home %s", got, home)
		}
	}
	held := hold(b, home, 3)
	defer release(held)
	if got := pick(t, p, ring.Request{Key: 7, Keyed: true}); got == home {
		t.Fatal("a prompt key (no session) was followed to a loaded endpoint")
	}
}

// dualmap sends a key to the less loaded of its two homes, and never
// anywhere else.
func TestDualMapPicksTheLessLoadedOfTwoHomes(t *testing.T) {
	b := balancer(t)
	p := picker(t, "dualmap", b)
	var key uint64
	var a, c string
	for key = 1; ; key++ {
		a, _ = b.Home(key)
		c, _ = b.HomeExcluding(mix(key), nil)
		if a != c {
			break
		}
	}
	if got := pick(t, p, ring.Request{Key: key, Keyed: true}); got != a {
		t.Fatalf("idle: %s, want the first home %s", got, a)
	}
	held := hold(b, a, 2)
	if got := pick(t, p, ring.Request{Key: key, Keyed: true}); got != c {
		t.Fatalf("first home loaded: %s, want the second home %s", got, c)
	}
	held = append(held, hold(b, c, 5)...)
	defer release(held)
	if got := pick(t, p, ring.Request{Key: key, Keyed: true}); got != a {
		t.Fatalf("second home busier: %s, want %s", got, a)
	}
}

// chwbl-local bounds by this balancer's own counts even when the balancer
// reads a cluster-wide view: it spills only on what it placed itself.
func TestCHWBLLocalReadsOwnCounts(t *testing.T) {
	b := balancer(t)
	home, _ := b.Home(9)
	b.SetLoads(fixedLoads{home: 100})
	if got := pick(t, picker(t, "chwbl", b), ring.Request{Key: 9, Keyed: true}); got == home {
		t.Fatal("chwbl ignored the cluster-wide load")
	}
	if got := pick(t, picker(t, "chwbl-local", b), ring.Request{Key: 9, Keyed: true}); got != home {
		t.Fatalf("chwbl-local read the cluster-wide load: %s, home %s", got, home)
	}
}

type fixedLoads map[string]int64

func (f fixedLoads) Load(id string) int64 { return f[id] }
func (f fixedLoads) Total() int64 {
	var t int64
	for _, n := range f {
		t += n
	}
	return t
}

// Every policy but chwbl needs the balancer: New refuses to build one
// without it rather than hand back a picker that panics at its first
// request.
func TestNewNeedsTheBalancer(t *testing.T) {
	for _, name := range Names {
		if name == "chwbl" {
			continue
		}
		p, err := New(name, nil, nil, 1)
		if err == nil {
			t.Errorf("%s: built without a balancer (%T)", name, p)
		}
	}
	if _, err := New("chwbl", nil, nil, 1); err == nil {
		t.Error("chwbl: built without its picker")
	}
}

// TestLeastLoadTiesStartWhereItsSeedSays: least-load breaks ties in turn,
// from a place its seed draws, so replicas built with different seeds are
// not in step. Until stop 40 every instance started at the first endpoint:
// the study's three least-load replicas, each seeing only its own counts
// and sent requests in turn, put three consecutive requests on one engine
// whenever their loads tied (two in three consecutive requests on one
// engine, against about one in four by chance).
func TestLeastLoadTiesStartWhereItsSeedSays(t *testing.T) {
	firsts := map[string]bool{}
	for seed := range uint64(16) {
		b := balancer(t)
		p, err := New("least-load", b, b, seed)
		if err != nil {
			t.Fatal(err)
		}
		firsts[pick(t, p, ring.Request{})] = true // all idle: a tie
	}
	if len(firsts) < 3 {
		t.Fatalf("16 seeds' first ties went to %v: the seed does not choose where ties start", firsts)
	}
}

// TestSessionWithoutHeaderKeepsTheRequestsWeight: a request without a
// session id goes to the least loaded endpoint with its prompt key
// dropped, but still weighs its tokens there. Until stop 40 it counted 1
// in P and K under the tokens signal, so the loads the fallback read (and
// gossip published) were wrong.
func TestSessionWithoutHeaderKeepsTheRequestsWeight(t *testing.T) {
	cfg := ring.DefaultConfig()
	cfg.Signal = ring.SignalTokens
	b, err := ring.NewBalancer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEndpoints(ids); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"least-load", "session"} {
		l, err := picker(t, name, b).Acquire(ring.Request{Key: 42, Keyed: true, Tokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if p, kv := b.Inflight().Load(l.Endpoint), b.Inflight().KV().Load(l.Endpoint); p != 1000 || kv != 1000 {
			t.Errorf("%s: a 1000-token request without a session id counts P %d, K %d; want 1000, 1000", name, p, kv)
		}
		l.Release()
	}
}
