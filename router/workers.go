package router

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

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
	if err := set.SetPolicy(r.cfg.Workers.Policy); err != nil {
		return nil, err
	}
	dropped := func(reason func(workers.Dropped) uint64) func() float64 {
		return func() float64 { return float64(reason(set.Dropped())) }
	}
	const help = "Workers-set ops heard from peers and not applied, by reason: invalid (the URL policy refused it, or its record did not decode), over_cap (an add past --max-workers: held, not routed, until a removal makes room) or future (stamped more than an hour past this replica's clock)."
	for reason, f := range map[string]func(workers.Dropped) uint64{
		"invalid":  func(d workers.Dropped) uint64 { return d.Invalid },
		"over_cap": func(d workers.Dropped) uint64 { return d.OverCap },
		"future":   func(d workers.Dropped) uint64 { return d.Future },
	} {
		if err := r.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "prefixring_workers_dropped_ops_total", Help: help, ConstLabels: prometheus.Labels{"reason": reason},
		}, dropped(f))); err != nil {
			return nil, err
		}
	}
	// Changes arrive from the API and from gossip at once. Each call reads
	// the members, then sets them: two at once could set the older reading
	// last, and route without a worker until the next change. So one call
	// applies at a time, and re-reads the members if another change came
	// meanwhile; that other call returns without waiting.
	var (
		mu                sync.Mutex
		applying, pending bool
	)
	set.OnChange(func(local bool) {
		mu.Lock()
		pending = true
		if applying {
			mu.Unlock()
			return
		}
		applying = true
		for pending {
			pending = false
			mu.Unlock()
			members := set.Members()
			if err := r.endpoints.SetSource("workers", members); err != nil {
				r.log.Warn("registered workers not applied", "err", err)
			} else {
				r.log.Info("registered workers changed", "workers", len(members), "here", local)
			}
			mu.Lock()
		}
		applying = false
		mu.Unlock()
	})
	if r.node != nil {
		if err := r.node.Carry(workers.NewShare(set)); err != nil {
			return nil, err
		}
	}
	if r.cfg.Workers.Token == "" {
		r.log.Info("workers API without a token: it answers direct local callers only (loopback, no forwarding header; on the API listener Host: dstack, as dstack calls it)")
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
	return &proxy.WorkersAPI{Registry: registry{set}, Status: status, Token: r.cfg.Workers.Token}, nil
}

// registry is the set as the workers API sees it: every worker registered,
// those held out past --max-workers included (not routed, so not healthy),
// so that a registrar sees them and can remove them.
type registry struct{ *workers.Set }

func (r registry) Members() []string { return r.Registered() }
