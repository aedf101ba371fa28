package router

import (
	"context"
	"fmt"
	"strings"
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
	gc.Settings = SettingsSummary(r.cfg)
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
		// A replica whose settings differ keys otherwise: its summaries
		// are left out with its counts.
		r.share = prefix.NewShare(r.keying, prefix.ShareConfig{Name: n.Name(), Members: n.MatchingMembers,
			OnCommon: r.keying.SetCommon, ForgetAfter: gc.ForgetAfter})
		if err := n.Carry(r.share); err != nil {
			return err
		}
		shareMetrics(r.reg, r.share)
	}
	if p := r.balancer.Pace(); p != nil {
		// Every replica judges an engine's pace by all replicas' answers.
		r.paceShare = newPaceShare(p, n.Name(), n.MatchingMembers, time.Now)
		if err := n.Carry(r.paceShare); err != nil {
			return err
		}
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

// debugCluster serves /debug/cluster, registered only with gossip on.
func (r *Replica) debugCluster() any {
	return clusterStatus{ClusterStatus: r.node.Status(), Insecure: r.cfg.GossipInsecure && r.cfg.Gossip.Key == nil}
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
	return r.settingsMismatch()
}

// unready says why /readyz must fail, or "": with --gossip-strict-settings,
// a settings mismatch.
func (r *Replica) unready() string {
	if !r.cfg.GossipStrictSettings {
		return ""
	}
	return r.settingsMismatch()
}

// settingsMismatch describes the live members whose settings differ, or "".
func (r *Replica) settingsMismatch() string {
	if r.node == nil {
		return ""
	}
	ms := r.node.SettingsMismatch()
	if len(ms) == 0 {
		return ""
	}
	peers := make([]string, len(ms))
	for i, m := range ms {
		peers[i] = m.Peer
	}
	return fmt.Sprintf("gossip settings differ from %d peer(s) (%s): their counts and votes are refused, see /debug/cluster; routing on this replica's own counts and its matching peers'",
		len(ms), strings.Join(peers, ", "))
}

// SettingsSummary is what every replica of a gossip cluster must share,
// one canonical line: what a count means (the load's unit, the KV
// accounting), where a key goes (the key's windows, the sketch, the
// session header, the policy, the ring's placement) and how the bound
// reads the counts (load factor, floors, group spread). Replicas compare
// its digest and refuse each other's counts when it differs (see
// gossip.Config.Settings). Timeouts, listeners, health checks and the
// like are per replica and left out. A new setting of that kind must be
// added here (TestSettingsSummaryNamesWhatMustMatch).
func SettingsSummary(c Config) string {
	fanout := 0
	if c.Sketch.Enabled {
		fanout = c.Sketch.Fanout
	}
	p := c.Ring.Placement
	return fmt.Sprintf("policy=%s load-signal=%s load-factor=%g min-bound=%d group-spread=%g group-memory=%g placement=%d/%d/%g "+
		"kv-average=%t kv-min-bound=%d kv-capacity-factor=%g kv-load-factor=%g kv-scrape=%t kv-capacity=%s "+
		"prefix-chars=%d prompt-chars=%d shared-chars=%d sketch=%t sketch-fanout=%d session-header=%q",
		c.Policy, c.Ring.Signal, c.Ring.LoadFactor, c.Ring.MinBound, c.Ring.GroupSpread, c.Ring.GroupMemory, p.Partitions, p.Replicas, p.Load,
		c.Ring.KVAverage, c.Ring.KVMinBound, c.Ring.KVCapacityFactor, c.Ring.KVLoadFactor, c.KV.Scrape, c.KV.Capacity,
		c.Key.MaxChars, c.Key.PromptChars, c.Key.SharedChars, c.Sketch.Enabled, fanout, c.Proxy.SessionHeader)
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

// LeaveTimeout bounds a clean leave at shutdown: how long the node waits
// for its leave to spread, whatever its peers do (gossip's
// TestLeaveIsBoundedByItsTimeoutWhenPeersAreBlackHoled). A Deployment's
// grace period must cover it after the drain (deploy's checkDrain).
const LeaveTimeout = 5 * time.Second

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
	if err := r.node.Leave(LeaveTimeout); err != nil {
		r.log.Warn("gossip leave", "err", err)
	}
}
