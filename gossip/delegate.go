package gossip

import (
	"bytes"

	"github.com/hashicorp/memberlist"
)

// delegate receives memberlist's callbacks. None of them blocks: messages
// are copied onto the node's bounded inbox (dropped and counted when it is
// full; the next delta or push/pull repairs the loss), and membership
// changes only wake the merge loop, which reads membership itself.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

// NodeMeta carries our wire version, for debugging mixed-version
// clusters, and our settings (see settings.go).
func (d *delegate) NodeMeta(limit int) []byte { return d.n.meta[:min(len(d.n.meta), limit)] }

// NotifyMsg receives a peer's delta, full entry or envelope.
func (d *delegate) NotifyMsg(b []byte) {
	d.n.met.received(kindName(b), len(b))
	d.enqueue(b)
}

func (d *delegate) enqueue(b []byte) {
	select {
	case d.n.inbox <- bytes.Clone(b):
	default:
		d.n.met.dropped.WithLabelValues("inbox_full").Inc()
	}
}

// GetBroadcasts returns nothing: entries go to every member directly (see
// DESIGN.md, "Why not piggyback on memberlist's gossip").
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns every entry we hold and every payload's state, for
// push/pull anti-entropy.
func (d *delegate) LocalState(join bool) []byte {
	d.n.mu.Lock()
	entries := d.n.view.Table().Entries()
	d.n.mu.Unlock()
	states := d.n.payloadSections(func(p Payload) []byte { return p.State(join) })
	b := encodeEnvelope(d.n.cfg.NodeName, entries, states...)
	d.n.met.sent("pushpull", len(b))
	return b
}

// MergeRemoteState queues a peer's full state like any message.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	d.n.met.received("pushpull", len(buf))
	d.enqueue(buf)
}

// NotifyJoin sends the newcomer our full entry, so it can expand our deltas
// before the next push/pull, and every payload's state (joinEnvelope). memberlist holds its node lock here: no calls
// back into it, only non-blocking hand-offs.
func (d *delegate) NotifyJoin(node *memberlist.Node) {
	d.n.setMember(node, true)
	if node.Name != d.n.cfg.NodeName {
		c := *node
		d.n.queueFull(&c, true)
	}
	d.n.wake()
}

// NotifyLeave: the loop rebuilds the view without the departed member.
func (d *delegate) NotifyLeave(node *memberlist.Node) {
	d.n.setMember(node, false)
	d.n.wake()
}

// NotifyUpdate keeps our copy of the member current.
func (d *delegate) NotifyUpdate(node *memberlist.Node) { d.n.setMember(node, true) }

// NotifyConflict is called when a member claims a name already taken at
// another address. If the name is ours, [Node.Start] fails.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.n.met.conflicts.Inc()
	if existing.Name == d.n.cfg.NodeName {
		addr := other.Address()
		d.n.conflict.Store(&addr)
	}
	d.n.log.Error("gossip: two members share a name; the later one is ignored",
		"name", existing.Name, "existing", existing.Address(), "other", other.Address())
}

func kindName(b []byte) string {
	if len(b) >= 2 {
		switch b[1] {
		case kindDelta:
			return "delta"
		case kindFull:
			return "full"
		case kindEnvelope:
			return "payload"
		}
	}
	return "other"
}
