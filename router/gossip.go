package router

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/prefixring/prefixring/gossip"
	"github.com/prefixring/prefixring/prefix"
)

// startGossip builds the gossip node, when gossip is on, between the
// endpoint set and the balancer: the set reports this replica's
// observations to the node, and the node hands the cluster's verdict back
// to the set, which applies it off the gossip loop.
func (r *Replica) startGossip() error {
	if r.cfg.Gossip == nil {
		return nil
	}
	gc := *r.cfg.Gossip
	gc.Sink = r.endpoints
	// The cluster caps its ejections as each replica caps its own.
	gc.MaxEjectionPercent = r.cfg.Health.MaxEjectionPercent
	n, err := gossip.New(gc, r.balancer, r.reg, r.log)
	if err != nil {
		return err
	}
	r.endpoints.SetArbiter(n)
	insecure := prometheus.NewGauge(prometheus.GaugeOpts{Name: "prefixring_gossip_insecure",
		Help: "1 when gossip runs without a key (--gossip-insecure): any process reaching the gossip port can steer routing."})
	if r.cfg.GossipInsecure && gc.Key == nil {
		insecure.Set(1)
		r.log.Warn("gossip runs WITHOUT a key (--gossip-insecure): any process that reaches the gossip port can join and steer routing; use --gossip-key outside local experiments", "bind", gc.BindAddr)
	}
	r.reg.MustRegister(insecure)
	if r.keying.Sketching() {
		// Every replica keys with the union of the published summaries.
		r.share = prefix.NewShare(r.keying, prefix.ShareConfig{Name: n.Name(), Members: n.Members,
			OnCommon: r.keying.SetCommon, ForgetAfter: gc.ForgetAfter})
		if err := n.Carry(r.share); err != nil {
			return err
		}
		shareMetrics(r.reg, r.share)
	}
	r.node = n
	return nil
}

// clusterStatus is /debug/cluster: the node's view of the cluster, and
// whether gossip runs without a key.
type clusterStatus struct {
	gossip.ClusterStatus
	Insecure bool `json:"insecure"`
}

func (r *Replica) debugCluster() any {
	return clusterStatus{ClusterStatus: r.node.Status(), Insecure: r.node != nil && r.cfg.GossipInsecure && r.cfg.Gossip.Key == nil}
}

// shareMetrics registers the shared-prefix sketch's figures.
func shareMetrics(reg prometheus.Registerer, s *prefix.Share) {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "prefixring_gossip_sketch_common_prefixes",
		Help: "Prefixes in the shared-prefix table merged from the published sketch summaries.",
	}, func() float64 { return float64(s.Stats().Prefixes) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "prefixring_gossip_sketch_summaries",
		Help: "Published sketch summaries the shared-prefix table is merged from, this replica's included.",
	}, func() float64 { return float64(s.Stats().Summaries) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "prefixring_gossip_sketch_name_conflicts_total",
		Help: "Sketch records dropped because a live member holds their replica's name at another address.",
	}, func() float64 { return float64(s.Stats().NameConflicts) })
}

// degraded says why the replica routes less well than it should, or "".
func (r *Replica) degraded() string {
	if r.node != nil && r.node.Isolated() {
		return "gossip isolated: discovery names other replicas but none accepted this one (check --gossip-key); routing on this replica's own counts"
	}
	return ""
}

// join joins the cluster; a no-op with gossip off.
func (r *Replica) join(ctx context.Context) error {
	if r.node == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.node.Start(ctx); err != nil {
		return err
	}
	r.log.Info("gossip started", "node", r.node.Name())
	return nil
}

// closeNode stops the gossip node: leaving the cluster cleanly, so peers
// drop this replica's counts at once rather than after the failure
// detector or staleness notices, or (leave false) as a crash would.
func (r *Replica) closeNode(leave bool) {
	if r.node == nil {
		return
	}
	if !leave {
		_ = r.node.Close()
		return
	}
	if err := r.node.Leave(5 * time.Second); err != nil {
		r.log.Warn("gossip leave", "err", err)
	}
}
