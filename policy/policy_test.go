package policy

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prefixring/prefixring/ring"
)

var ids = []string{"a", "b", "c", "d"}

func balancer(t *testing.T, unhealthy ...string) *ring.Balancer {
	t.Helper()
	b, err := ring.NewBalancer(ring.DefaultConfig())
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
	busy := b.AcquireOn("a", ring.DecisionFallback) // a holds 1, the rest 0
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
