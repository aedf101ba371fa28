package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/gossip/core"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/ring"
)

// ErrNameConflict is returned by [Node.Start] when a live member already uses
// this node's name at another address.
var ErrNameConflict = errors.New("gossip: node name already used by another live member")

// Node is one replica's member of the gossip cluster. It publishes this
// replica's load (its leases' weights) and health votes, merges the others',
// and keeps the balancer's loads, endpoint set and health on the cluster-wide
// view.
type Node struct {
	cfg   Config
	bal   *ring.Balancer
	loads *core.ClusterLoads
	log   *slog.Logger
	met   *metrics
	ml    *memberlist.Memberlist
	sink  VerdictSink
	addr  string // our advertise address, as memberlist reports it
	meta  []byte // our memberlist metadata: wire version and settings
	// settingsDigest is the digest of cfg.Settings, carried in meta.
	settingsDigest uint64

	inbox chan []byte   // copies of messages from callbacks
	poke  chan struct{} // wake the loop (membership or observation change)

	peersMu sync.Mutex       // guards peers; never held while calling memberlist
	peers   map[string]*peer // each member's TCP send queue (peers.go); nil once stopped
	started atomic.Bool      // n.ml is set: peers' goroutines may run

	// again is the last UDP publication, sent once more at the next tick
	// in the aligned view (sync.go); the loop goroutine's alone.
	again *publicationMsg

	payloads []Payload // carried (Carry), by tag
	logs     *limiter  // rate-limits the node's own warnings

	mu             sync.Mutex // guards everything below
	view           view
	obs            observations
	inc            uint64
	ver            uint64
	last           core.Entry // our last published entry
	lastT          time.Time
	waited         int               // ticks since our last publication
	clocks         peerClocks        // the peers' clock skews
	settingsWarned map[string]uint64 // peers logged with differing settings: their digest

	memMu   sync.Mutex                 // guards members; never held while calling memberlist
	members map[string]memberlist.Node // copies taken in event callbacks

	conflict atomic.Pointer[string] // address of a member holding our name
	isolated atomic.Bool            // discovery names peers, none of whom we could join
	stopped  context.Context        // done when the node stops: a join's name lookups end with it
	halt     context.CancelFunc     // stops the node
	stop     <-chan struct{}        // stopped.Done()
	wg       sync.WaitGroup
	joinWG   sync.WaitGroup // joins still running after Start stopped waiting
	left     atomic.Bool
}

// observations are this replica's own inputs to its entry.
type observations struct {
	gen        uint64   // of the last Vote
	endpoints  []string // discovered; nil until the first observation
	discovered bool
	down       map[string]bool
	// failing: down for failed requests; served: up, and answered requests
	// lately (see core.Entry.WithRequestEvidence).
	failing, served map[string]bool
}

// VerdictSink receives the cluster's verdict: the endpoint set to route to
// and the endpoints of it that are down. The endpoint set's owner
// (upstream.Set) implements it and applies the verdict off the gossip loop.
// ApplyVerdict must not block.
type VerdictSink interface {
	ApplyVerdict(endpoints, down []string)
}

// balancerSinkFor applies verdicts straight to a balancer, on the caller's
// goroutine: for tests and single-process tools. A router passes its
// upstream.Set instead, which rebuilds the ring off the gossip loop.
func balancerSinkFor(b *ring.Balancer) VerdictSink { return balancerSink{b} }

type balancerSink struct{ b *ring.Balancer }

func (s balancerSink) ApplyVerdict(endpoints, down []string) {
	eps := make([]ring.Endpoint, len(endpoints))
	for i, id := range endpoints {
		eps[i] = ring.Endpoint{ID: id, Healthy: !slices.Contains(down, id)}
	}
	_ = s.b.Update(eps)
}

