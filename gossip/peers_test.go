package gossip

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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

// refusingDials is a transport whose dials fail while refuse is set: a
// member's TCP port briefly unreachable (a restarting sidecar, a network
// blip too short for the failure detector).
type refusingDials struct {
	memberlist.NodeAwareTransport
	refuse *atomic.Bool
}

func (r refusingDials) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if r.refuse.Load() {
		return nil, errors.New("refused")
	}
	return r.NodeAwareTransport.DialAddressTimeout(a, timeout)
}

// TestFullEntryIsOwedAgainAfterAFailedSend: an entry too large for a
// packet goes over TCP with its endpoint list when the list changes, and
// as deltas naming the list after that; a member whose TCP send of the
// list failed cannot expand those deltas. The list stays owed and is sent
// again: the member counts the replica's new leases within a heartbeat,
// not at the next push/pull (here a minute; 5 s by default), and not
// after the entry it holds went stale.
func TestFullEntryIsOwedAgainAfterAFailedSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var refuse atomic.Bool
		c := newCluster(t, 8)
		c.tweak = func(cfg *Config) {
			cfg.MaxPacket, cfg.PushPull = 256, time.Minute
			if cfg.NodeName == "r0" {
				cfg.Transport = refusingDials{cfg.Transport, &refuse}
			}
		}
		defer c.stopAll()
		c.startAgreed(2)
		r0, r1 := c.reps["r0"], c.reps["r1"]
		eps := slices.Clone(testEndpoints)
		for i := range 12 {
			eps = append(eps, fmt.Sprintf("http://10.9.1.%d:8000", i))
		}
		time.Sleep(time.Second) // the join envelopes are sent
		sendErrors := func() float64 { return counterValue(r0.node.met.dropped.WithLabelValues("send_error")) }
		before := sendErrors()
		refuse.Store(true)
		r0.node.voteEndpoints(eps) // the list changes: the full entry goes over TCP, and fails
		time.Sleep(100 * time.Millisecond)
		refuse.Store(false)
		if n := sendErrors() - before; n != 1 {
			t.Fatalf("%v sends failed, want the full entry's alone", n)
		}
		r0.node.mu.Lock()
		full, delta := len(encodeFull(r0.node.last)), len(encodeDelta(r0.node.last))
		r0.node.mu.Unlock()
		if full <= 256 || delta > 256 {
			t.Fatalf("full entry %d B, delta %d B: want the full over a packet, the delta within", full, delta)
		}
		r0.hold(t, 7)
		start := time.Now()
		for r1.node.Loads().Total() != 1 {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("r1 does not count r0's lease %v after its list failed to send (dropped deltas: %v)", time.Since(start),
					counterValue(r1.node.met.dropped.WithLabelValues("unknown_endpoint_list")))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
