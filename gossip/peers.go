package gossip

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/prefixring/prefixring/gossip/core"
)

// maxPeerMsgs bounds one member's queue of payload messages; beyond it
// they are dropped and counted (push/pull repairs what a payload lost).
const maxPeerMsgs = 64

// peer is one member's reliable (TCP) send queue, drained by a goroutine
// of its own: a member that stops answering without resetting (a dead or
// black-holed host, whose dial hangs for memberlist's TCPTimeout) holds up
// its own queue only, never the sends to the others.
//
// The entry owed is coalesced: a newer one replaces it, so a slow member
// gets our newest entry next, not a backlog (a full entry stays owed until
// one is sent, since a delta needs the list it names). Payload messages
// (broadcasts, replies) are kept in order, bounded by maxPeerMsgs.
type peer struct {
	to   memberlist.Node
	wake chan struct{} // capacity 1
	gone chan struct{} // closed when the member leaves

	mu    sync.Mutex
	entry *core.Entry // owed; nil: nothing
	full  bool        // the entry owed goes with its endpoint list
	join  bool        // owed the join envelope (our entry and payloads' own parts)
	msgs  []peerMsg
}

type peerMsg struct {
	msg  []byte
	kind string
}

// peerFor returns the send queue of member m, starting it if need be. It
// never blocks (callers include memberlist's event callbacks); nil once
// the node stopped, or when m is no longer a live member at its address:
// callers send to a listing taken a moment before, and a queue made for a
// member that left since (its NotifyLeave already dropped its queue)
// would never be dropped, nor would one to the old address of a member
// that came back elsewhere not replace the new one's.
func (n *Node) peerFor(m memberlist.Node) *peer {
	n.memMu.Lock() // before peersMu, as setMember takes them
	defer n.memMu.Unlock()
	if cur, ok := n.members[m.Name]; !ok || cur.Address() != m.Address() {
		return nil
	}
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if n.peers == nil {
		return nil // stopped
	}
	p := n.peers[m.Name]
	if p != nil && p.to.Address() == m.Address() {
		return p
	}
	if p != nil {
		close(p.gone) // the name moved: a new queue for the new address
	}
	p = &peer{to: m, wake: make(chan struct{}, 1), gone: make(chan struct{})}
	n.peers[m.Name] = p
	if n.started.Load() {
		n.wg.Add(1)
		go n.runPeer(p)
	}
	return p
}

// startPeers starts the goroutines of the queues made before Start (and
// lets later ones start at once). Tests that never start a node read the
// queues instead.
func (n *Node) startPeers() {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	n.started.Store(true)
	for _, p := range n.peers {
		n.wg.Add(1)
		go n.runPeer(p)
	}
}

// dropPeer stops member name's queue (it left or died); what it held is
// dropped: a member that comes back is sent our entry on its join.
func (n *Node) dropPeer(name string) {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if p := n.peers[name]; p != nil {
		close(p.gone)
		delete(n.peers, name)
	}
}

// stopPeers forbids new queues; the running ones end on n.stop.
func (n *Node) stopPeers() {
	n.peersMu.Lock()
	n.peers = nil
	n.peersMu.Unlock()
}

func (p *peer) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// oweEntry queues e for member to over TCP: with its endpoint list (full),
// or as a delta; join: the join envelope. Non-blocking.
func (n *Node) oweEntry(to memberlist.Node, e core.Entry, full, join bool) {
	p := n.peerFor(to)
	if p == nil {
		return
	}
	p.mu.Lock()
	p.entry, p.full, p.join = &e, p.full || full, p.join || join
	p.mu.Unlock()
	p.poke()
}

// queueMsg queues msg for member to, in order after what it already
// holds. Non-blocking: a full queue drops msg and counts it.
func (n *Node) queueMsg(to memberlist.Node, msg []byte, kind string) {
	p := n.peerFor(to)
	if p == nil {
		return
	}
	p.mu.Lock()
	full := len(p.msgs) >= maxPeerMsgs
	if !full {
		p.msgs = append(p.msgs, peerMsg{msg: msg, kind: kind})
	}
	p.mu.Unlock()
	if full {
		n.met.dropped.WithLabelValues("send_queue_full").Inc()
		return
	}
	p.poke()
}

// runPeer sends what p is owed until the node stops or the member leaves.
// Our endpoint list that failed to go is sent again a heartbeat later, or
// at the next wake if sooner.
func (n *Node) runPeer(p *peer) {
	defer n.wg.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-p.gone:
			return
		case <-p.wake:
		case <-retry.C:
		}
		for {
			sent, failed := n.sendOwed(p)
			if failed {
				retry.Reset(n.cfg.Heartbeat)
			}
			if !sent || failed {
				break
			}
			select {
			case <-n.stop:
				return
			case <-p.gone:
				return
			default:
			}
		}
	}
}

// sendOwed sends one batch of what p is owed: the join envelope or the
// entry, then the payload messages queued so far. It reports whether it
// sent anything, and whether our endpoint list (the join envelope or the
// full entry) failed to go: it then stays owed, since the member cannot
// expand our deltas without it, and they may go by UDP for as long as the
// list does not change (push/pull would repair it only seconds later).
func (n *Node) sendOwed(p *peer) (sent, failed bool) {
	p.mu.Lock()
	e, full, join, msgs := p.entry, p.full, p.join, p.msgs
	p.entry, p.full, p.join, p.msgs = nil, false, false, nil
	p.mu.Unlock()
	if e == nil && (join || full) {
		n.mu.Lock()
		last := n.last
		n.mu.Unlock()
		e = &last
	}
	switch {
	case join:
		failed = !n.sendReliable(&p.to, n.joinEnvelope(*e), "full")
	case e != nil && full:
		failed = !n.sendReliable(&p.to, encodeFull(*e), "full")
	case e != nil:
		n.sendReliable(&p.to, encodeDelta(*e), "delta")
	}
	if failed { // owed again: the newest entry goes with it (n.last, or one owed meanwhile)
		p.mu.Lock()
		p.join, p.full = p.join || join, p.full || !join
		p.mu.Unlock()
	}
	for _, m := range msgs {
		n.sendReliable(&p.to, m.msg, m.kind)
	}
	return e != nil || join || len(msgs) > 0, failed
}

// joinEnvelope is what a member that joined is sent: our entry e and
// every payload's state as a join's push/pull carries it. Not Local: a
// payload's Local may hand out each change once (the worker set's does),
// and it owes those to every member, which carry sends them to.
func (n *Node) joinEnvelope(e core.Entry) []byte {
	states := n.payloadSections(func(p Payload) []byte { return p.State(true) })
	return encodeEnvelope(n.cfg.NodeName, []core.Entry{e}, states...)
}

// sendReliable sends msg over TCP, counting it as kind, and reports
// whether it went.
func (n *Node) sendReliable(to *memberlist.Node, msg []byte, kind string) bool {
	if err := n.ml.SendReliable(to, msg); err != nil {
		n.met.dropped.WithLabelValues("send_error").Inc()
		return false
	}
	n.met.sent(kind, len(msg))
	return true
}

// others returns the live members but us.
func (n *Node) others() []memberlist.Node {
	return slices.DeleteFunc(n.liveMembers(), func(m memberlist.Node) bool { return m.Name == n.cfg.NodeName })
}
