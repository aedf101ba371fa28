package workers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cluster is a few replicas of the set, each with its own skewed clock,
// exchanging their shares' sections through a lossy, reordering,
// duplicating network that the test drives.
type cluster struct {
	r      *rand.Rand
	now    time.Time
	skew   []time.Duration
	sets   []*Set
	shares []*Share
	net    []msg // sent, not yet delivered
}

type msg struct {
	to int
	b  []byte
}

func newCluster(r *rand.Rand, n int, p Policy) *cluster {
	c := &cluster{r: r, now: t0}
	for i := range n {
		// Skews well inside MaxClockAhead, in both directions.
		c.skew = append(c.skew, time.Duration(r.IntN(40)-20)*time.Minute)
		s := NewSet(fmt.Sprintf("r%d", i), func() time.Time { return c.now.Add(c.skew[i]) }, time.Hour)
		if err := s.SetPolicy(p); err != nil {
			panic(err)
		}
		c.sets = append(c.sets, s)
		c.shares = append(c.shares, NewShare(s))
	}
	return c
}

// send queues b to every replica but from, each copy possibly lost or
// sent twice.
func (c *cluster) send(from int, b []byte) {
	if b == nil {
		return
	}
	for to := range c.sets {
		if to == from {
			continue
		}
		for range c.r.IntN(3) { // 0: lost, 1, or 2: duplicated
			c.net = append(c.net, msg{to, b})
		}
	}
}

// step does one random thing: an API call on a replica, a delivery of a
// random message in flight, or a push/pull between two replicas.
func (c *cluster) step(t *testing.T, urls []string) {
	c.now = c.now.Add(time.Duration(c.r.IntN(3)) * time.Millisecond)
	i := c.r.IntN(len(c.sets))
	switch k := c.r.IntN(10); {
	case k < 4:
		s, u := c.sets[i], urls[c.r.IntN(len(urls))]
		if c.r.IntN(2) == 0 {
			s.Add(u)
		} else {
			s.Remove(u)
		}
		c.send(i, c.shares[i].Local())
	case k < 9 && len(c.net) > 0:
		j := c.r.IntN(len(c.net))
		m := c.net[j]
		c.net = slices.Delete(c.net, j, j+1)
		if _, err := c.shares[m.to].Merge("", m.b); err != nil {
			t.Fatal(err)
		}
	default:
		j := c.r.IntN(len(c.sets))
		if j != i {
			c.pushPull(t, i, j)
		}
	}
}

func (c *cluster) pushPull(t *testing.T, i, j int) {
	a, b := c.shares[i].State(false), c.shares[j].State(false)
	for _, x := range []struct {
		sh *Share
		b  []byte
	}{{c.shares[j], a}, {c.shares[i], b}} {
		if x.b == nil {
			continue
		}
		if _, err := x.sh.Merge("", x.b); err != nil {
			t.Fatal(err)
		}
	}
}

// settle delivers what is in flight, then runs push/pull between every
// pair until nothing changes.
func (c *cluster) settle(t *testing.T) {
	for _, m := range c.net {
		if _, err := c.shares[m.to].Merge("", m.b); err != nil {
			t.Fatal(err)
		}
	}
	c.net = nil
	for range 2 * len(c.sets) {
		for i := range c.sets {
			for j := range c.sets {
				if i != j {
					c.pushPull(t, i, j)
				}
			}
		}
	}
}

// Replicas that take random adds and removals through their API, hear each
// other's ops lost, late, reordered and duplicated, and run push/pull at
// random, hold the same members once push/pull has run between them: each
// URL's fate is its newest op, wherever it was made.
func TestReplicasConverge(t *testing.T) {
	urls := []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1"}
	for trial := range 300 {
		r := rand.New(rand.NewPCG(uint64(trial), 7))
		c := newCluster(r, 2+r.IntN(3), DefaultPolicy())
		for range 20 + r.IntN(60) {
			c.step(t, urls)
		}
		c.settle(t)
		want := c.sets[0].Members()
		for i, s := range c.sets[1:] {
			if got := s.Members(); !slices.Equal(got, want) {
				t.Fatalf("trial %d: r0 holds %v, r%d holds %v", trial, want, i+1, got)
			}
		}
	}
}

// The cap on workers holds on each replica; replicas that between them
// registered more workers than it (concurrent adds, each replica under the
// cap) still agree on which workers they route once push/pull has run.
func TestReplicasConvergeAtTheCap(t *testing.T) {
	urls := []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1"}
	p := DefaultPolicy()
	p.MaxWorkers = 2
	for trial := range 300 {
		r := rand.New(rand.NewPCG(uint64(trial), 8))
		c := newCluster(r, 2+r.IntN(3), p)
		for range 20 + r.IntN(60) {
			c.step(t, urls)
		}
		c.settle(t)
		want := c.sets[0].Members()
		for i, s := range c.sets {
			got := s.Members()
			if len(got) > p.MaxWorkers {
				t.Fatalf("trial %d: r%d holds %d workers, over the cap %d", trial, i, len(got), p.MaxWorkers)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d: r0 holds %v, r%d holds %v", trial, want, i, got)
			}
		}
	}
}

// Two replicas at a cap of one each take a different worker before they
// hear of each other's: both then route the older add, hold the other
// (counted over the cap, refused again at the API) and route it once the
// first is removed.
func TestCapHoldsTheSameWorkersEverywhere(t *testing.T) {
	c := &clock{t0}
	a, b := newSet("r0", c), newSet("r1", c)
	p := DefaultPolicy()
	p.MaxWorkers = 1
	for _, s := range []*Set{a, b} {
		if err := s.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	a.Add("http://10.0.0.1:8000")
	c.t = c.t.Add(time.Millisecond)
	b.Add("http://10.0.0.2:8000")
	a.Merge(b.Ops())
	b.Merge(a.Ops())
	for _, s := range []*Set{a, b} {
		if got, want := s.Members(), []string{"http://10.0.0.1:8000"}; !slices.Equal(got, want) {
			t.Fatalf("%s routes %v, want %v", s.node, got, want)
		}
	}
	if got := a.Registered(); len(got) != 2 {
		t.Fatalf("r0 holds %v registered, want both", got)
	}
	if d := a.Dropped(); d.OverCap != 1 {
		t.Fatalf("r0 dropped %+v, want 1 over the cap", d)
	}
	if _, err := b.Register("http://10.0.0.2:8000"); !errors.Is(err, ErrTooManyWorkers) {
		t.Fatalf("re-adding the worker held out: %v, want ErrTooManyWorkers", err)
	}
	if !a.Remove("http://10.0.0.1:8000") || !b.Merge(a.Ops()) {
		t.Fatal("the removal did not change r1's members")
	}
	for _, s := range []*Set{a, b} {
		if got, want := s.Members(), []string{"http://10.0.0.2:8000"}; !slices.Equal(got, want) {
			t.Fatalf("after the removal %s routes %v, want %v", s.node, got, want)
		}
	}
}
