package router

import (
	"github.com/prefixring/prefixring/proxy"
	"github.com/prefixring/prefixring/upstream"
	"github.com/prefixring/prefixring/workers"
)

// workersAPI builds the registered-worker set (shared by gossip when it is
// on) and the API that writes it, or nil with the API off. The set's
// members are the endpoint source "workers".
func (r *Replica) workersAPI() (*proxy.WorkersAPI, error) {
	if r.cfg.Workers.Mode == WorkersOff {
		return nil, nil
	}
	set := workers.NewSet(r.hostname(), nil, 0)
	set.OnChange(func(local bool) {
		members := set.Members()
		if err := r.endpoints.SetSource("workers", members); err != nil {
			r.log.Warn("registered workers not applied", "err", err)
			return
		}
		r.log.Info("registered workers changed", "workers", len(members), "here", local)
	})
	if r.node != nil {
		if err := r.node.Carry(workers.NewShare(set)); err != nil {
			return nil, err
		}
	}
	if r.cfg.Workers.Token == "" {
		r.log.Info("workers API without a token: it answers loopback clients only")
	}
	r.workers = set
	status := func(u string) (bool, int64) {
		ep, _, err := upstream.ParseEndpoint(u)
		if err != nil {
			return false, 0
		}
		st, ok := r.endpoints.Snapshot().Get(ep.ID)
		return ok && st.Healthy, r.balancer.Inflight().Load(ep.ID)
	}
	return &proxy.WorkersAPI{Registry: set, Status: status, Token: r.cfg.Workers.Token}, nil
}
