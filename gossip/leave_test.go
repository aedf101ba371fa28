package gossip

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/prefixring/prefixring/gossip/core"
)

// TestDepartedMemberStopsCountingAtOnce: memberlist's NotifyLeave wakes
// the loop, which rebuilds whose entries count from the members as they
// are then, not as the last publication tick saw them: a replica that
// left or died stops counting at once, not an interval later
// (--gossip-interval may be up to the heartbeat, 1 s).
func TestDepartedMemberStopsCountingAtOnce(t *testing.T) {
	ep := testEndpoints[0]
	n := offlineNode(t, "r0", "10.0.0.1:7946", core.ViewShared, map[string]string{"r1": "10.0.0.2:7946"})
	now := time.Now()
	n.receive(encodeFull(core.NewEntry("r1", "10.0.0.2:7946", 1, 1, now, testEndpoints, map[string]int64{ep: 3}, nil)))
	if got := n.Loads().Load(ep); got != 3 {
		t.Fatalf("r1's load on %s reads %d, want 3", ep, got)
	}
	r1 := memberlist.Node{Name: "r1", Addr: net.ParseIP("10.0.0.2"), Port: 7946}
	(&delegate{n: n}).NotifyLeave(&r1)
	n.refresh(n.cfg.Clock()) // what the loop does on the wake
	if got := n.Loads().Load(ep); got != 0 {
		t.Fatalf("after r1 left, its load on %s still reads %d", ep, got)
	}
}
