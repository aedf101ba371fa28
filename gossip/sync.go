package gossip

import (
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// view is what the node derives from its state: whose entries count, their
// sum, and the verdict last applied to the balancer. The node's mu guards it.
type view struct {
	live    Liveness
	counted map[string]Entry  // entries in remote
	alive   map[string]string // memberlist's live members: name -> address
	remote  *Remote
	verdict Verdict
	applied bool // verdict was handed to the sink
}

func newView(self string, staleAfter time.Duration) view {
	return view{
		live:    Liveness{Self: self, StaleAfter: staleAfter, Gone: map[string]bool{}},
		counted: map[string]Entry{}, alive: map[string]string{}, remote: &Remote{byID: map[string]int64{}},
	}
}

// update accounts for a newly merged entry and reports whether the health
// verdict may have changed.
func (v *view) update(e Entry, now time.Time) bool {
	prev, had := v.counted[e.Node]
	counts := v.live.Counts(e, now)
	if !had && !counts {
		return false
	}
	var oldp, newp *Entry
	if had {
		oldp = &prev
		delete(v.counted, e.Node)
	}
	if counts {
		newp = &e
		v.counted[e.Node] = e
	}
	v.remote = v.remote.replace(oldp, newp)
	return had != counts || !slices.Equal(prev.Down, e.Down) || !slices.Equal(prev.Endpoints, e.Endpoints) ||
		!slices.Equal(prev.Listed, e.Listed)
}

// ownEntry builds this replica's entry from its observations, unversioned.
// n.mu must be held.
func (n *Node) ownEntry(now time.Time) Entry {
	eps := n.obs.endpoints
	if !n.obs.discovered {
		st, _ := n.bal.Status()
		for _, s := range st {
			eps = append(eps, s.ID)
		}
	}
	return NewEntry(n.cfg.NodeName, n.addr, n.inc, n.ver, now, eps, n.bal.Inflight().Counts(), n.obs.down)
}

func sameContent(a, b Entry) bool {
	return a.Incarnation == b.Incarnation && a.Left == b.Left && slices.Equal(a.Endpoints, b.Endpoints) &&
		slices.Equal(a.Counts, b.Counts) && slices.Equal(a.Down, b.Down) && slices.Equal(a.Listed, b.Listed)
}

// publish runs every interval: it refreshes membership, builds our entry,
// versions and sends it if it changed or the heartbeat is due, forgets old
// entries and rebuilds the view.
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
	e := n.ownEntry(now)
	send := force || !sameContent(e, n.last) || now.Sub(n.lastT) >= n.cfg.Heartbeat
	listChanged := !slices.Equal(e.Endpoints, n.last.Endpoints)
	if send {
		n.ver++
		e.Version = n.ver
		n.state.Merge(e)
		n.last, n.lastT = e, now
		n.loads.SetOwn(e) // in ViewShared, our own part changes now, as the others' will on receipt
	}
	n.state.Forget(now, n.cfg.ForgetAfter, n.cfg.NodeName)
	n.refreshLocked(now)
	n.mu.Unlock()
	if !send || n.ml == nil { // nil: not started; tests drive publish and receive by hand
		return
	}
	msg, kind := EncodeFull(e), "full"
	if len(msg) > n.cfg.MaxPacket {
		msg, kind = EncodeDelta(e), "delta"
		if listChanged {
			for _, t := range targets {
				n.queueFull(t)
			}
		}
	}
	n.sendAll(targets, msg, kind)
}

func (n *Node) queueFull(to *memberlist.Node) {
	select {
	case n.sendq <- to:
	default:
		n.met.dropped.WithLabelValues("send_queue_full").Inc()
	}
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

func (n *Node) refresh(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refreshLocked(now)
}

// refreshLocked rebuilds whose entries count and their sum from scratch, and
// applies the verdict. n.mu must be held.
func (n *Node) refreshLocked(now time.Time) {
	gone := map[string]bool{}
	entries := n.state.Entries()
	for _, e := range entries {
		if _, ok := n.view.alive[e.Node]; !ok && e.Node != n.cfg.NodeName {
			gone[e.Node] = true
		}
	}
	n.view.live.Gone = gone
	n.view.counted = map[string]Entry{}
	for _, e := range entries {
		if n.view.live.Counts(e, now) {
			n.view.counted[e.Node] = e
		}
	}
	n.view.remote = SumRemote(entries, n.view.live, now)
	n.loads.SetRemote(n.view.remote)
	n.applyVerdictLocked(now)
}

// applyVerdictLocked decides the endpoint set and health from our own
// observations and the counted entries, and hands a changed verdict to the
// sink, which must not block (upstream.Set rebuilds the ring on its own
// goroutine, so the gossip loop never waits for a placement).
func (n *Node) applyVerdictLocked(now time.Time) {
	if !n.obs.discovered {
		return // nothing to vote with yet
	}
	voters := []Entry{n.ownEntry(now)}
	for _, e := range n.view.counted {
		voters = append(voters, e)
	}
	v := Decide(voters)
	if n.view.applied && v.Equal(n.view.verdict) {
		return
	}
	n.view.verdict, n.view.applied = v, true
	n.sink.ApplyVerdict(v.Endpoints, v.Down)
}

// receive decodes and merges one message from a peer.
func (n *Node) receive(b []byte) {
	m, err := Decode(b)
	if err != nil {
		n.met.dropped.WithLabelValues("malformed").Inc()
		return
	}
	// Before n.mu: merging calls the set's subscribers, which feed the
	// endpoint set, which reports back to this node.
	if len(m.Workers) > 0 && n.workers != nil {
		n.workers.Merge(m.Workers)
	}
	// Sketch records before n.mu too: merging may call onCommon. Without
	// a sketch plugged we hold none, so our push/pull stays what it was.
	if n.sk != nil {
		if len(m.Sketches) > 0 {
			n.mergeSketches(m.Sketches)
		}
		if m.SketchFrom != "" {
			n.repairSketches(m.SketchFrom, m.SketchVersions)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !m.Expand(n.state) {
		n.met.dropped.WithLabelValues("unknown_endpoint_list").Inc()
		return
	}
	in := m.Entries[:0]
	for _, e := range m.Entries {
		switch addr, known := n.view.alive[e.Node]; {
		case e.Node == n.cfg.NodeName:
			// An entry of ours we did not write: an earlier incarnation at
			// our address (a restart faster than its tombstone) must be
			// superseded; one from another address is a name conflict.
			if e.Addr == n.addr && compare(e, n.last) > 0 {
				n.inc = max(n.inc, e.Incarnation) + 1
				n.lastT = time.Time{} // republish at the next tick
			}
		case known && addr != e.Addr:
			n.met.dropped.WithLabelValues("name_conflict").Inc()
		default:
			in = append(in, e)
		}
	}
	now := time.Now()
	verdict, changed := false, n.state.Merge(in...)
	for _, c := range changed {
		verdict = n.view.update(c, now) || verdict
	}
	if len(changed) > 0 {
		n.loads.SetRemote(n.view.remote)
	}
	if verdict {
		n.applyVerdictLocked(now)
	}
}
