// Package memnet is an in-memory, fault-injecting network for
// hashicorp/memberlist, for tests and chaos scenarios. Sends never block:
// a packet to a crashed, partitioned or overloaded node is dropped, and a
// dial to one fails at once, so memberlist's failure detector sees what it
// would see on a real network. Losses and delays are drawn from a seeded
// source, so a run under testing/synctest is reproducible.
//
// memberlist's own MockNetwork blocks on sends to a node that stopped
// reading, so a crashed node is never declared dead there.
package memnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Network connects the transports made by [Network.Transport].
type Network struct {
	mu      sync.Mutex
	nodes   map[string]*Transport // by "ip:port"
	crashed map[string]bool
	holed   map[string]bool // black-holed: silent, no resets
	group   map[string]int  // partition side; equal sides can talk
	rng     *rand.Rand
	loss    float64
	latency time.Duration
	jitter  time.Duration
	stats   Stats
}

// Stats counts what crossed the network.
type Stats struct {
	Packets, PacketBytes uint64 // delivered UDP-like packets
	Dropped              uint64 // packets lost to faults or full queues
	Streams, StreamBytes uint64 // TCP-like connections and bytes written on them
}

// New returns an empty network whose losses and delays draw from seed.
func New(seed uint64) *Network {
	return &Network{
		nodes: map[string]*Transport{}, crashed: map[string]bool{}, holed: map[string]bool{}, group: map[string]int{},
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Transport returns a new transport listening on addr ("ip:port"), replacing
// any earlier one there (a restart). It also clears a crash of addr.
func (n *Network) Transport(addr string) (*Transport, error) {
	host, p, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	var port int
	if err == nil {
		_, err = fmt.Sscanf(p, "%d", &port)
	}
	if err != nil || ip == nil {
		return nil, fmt.Errorf("memnet: bad address %q", addr)
	}
	t := &Transport{
		net: n, addr: addr, ip: ip, port: port,
		packets: make(chan *memberlist.Packet, 1024), streams: make(chan net.Conn, 64), done: make(chan struct{}),
	}
	n.mu.Lock()
	if old := n.nodes[addr]; old != nil {
		old.closeConns()
	}
	n.nodes[addr] = t
	delete(n.crashed, addr)
	n.mu.Unlock()
	return t, nil
}

// Crash cuts addr off: its packets and dials, in and out, fail, and its
// open streams break. Its memberlist keeps running, isolated, until shut
// down; to the others it is dead.
func (n *Network) Crash(addr string) {
	n.mu.Lock()
	n.crashed[addr] = true
	t := n.nodes[addr]
	n.mu.Unlock()
	if t != nil {
		t.closeConns()
	}
}

// BlackHole makes addr silent without resetting anything, as a host that
// dies or drops off the network does: packets to and from it vanish, a
// dial to or from it hangs for its whole timeout and then fails, and its
// open streams swallow what is written (reads wait for their deadline).
// Its memberlist keeps running, isolated, until shut down.
func (n *Network) BlackHole(addr string) {
	n.mu.Lock()
	n.holed[addr] = true
	n.mu.Unlock()
}

// Restore undoes [Network.Crash] and [Network.BlackHole].
func (n *Network) Restore(addr string) {
	n.mu.Lock()
	delete(n.crashed, addr)
	delete(n.holed, addr)
	n.mu.Unlock()
}

// silent reports whether either end of a stream is black-holed.
func (n *Network) silent(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.holed[a] || n.holed[b]
}

// Partition splits the network: addresses in different groups cannot
// reach each other; addresses in no group form one more group.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = map[string]int{}
	for i, g := range groups {
		for _, a := range g {
			n.group[a] = i + 1
		}
	}
}

// Heal removes any partition.
func (n *Network) Heal() { n.Partition() }

// SetLoss makes each packet drop with probability p. Streams are reliable.
func (n *Network) SetLoss(p float64) {
	n.mu.Lock()
	n.loss = p
	n.mu.Unlock()
}

// SetLatency delays each packet by d plus a uniform draw in [0, jitter).
func (n *Network) SetLatency(d, jitter time.Duration) {
	n.mu.Lock()
	n.latency, n.jitter = d, jitter
	n.mu.Unlock()
}

// Stats returns the counts so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// reachable reports whether from can talk to to; n.mu must be held.
func (n *Network) reachable(from, to string) (*Transport, bool) {
	t := n.nodes[to]
	if t == nil || t.isShut() || n.crashed[from] || n.crashed[to] || n.holed[from] || n.holed[to] || n.group[from] != n.group[to] {
		return nil, false
	}
	return t, true
}

// send delivers a packet now or after the configured delay. It never blocks.
func (n *Network) send(from, to string, b []byte) {
	n.mu.Lock()
	t, ok := n.reachable(from, to)
	if ok && n.loss > 0 && n.rng.Float64() < n.loss {
		ok = false
	}
	delay := n.latency
	if n.jitter > 0 {
		delay += time.Duration(n.rng.Int64N(int64(n.jitter)))
	}
	if !ok {
		n.stats.Dropped++
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: addr(from)}
	if delay <= 0 {
		n.deliver(t, p)
		return
	}
	time.AfterFunc(delay, func() {
		n.mu.Lock()
		_, still := n.reachable(from, to)
		n.mu.Unlock()
		if still {
			n.deliver(t, p)
		} else {
			n.count(func(s *Stats) { s.Dropped++ })
		}
	})
}

func (n *Network) deliver(t *Transport, p *memberlist.Packet) {
	p.Timestamp = time.Now()
	select {
	case t.packets <- p:
		n.count(func(s *Stats) { s.Packets++; s.PacketBytes += uint64(len(p.Buf)) })
	default:
		n.count(func(s *Stats) { s.Dropped++ })
	}
}

func (n *Network) count(f func(*Stats)) {
	n.mu.Lock()
	f(&n.stats)
	n.mu.Unlock()
}

// dialTimeout is how long a dial into a black hole hangs when the caller
// gives no timeout.
const dialTimeout = 10 * time.Second

// timeoutError is a dial's timeout, as net reports one.
type timeoutError struct{ to string }

func (e timeoutError) Error() string   { return "memnet: dial " + e.to + ": i/o timeout" }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// dial connects from to to with an in-memory pipe, or fails at once; a
// dial into (or out of) a black hole hangs for timeout, then fails.
func (n *Network) dial(from, to string, timeout time.Duration) (net.Conn, error) {
	if n.silent(from, to) {
		time.Sleep(cmpOr(timeout, dialTimeout))
		return nil, timeoutError{to}
	}
	n.mu.Lock()
	t, ok := n.reachable(from, to)
	src := n.nodes[from]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("memnet: dial %s from %s: connection refused", to, from)
	}
	a, b := net.Pipe()
	ca := &conn{Conn: a, net: n, local: addr(from), remote: addr(to)}
	cb := &conn{Conn: b, net: n, local: addr(to), remote: addr(from)}
	select {
	case t.streams <- cb:
	default:
		a.Close()
		return nil, fmt.Errorf("memnet: dial %s: backlog full", to)
	}
	t.track(cb)
	if src != nil {
		src.track(ca)
	}
	n.count(func(s *Stats) { s.Streams++ })
	return ca, nil
}

func cmpOr(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}