// New builds a node over bal and sets bal's loads to the cluster-wide view.
// reg receives the metrics; log may be nil. Call [Node.Start] to join.
func New(cfg Config, bal *ring.Balancer, reg prometheus.Registerer, log *slog.Logger) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg: cfg, bal: bal, loads: core.NewClusterLoads(bal.Inflight(), cfg.View), log: log.With("component", "gossip"),
		inbox: make(chan []byte, cfg.QueueSize), peers: map[string]*peer{},
		poke: make(chan struct{}, 1), obs: observations{down: map[string]bool{}}, logs: newLimiter(),
		inc: core.FirstIncarnation, members: map[string]memberlist.Node{}, clocks: newPeerClocks(), settingsWarned: map[string]uint64{},
	}
	n.stopped, n.halt = context.WithCancel(context.Background())
	n.stop = n.stopped.Done()
	n.meta, n.settingsDigest = encodeMeta(cfg.Settings, memberlist.MetaMaxSize), xxhash.Sum64String(cfg.Settings)
	n.view = newView(cfg, n.loads)
	n.sink = cfg.Sink
	if n.sink == nil {
		n.sink = balancerSinkFor(bal)
	}
	n.met = newMetrics(n, reg)
	bal.SetLoads(n.loads)
	bal.SetKVLoads(n.loads.KV(bal.Inflight().KV()))
	return n, nil
}

// Loads returns the cluster-wide loads the balancer reads.
func (n *Node) Loads() *core.ClusterLoads { return n.loads }

// Name returns this node's name.
func (n *Node) Name() string { return n.cfg.NodeName }

// Start creates the memberlist member, makes a first attempt to join the
// configured peers (bounded by ctx: an unreachable or silent peer does not
// hold up the router's start), and starts the publish, merge and join loops;
// they stop at [Node.Leave] or [Node.Close]. Failing to reach any peer is
// not an error: the join loop retries promptly, with backoff, until the
// first join succeeds, then rejoins whenever discovery names replicas that
// are not members (see join.go).
func (n *Node) Start(ctx context.Context) error {
	mc := n.cfg.memberlistConfig(&delegate{n: n})
	tr, err := nodeTransport(mc)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	mc.Transport = tr // memberlist's Shutdown ends our streams in flight (transport.go)
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return fmt.Errorf("gossip: %w", err)
	}
	n.ml = ml
	n.addr = ml.LocalNode().Address()
	// Publish before the send queues run: a member that joined since
	// Create is owed the join envelope, which carries our last entry, and
	// until this first publication that is an empty one (node "").
	n.publish(n.cfg.Clock(), true)
	n.startPeers()
	first := false
	if len(n.cfg.Join) > 0 {
		first = n.joinBounded(ctx)
	}
	if c := n.conflict.Load(); c != nil {
		_ = ml.Shutdown()
		n.left.Store(true) // Close and Leave have nothing left to stop
		n.halt()           // the join's lookups, and the send queues started for members met while joining
		n.joinWG.Wait()
		n.stopPeers()
		n.wg.Wait()
		return fmt.Errorf("%w: %q is at %s", ErrNameConflict, n.cfg.NodeName, *c)
	}
	n.wg.Add(2 + len(n.payloads))
	go n.loop()
	go n.joinLoop(first)
	for _, p := range n.payloads {
		go n.carry(p)
	}
	return nil
}

// loop owns merging: it drains the inbox, publishes on the ticker and, in
// the aligned view, applies each publication when it is due.
func (n *Node) loop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	due.Stop()
	for {
		select {
		case <-n.stop:
			return
		case b := <-n.inbox:
			n.receive(b)
		case <-n.poke:
			n.refresh(n.cfg.Clock())
		case <-t.C:
			n.publish(n.cfg.Clock(), false)
		case <-due.C:
			n.promote(n.cfg.Clock())
		}
		if n.cfg.View != core.ViewAligned {
			continue // nothing is ever due
		}
		n.mu.Lock()
		next, ok := n.view.NextDue()
		n.mu.Unlock()
		if ok {
			due.Reset(max(0, next.Sub(n.cfg.Clock())))
		}
	}
}

// promote applies the publications due by now (core.ViewAligned).
func (n *Node) promote(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.view.Promote(now) {
		n.applyVerdictLocked(n.ownEntry(now))
	}
}

