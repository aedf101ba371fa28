package router

import (
	"context"
	"time"

	"github.com/prefixring/prefixring/gossip"
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
	n, err := gossip.New(gc, r.balancer, r.reg, r.log)
	if err != nil {
		return err
	}
	r.endpoints.SetArbiter(n)
	if r.keying.Sketching() {
		// Every replica keys with the union of the published summaries.
		n.ShareSketch(r.keying, r.keying.SetCommon)
	}
	r.node = n
	return nil
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
