package gossip

import (
	"errors"
	"slices"
	"time"

	"github.com/prefixring/prefixring/gossip/core"

	"github.com/hashicorp/memberlist"
)

// publish runs every interval: it refreshes membership, builds our entry,
// versions and sends it if it changed or the heartbeat is due, forgets old
// entries and rebuilds the view.
//
// Where it goes: the full entry when it fits a packet (MaxPacket), else
// the delta when it does; each UDP publication is sent Copies times, so a
// lost packet rarely leaves a peer an interval behind. A publication that
// fits no packet (a delta of many endpoints under token counts, with K)
// goes to each member's TCP queue instead, coalesced there (peers.go); so
// does the full entry when our endpoint list changed and does not fit.
//
// In the aligned view a UDP publication is sent once more at the next
// tick: it still arrives before it is due (ApplyLag > Interval + the
// delivery delay), so a receiver misses it only when all Copies+1 sends
// are lost, one of them an interval apart from the others (a burst of
// loss takes the copies sent together). Without it, a missed publication
// leaves its receiver reading the one before until the next falls due:
// an interval during which it disagrees with the others.
func (n *Node) publish(now time.Time, force bool) {
	members := n.liveMembers()
	alive := make(map[string]string, len(members))
	targets := make([]*memberlist.Node, 0, len(members))
	for i, m := range members {
		alive[m.Name] = m.Address()
		if m.Name != n.cfg.NodeName {
			targets = append(targets, &members[i])
		}
	}
	n.mu.Lock()
	if n.left.Load() {
		n.mu.Unlock()
		return
	}
	n.view.alive = alive
	// The others that share our settings are the replicas the overlay
	// view presumes placed as this one did until they publish.
	n.loads.SetMirrors(n.warnMismatches(members) - 1)
	e := n.ownEntry(now)
	// A changed entry waits PublishEvery ticks, so that a large cluster
	// keeps within PublishRate; an unchanged one the heartbeat.
	n.waited++
	due := !core.SameContent(e, n.last) && n.waited >= n.cfg.PublishEvery(len(members))
	send := force || due || now.Sub(n.lastT) >= n.cfg.Heartbeat
	listChanged := !slices.Equal(e.Endpoints, n.last.Endpoints)
	if send {
		n.ver++
		e.Version = n.ver
		n.last, n.lastT, n.waited = e, now, 0
		n.view.Publish(e) // in the shared views, our own part changes now, as the others' will on receipt
	}
	for _, node := range n.view.Table().Forget(now, n.cfg.ForgetAfter, n.cfg.NodeName) {
		n.forgetPeer(node)
	}
	n.refreshLocked(now, e) // e votes as it publishes: no second entry a tick
	n.mu.Unlock()
	if n.ml == nil { // not started; tests drive publish and receive by hand
		return
	}
	if again := n.again; again != nil {
		n.again = nil
		n.sendAll(targets, again.msg, again.kind)
	}
	if !send {
		return
	}
	msg, kind, tcp := publication(e, listChanged, n.cfg.MaxPacket)
	if tcp {
		for _, t := range targets {
			n.oweEntry(*t, e, listChanged, false)
		}
		return
	}
	for range max(n.cfg.Copies, 1) {
		n.sendAll(targets, msg, kind)
	}
	if n.cfg.View == core.ViewAligned {
		n.again = &publicationMsg{msg: msg, kind: kind}
	}
}

// publicationMsg is one encoded UDP publication.
type publicationMsg struct {
	msg  []byte
	kind string
}

// publication is how entry e goes out: the full entry when it fits
// maxPacket, else the delta when it fits and our endpoint list did not
// change (a peer expands it against the list it holds); else over TCP
// (tcp: the caller queues e for every member, full when the list changed).
func publication(e core.Entry, listChanged bool, maxPacket int) (msg []byte, kind string, tcp bool) {
	if msg := encodeFull(e); len(msg) <= maxPacket {
		return msg, "full", false
	}
	if msg := encodeDelta(e); len(msg) <= maxPacket && !listChanged {
		return msg, "delta", false
	}
	return nil, "", true
}

// queueFull queues the full entry (join: the join envelope) for member to
// over TCP. Non-blocking: memberlist's event callbacks call it.
func (n *Node) queueFull(to *memberlist.Node, join bool) {
	p := n.peerFor(*to)
	if p == nil {
		return
	}
	p.mu.Lock()
	if join {
		p.join = true
	} else {
		p.full = true
	}
	p.mu.Unlock()
	p.poke()
}

func (n *Node) sendAll(targets []*memberlist.Node, msg []byte, kind string) {
	for _, t := range targets {
		if err := n.ml.SendBestEffort(t, msg); err != nil {
			n.met.dropped.WithLabelValues("send_error").Inc()
			continue
		}
		n.met.sent(kind, len(msg))
	}
}

// broadcast sends msg to every live member but us.
func (n *Node) broadcast(msg []byte, kind string) {
	var targets []*memberlist.Node
	members := n.liveMembers()
	for i, m := range members {
		if m.Name != n.cfg.NodeName {
			targets = append(targets, &members[i])
		}
	}
	n.sendAll(targets, msg, kind)
}

