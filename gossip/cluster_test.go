package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/chaos/memnet"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/workers"
)

// testEndpoints are the upstreams every test replica balances over.
var testEndpoints = []string{"http://10.9.0.1:8000", "http://10.9.0.2:8000", "http://10.9.0.3:8000", "http://10.9.0.4:8000"}

// replica is one router replica of an in-process cluster.
type replica struct {
	name, addr string
	bal        *ring.Balancer
	node       *Node
	leases     []ring.Lease
	workers    *workers.Set // its registered-worker set, shared by gossip
	reg        *prometheus.Registry
}

type cluster struct {
	t     *testing.T
	net   *memnet.Network
	seed  string
	reps  map[string]*replica
	key   []byte
	tweak func(*Config)
	// skew sets a replica's clock off the bubble's by the duration (a
	// host whose clock is wrong), by name.
	skew map[string]time.Duration
	plug func(name string, n *Node) // before Start (Carry)
	// started and stopped, if set, hear of each replica's start and of
	// its crash or leave (the sketch rig runs each replica's share).
	started, stopped func(name string)
}

func newCluster(t *testing.T, seed uint64) *cluster {
	return &cluster{t: t, net: memnet.New(seed), seed: "10.0.0.1:7946", reps: map[string]*replica{}, skew: map[string]time.Duration{}}
}

// clock is the clock of the replica named name: the bubble's, off by its
// skew.
func (c *cluster) clock(name string) func() time.Time {
	off := c.skew[name]
	return func() time.Time { return time.Now().Add(off) }
}

func testLogger() *slog.Logger {
	if os.Getenv("GOSSIP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// start runs a replica named name at addr that joins the seed.
func (c *cluster) start(name, addr string, key []byte) (*replica, error) {
	c.t.Helper()
	tr, err := c.net.Transport(addr)
	if err != nil {
		return nil, err
	}
	// The cluster tests reason in requests (CHWBL's own unit).
	rc := ring.DefaultConfig()
	rc.Signal, rc.MinBound = ring.SignalRequests, ring.DefaultMinRequests
	bal, err := ring.NewBalancer(rc)
	if err != nil {
		return nil, err
	}
	cfg := Config{NodeName: name, BindAddr: addr, Join: []string{c.seed}, Key: key, Transport: tr, Clock: c.clock(name)}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	reg := prometheus.NewRegistry()
	n, err := New(cfg, bal, reg, testLogger())
	if err != nil {
		return nil, err
	}
	n.voteEndpoints(testEndpoints)
	ws := workers.NewSet(name, nil, 0)
	if err := n.Carry(workers.NewShare(ws)); err != nil {
		return nil, err
	}
	if c.plug != nil {
		c.plug(name, n)
	}
	if err := n.Start(context.Background()); err != nil {
		return nil, err
	}
	if c.started != nil {
		c.started(name)
	}
	r := &replica{name: name, addr: addr, bal: bal, node: n, workers: ws, reg: reg}
	c.reps[name] = r
	return r, nil
}

func (c *cluster) mustStart(name, addr string) *replica {
	c.t.Helper()
	r, err := c.start(name, addr, c.key)
	if err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	return r
}

// crash cuts a replica off the network and stops it without leaving.
func (c *cluster) crash(name string) {
	r := c.reps[name]
	if c.stopped != nil {
		c.stopped(name)
	}
	c.net.Crash(r.addr)
	_ = r.node.Close()
	delete(c.reps, name)
}

func (c *cluster) stopAll() {
	for _, r := range c.reps {
		if c.stopped != nil {
			c.stopped(r.name)
		}
		for i := range r.leases {
			r.leases[i].Release()
		}
		_ = r.node.Leave(time.Second)
	}
	// Let memberlist's in-flight probes and streams time out: a synctest
	// bubble must end with no goroutine left.
	time.Sleep(time.Minute)
}

func (c *cluster) sorted() []*replica {
	var out []*replica
	for _, r := range c.reps {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *replica) int { return strings.Compare(a.name, b.name) })
	return out
}

// hold acquires a lease for key on replica r and keeps it.
func (r *replica) hold(t *testing.T, key uint64) ring.Lease {
	t.Helper()
	l, err := r.node.Acquire(ring.Request{Key: key, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	r.leases = append(r.leases, l)
	return l
}

// wouldPick asks r where key would go now, without keeping the lease.
func (r *replica) wouldPick(key uint64) string {
	l, err := r.bal.Acquire(ring.Request{Key: key, Keyed: true})
	if err != nil {
		return "error: " + err.Error()
	}
	l.Release()
	return l.Endpoint
}

// views returns each replica's cluster-wide loads, as a comparable string.
func (c *cluster) views() map[string]string {
	out := map[string]string{}
	for _, r := range c.sorted() {
		s := fmt.Sprintf("total=%d", r.node.Loads().Total())
		for _, id := range testEndpoints {
			s += fmt.Sprintf(" %d", r.node.Loads().Load(id))
		}
		st, _ := r.bal.Status()
		for _, e := range st {
			if !e.Healthy {
				s += " down:" + e.ID
			}
		}
		out[r.name] = s
	}
	return out
}

// agreed reports whether every replica has the same view, and that view.
func (c *cluster) agreed() (string, bool) {
	var first string
	for _, v := range c.views() {
		if first == "" {
			first = v
		} else if v != first {
			return "", false
		}
	}
	return first, true
}

// waitAgreed sleeps in steps of 10ms until the views agree and satisfy ok,
// and returns how long it took; it fails the test after limit.
func (c *cluster) waitAgreed(limit time.Duration, ok func(string) bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) <= limit {
		if v, agree := c.agreed(); agree && (ok == nil || ok(v)) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("views did not converge within %v: %v", limit, c.views())
	return 0
}

func (c *cluster) members(r *replica) int { return r.node.ml.NumMembers() }

func testutilCount(reps []*replica) float64 {
	var sum float64
	for _, r := range reps {
		sum += counterValue(r.node.met.homeSkipped)
	}
	return sum
}
