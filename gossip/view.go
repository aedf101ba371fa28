package gossip

import (
	"time"

	"github.com/prefixring/prefixring/gossip/core"
)

// view is what the node derives from the entries it holds: the core view
// (whose entries count, and their sum, fed to the balancer's loads), the
// live members memberlist lists, and the verdict last handed to the sink.
// The node's mu guards it.
type view struct {
	*core.View
	alive   map[string]string // memberlist's live members: name -> address
	verdict core.Verdict
	applied bool // verdict was handed to the sink
}

func newView(cfg Config, loads *core.ClusterLoads) view {
	return view{View: core.NewModeView(cfg.NodeName, cfg.StaleAfter, cfg.ApplyLag, loads), alive: map[string]string{}}
}

// ownEntry builds this replica's entry from its observations, unversioned.
// n.mu must be held.
func (n *Node) ownEntry(now time.Time) core.Entry {
	eps := n.obs.endpoints
	if !n.obs.discovered {
		st, _ := n.bal.Status()
		for _, s := range st {
			eps = append(eps, s.ID)
		}
	}
	return core.NewEntryKV(n.cfg.NodeName, n.addr, n.inc, n.ver, now, eps, n.bal.Inflight().Counts(), n.bal.Inflight().KVCounts(), n.obs.down).
		WithKVShared(n.bal.Inflight().KVSharedCounts()).WithRequestEvidence(n.obs.failing, n.obs.served)
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