// refresh rebuilds the view on a wake: a vote, or a member that joined or
// left. It reads the members as they are now, so a member that left stops
// counting at once, not at the next publication tick.
func (n *Node) refresh(now time.Time) {
	alive := n.Members()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.view.alive = alive
	n.refreshLocked(now, n.ownEntry(now))
}

// refreshLocked rebuilds whose entries count and their sum from scratch, and
// applies the verdict. n.mu must be held.
func (n *Node) refreshLocked(now time.Time, own core.Entry) {
	gone := map[string]bool{}
	for _, e := range n.view.Table().Entries() {
		// Not a member, or a member at another address: an earlier
		// process of the name, whose successor's entries will replace it.
		if addr, ok := n.view.alive[e.Node]; (!ok || addr != e.Addr) && e.Node != n.cfg.NodeName {
			gone[e.Node] = true
		}
		if n.mismatched(e.Node) { // settings changed under a live name
			gone[e.Node] = true
		}
	}
	n.view.Refresh(now, gone)
	n.applyVerdictLocked(own)
}

// applyVerdictLocked decides the endpoint set and health from our own
// observations and the counted entries, and hands a changed verdict to the
// sink, which must not block (upstream.Set rebuilds the ring on its own
// goroutine, so the gossip loop never waits for a placement).
func (n *Node) applyVerdictLocked(own core.Entry) {
	if !n.obs.discovered {
		return // nothing to vote with yet
	}
	v := core.Tally(n.view.Voters(own), n.cfg.MaxEjectionPercent)
	if n.view.applied && v.Equal(n.view.verdict) {
		return
	}
	n.view.verdict, n.view.applied = v, true
	n.sink.ApplyVerdict(v.Endpoints, v.Down)
}

// receive decodes and merges one message from a peer.
func (n *Node) receive(b []byte) {
	m, err := decode(b)
	switch {
	case errors.Is(err, errVersion):
		n.met.dropped.WithLabelValues("unknown_version").Inc()
		n.warnLimited("unknown_version", "gossip: message of another wire version refused (a replica of another build?)", "err", err)
		return
	case errors.Is(err, errUnknownKind):
		n.met.dropped.WithLabelValues("unknown_kind").Inc()
		n.warnLimited("unknown_kind", "gossip: message of an unknown kind refused", "err", err)
		return
	case err != nil:
		n.met.dropped.WithLabelValues("malformed").Inc()
		return
	}
	if m.badEntries {
		n.met.dropped.WithLabelValues("malformed_section").Inc()
		n.warnLimited("malformed_section", "gossip: a section did not decode; skipped", "tag", tagEntries, "from", m.from)
	}
	// Payloads before n.mu: merging the worker set calls its subscribers,
	// which feed the endpoint set, which reports back to this node.
	n.mergeSections(m.from, m.sections)
	if len(m.entries) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !m.expand(n.view.Table()) {
		n.met.dropped.WithLabelValues("unknown_endpoint_list").Inc()
		return
	}
	now := n.cfg.Clock()
	in := m.entries[:0]
	for _, e := range m.entries {
		switch addr, known := n.view.alive[e.Node]; {
		case e.Node == n.cfg.NodeName:
			n.supersede(e)
		case known && addr != e.Addr:
			n.met.dropped.WithLabelValues("name_conflict").Inc()
		case n.mismatched(e.Node):
			n.met.dropped.WithLabelValues("settings_mismatch").Inc()
		default:
			in = append(in, e)
		}
	}
	_, verdict := n.view.Receive(now, in...)
	if m.kind != kindEnvelope { // a delta or full entry comes from its owner
		for _, e := range in {
			// Only a peer the table holds: forgetting its entry deletes
			// its skew, and a refused one (a late copy of a forgotten
			// entry) would never be forgotten.
			if _, held := n.view.Table().Get(e.Node); held {
				n.measureSkew(e, now)
			}
		}
	}
	if verdict {
		n.applyVerdictLocked(n.ownEntry(now))
	}
}

// supersede handles an entry of our name: one newer than our last that we
// did not write is an earlier process's of this name (a restart, at this
// address or another; memberlist gave us the name, so that process is
// dead), and our entries must replace it everywhere: we take an
// incarnation above its and republish at the next tick. No clock is
// compared: a restart on a host whose clock is behind is not ordered
// behind its predecessor. n.mu must be held.
func (n *Node) supersede(e core.Entry) {
	if core.Compare(e, n.last) <= 0 {
		return
	}
	n.inc = core.NextIncarnation(n.inc, e)
	n.lastT = time.Time{} // republish at the next tick
	// At most once a minute: two live processes sharing a name (which
	// Start refuses, but a partition can hide) would raise in turn.
	n.warnLimited("supersede", "gossip: superseding an entry of this name that this process did not write (an earlier process's, or one sharing the name)",
		"addr", e.Addr, "its_incarnation", e.Incarnation, "incarnation", n.inc)
}
