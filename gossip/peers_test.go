package gossip

import (
	"net"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/prefixring/prefixring/gossip/core"
)

// queuedFor reports whether member name has a send queue, and whether
// it is to addr.
func queuedFor(n *Node, name, addr string) (held, at bool) {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	p := n.peers[name]
	return p != nil, p != nil && p.to.Address() == addr
}

// TestNoSendQueueForADepartedMember: publish and a payload's broadcast
// send to the members they listed a moment before; a member that left in
// between (NotifyLeave, which drops its queue) must not get a new queue
// (in a started node a goroutine) that nothing would ever drop: with
// replicas named afresh by every rollout, one leaked for each. Nor may a
// listing of a member that has since come back at another address replace
// its new queue with one to the dead address.
func TestNoSendQueueForADepartedMember(t *testing.T) {
	n := offlineNode(t, "r0", "10.0.0.1:7946", core.ViewShared, map[string]string{"r1": "10.0.0.2:7946"})
	listed := n.others() // what publish or carry read
	gone := listed[0]
	n.setMember(&gone, false) // r1 leaves meanwhile
	n.oweEntry(gone, n.last, true, false)
	n.queueMsg(gone, []byte("op"), "payload")
	if held, _ := queuedFor(n, "r1", ""); held {
		t.Fatal("a send queue was made for a member that had left")
	}

	// r1 restarts at another address; a listing from before still names
	// the old one.
	moved := memberlist.Node{Name: "r1", Addr: net.ParseIP("10.0.0.9"), Port: 7946}
	n.setMember(&moved, true)
	n.queueFull(&moved, true) // NotifyJoin: the join envelope is owed
	n.oweEntry(gone, n.last, false, false)
	if _, at := queuedFor(n, "r1", moved.Address()); !at {
		t.Fatal("a stale listing replaced the queue of the member at its new address")
	}
}
