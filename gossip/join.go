package gossip

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"time"
)

// Resolver is the part of net.Resolver joining uses.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// maxJoinContacts bounds how many unknown peers one rejoin contacts. Every
// contact is a full push/pull of the cluster state, so joining through
// every address a headless Service resolves to, on every replica, costs
// O(N²) state transfers per interval; a few suffice to merge back.
const maxJoinContacts = 3

// seeds resolves the join list to host:port addresses, without our own: IPs
// as they are, names through the resolver (a name that fails to resolve is
// skipped, and logged at debug). A host without a port gets our bind port.
// answered is false if a lookup failed other than by the name not existing
// (a timeout, SERVFAIL, the node stopping): the seeds may then be short of
// what discovery would name.
func (n *Node) seeds(ctx context.Context) (out []string, answered bool) {
	_, defPort, _ := splitHostPort(n.cfg.BindAddr)
	answered = true
	for _, j := range n.cfg.Join {
		host, port, err := net.SplitHostPort(j)
		if err != nil {
			host, port = j, strconv.Itoa(defPort)
		}
		addrs := []string{host}
		if net.ParseIP(host) == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			addrs, err = n.cfg.resolver().LookupHost(rctx, host)
			cancel()
			if err != nil {
				n.log.Debug("gossip: join name did not resolve", "name", host, "err", err)
				if dnsErr, ok := errors.AsType[*net.DNSError](err); !ok || !dnsErr.IsNotFound {
					answered = false
				}
				continue
			}
		}
		for _, a := range addrs {
			if addr := net.JoinHostPort(a, port); addr != n.addr {
				out = append(out, addr)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), answered
}

// unknownSeeds returns the seeds that are not live members.
func (n *Node) unknownSeeds(seeds []string) []string {
	known := map[string]bool{}
	for _, m := range n.liveMembers() {
		known[m.Address()] = true
	}
	var out []string
	for _, s := range seeds {
		if !known[s] {
			out = append(out, s)
		}
	}
	return out
}

// joinOnce contacts up to maxJoinContacts of the seeds discovery names
// that are not members yet, chosen at random, and reports whether any
// answered. With none unknown there is nothing to do: the cluster is as
// large as discovery says, and it reports whether we are in one. A name
// that resolves to nobody else (a headless Service before any replica is
// ready) is no first join, so the join loop keeps retrying it promptly.
func (n *Node) joinOnce(ctx context.Context) bool {
	seeds, answered := n.seeds(ctx)
	if ctx.Err() != nil {
		return false // stopping: lookups cut short name nobody, which says nothing of our peers
	}
	unknown := n.unknownSeeds(seeds)
	if len(unknown) == 0 {
		// An island ends when discovery names no peer, or we have one. A
		// failed lookup names nobody, but says nothing of our peers: the
		// island stays one until a lookup answers.
		if answered || n.ml.NumMembers() > 1 {
			n.setIsolated(false, 0)
		}
		return n.ml.NumMembers() > 1
	}
	rand.Shuffle(len(unknown), func(i, j int) { unknown[i], unknown[j] = unknown[j], unknown[i] })
	pick := unknown[:min(len(unknown), maxJoinContacts)]
	k, err := n.ml.Join(pick)
	n.met.joins.Inc()
	n.log.Debug("gossip join", "contacted", k, "of", pick, "err", err)
	if n.left.Load() {
		return k > 0 // stopping: the join failed for that, not for a lack of peers
	}
	// Isolated: discovery names peers, and we are alone among members.
	n.setIsolated(n.ml.NumMembers() <= 1, len(unknown))
	return k > 0
}

// joinBounded makes one join attempt, waiting for it at most until ctx
// ends: memberlist's Join takes no context, and a peer that accepts the
// connection and never answers holds it for its TCP timeout. The attempt
// itself runs on until it ends or the node stops.
func (n *Node) joinBounded(ctx context.Context) bool {
	done := make(chan bool, 1)
	n.joinWG.Go(func() { done <- n.joinOnce(n.stopped) })
	select {
	case ok := <-done:
		return ok
	case <-ctx.Done():
		n.log.Warn("gossip: first join still running; starting alone meanwhile", "err", ctx.Err())
		return false
	}
}

// joinLoop retries the first join with backoff (100 ms, doubling, up to
// RejoinInterval) until it succeeds, as when replicas start together and the
// seed does not listen yet; then, every RejoinInterval, rejoins unknown
// peers that discovery names, so replicas that were partitioned, or started
// apart, find each other.
func (n *Node) joinLoop(joined bool) {
	defer n.wg.Done()
	if len(n.cfg.Join) == 0 {
		return
	}
	wait := 100 * time.Millisecond
	if joined {
		wait = n.cfg.RejoinInterval
	}
	for {
		t := time.NewTimer(wait)
		select {
		case <-n.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ok := n.joinOnce(n.stopped)
		switch {
		case ok && !joined:
			joined, wait = true, n.cfg.RejoinInterval
		case !joined:
			wait = min(2*wait, n.cfg.RejoinInterval)
		}
	}
}

// setIsolated records whether this replica is an island: discovery names
// other replicas, yet none would take it as a member (a wrong
// --gossip-key, a firewall, a name conflict). It logs each change of state
// once.
func (n *Node) setIsolated(isolated bool, unknown int) {
	if n.isolated.Swap(isolated) == isolated {
		return
	}
	if isolated {
		n.log.Error("gossip: isolated: discovery names other replicas but none accepted this one; "+
			"routing on this replica's own counts (check --gossip-key and the gossip port)", "peers", unknown)
	} else {
		n.log.Info("gossip: no longer isolated", "members", n.ml.NumMembers())
	}
}

// Isolated reports whether this replica is an island (see setIsolated).
func (n *Node) Isolated() bool { return n.isolated.Load() }
