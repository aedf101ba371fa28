package gossip

import (
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestJoinEnvelopeCarriesOurEntry: a member that joins while Start runs
// (its NotifyJoin comes before Start's first publication) is sent the
// join envelope with our entry in it. Before the fix Start started the
// send queues before its first publication, so such a member could be
// sent the entry we had not yet made (Node ""), and merged a replica
// named "" into its table until it was forgotten. Start's clock pauses
// before its first publication, to let a queue started early run first.
func TestJoinEnvelopeCarriesOurEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1)
		defer c.stopAll()
		r1 := c.mustStart("r1", c.seed)
		var pause atomic.Bool
		c.tweak = func(cfg *Config) {
			if cfg.NodeName != "r0" {
				return
			}
			clock := cfg.Clock
			cfg.Clock = func() time.Time {
				if pause.CompareAndSwap(true, false) {
					time.Sleep(time.Second)
				}
				return clock()
			}
		}
		c.plug = func(name string, n *Node) {
			// r1 joins r0 as r0's memberlist starts: its queue, owed
			// the join envelope, exists before Start.
			(&delegate{n: n}).NotifyJoin(&memberlist.Node{Name: "r1", Addr: net.ParseIP("10.0.0.1"), Port: 7946})
			pause.Store(true)
		}
		c.mustStart("r0", "10.0.0.2:7946")
		synctest.Wait()
		r1.node.mu.Lock()
		_, phantom := r1.node.view.Table().Get("")
		r1.node.mu.Unlock()
		if phantom {
			t.Fatal(`r1 holds an entry of a replica named "": r0's join envelope went before r0 made its entry`)
		}
		if pause.Load() {
			t.Fatal("Start never read its clock after the queue was made: the test did not pause it")
		}
	})
}
