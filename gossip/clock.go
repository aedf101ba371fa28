package gossip

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/gossip/core"
)

// peerClocks are the peers' clock skews, as this replica measures them:
// its clock at the receipt of a peer's own publication (a delta or a full
// entry, which only the owner sends) minus the publication's stamp. That
// includes one network delay, milliseconds; a relayed entry (push/pull)
// is not measured, as it may be seconds old. No entry is aged by a peer's
// clock (see core.Liveness), so a skew changes nothing in routing; it is
// reported because it breaks what else reads clocks (logs, traces,
// leases) and because a skew past StaleAfter used to hide the peer
// silently (when entries were aged by their owner's stamp). The node's mu guards it.
type peerClocks struct {
	skew   map[string]time.Duration
	warned map[string]bool // logged past the limit, until it comes back within
}

func newPeerClocks() peerClocks {
	return peerClocks{skew: map[string]time.Duration{}, warned: map[string]bool{}}
}

// measureSkew records the skew of e's owner from its own publication,
// received at now, and logs once when it goes past StaleAfter (again only
// after it came back within). n.mu must be held.
func (n *Node) measureSkew(e core.Entry, now time.Time) {
	skew := time.Duration(now.UnixMilli()-e.Stamp) * time.Millisecond
	n.clocks.skew[e.Node] = skew
	past := skew > n.cfg.StaleAfter || -skew > n.cfg.StaleAfter
	switch {
	case past && !n.clocks.warned[e.Node]:
		n.clocks.warned[e.Node] = true
		n.log.Warn("gossip: a peer's clock differs from this replica's by more than stale-after; it is still counted (entries age by the receiver's clock), but fix its time sync",
			"peer", e.Node, "addr", e.Addr, "skew", skew.Round(time.Millisecond), "stale_after", n.cfg.StaleAfter)
	case !past && n.clocks.warned[e.Node]:
		delete(n.clocks.warned, e.Node)
		n.log.Info("gossip: a peer's clock is back within stale-after of this replica's", "peer", e.Node, "skew", skew.Round(time.Millisecond))
	}
}

// forgetPeer drops what is kept of a peer whose entry was forgotten.
// n.mu must be held.
func (n *Node) forgetPeer(node string) {
	delete(n.clocks.skew, node)
	delete(n.clocks.warned, node)
}

var skewDesc = prometheus.NewDesc("prefixring_gossip_clock_skew_seconds",
	"This replica's clock minus each peer's (positive: the peer is behind), measured on the peer's own publications; it includes one network delay. Entries age by the receiver's clock, so a skew does not hide a peer; one past --gossip-stale-after is also logged.",
	[]string{"peer"}, nil)

// skewCollector reports the skews at scrape time, one series per peer held.
type skewCollector struct{ n *Node }

func (c skewCollector) Describe(ch chan<- *prometheus.Desc) { ch <- skewDesc }

func (c skewCollector) Collect(ch chan<- prometheus.Metric) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	for peer, d := range c.n.clocks.skew {
		ch <- prometheus.MustNewConstMetric(skewDesc, prometheus.GaugeValue, d.Seconds(), peer)
	}
}