func (n *Node) wake() {
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// Vote records this replica's vote on the endpoint set, as the set's
// owner (upstream.Set) reports it: the endpoints it discovered, those its
// checks see down, those of them down for failed requests, and those up
// that answered its requests lately. A vote older than one already
// recorded (by gen) is ignored. It does not block: the merge loop picks
// them up.
func (n *Node) Vote(gen uint64, discovered, down, failing, served []string) {
	n.mu.Lock()
	if gen < n.obs.gen {
		n.mu.Unlock()
		return
	}
	n.obs.gen, n.obs.endpoints, n.obs.discovered = gen, slices.Clone(discovered), true
	n.obs.down, n.obs.failing, n.obs.served = setOf(down), setOf(failing), setOf(served)
	n.mu.Unlock()
	n.wake()
}

// voteEndpoints records the endpoint set this replica discovered, and
// forgets its health observations of endpoints outside it.
func (n *Node) voteEndpoints(ids []string) {
	n.mu.Lock()
	n.obs.endpoints, n.obs.discovered = slices.Clone(ids), true
	for id := range n.obs.down {
		if !slices.Contains(ids, id) {
			delete(n.obs.down, id)
		}
	}
	n.mu.Unlock()
	n.wake()
}

// voteHealth records this replica's check of endpoint id.
func (n *Node) voteHealth(id string, healthy bool) {
	n.mu.Lock()
	if healthy {
		delete(n.obs.down, id)
	} else {
		n.obs.down[id] = true
	}
	n.mu.Unlock()
	n.wake()
}

// Acquire is the balancer's Acquire, counting decisions that skipped the
// home endpoint for load. The proxy may use the node as its picker.
func (n *Node) Acquire(req ring.Request) (ring.Lease, error) {
	l, err := n.bal.Acquire(req)
	if err == nil && l.Decision == ring.DecisionSpill {
		n.met.homeSkipped.Inc()
	}
	return l, err
}

// liveMembers returns copies of the live members, this node included.
// memberlist.Members returns pointers into state it keeps mutating, so the
// node keeps its own copies, taken in the event callbacks under
// memberlist's lock.
func (n *Node) liveMembers() []memberlist.Node {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	out := make([]memberlist.Node, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	return out
}

func (n *Node) setMember(m *memberlist.Node, alive bool) {
	n.memMu.Lock()
	defer n.memMu.Unlock()
	if alive {
		n.members[m.Name] = *m
		return
	}
	delete(n.members, m.Name)
	n.dropPeer(m.Name)
}

// Leave publishes a tombstone for this replica's entry, leaves the cluster
// (waiting up to timeout for the leave to spread) and stops the node. It
// returns within timeout whatever the peers do: stopping waits on no
// stream or dial (see stoppable).
func (n *Node) Leave(timeout time.Duration) error {
	if n.ml == nil || !n.left.CompareAndSwap(false, true) {
		return nil
	}
	n.mu.Lock()
	n.ver++
	e := core.Entry{Node: n.cfg.NodeName, Addr: n.addr, Incarnation: n.inc, Version: n.ver,
		Stamp: n.cfg.Clock().UnixMilli(), Left: true}
	n.view.Publish(e)
	n.last = e
	n.mu.Unlock()
	n.broadcast(encodeFull(e), "full")
	err := n.ml.Leave(timeout)
	return errors.Join(err, n.shutdown())
}

// Close stops the node without leaving, as a crash would: peers find out
// through memberlist's failure detector and the staleness rule. It
// returns at once: a join or a send in flight is cut short, not awaited.
func (n *Node) Close() error {
	if n.ml == nil || !n.left.CompareAndSwap(false, true) {
		return nil
	}
	return n.shutdown()
}

func (n *Node) shutdown() error {
	n.halt()
	n.stopPeers()
	err := n.ml.Shutdown()
	n.wg.Wait()
	n.joinWG.Wait()
	return err
}
