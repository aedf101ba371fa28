package upstream

import (
	"context"
	"slices"
	"time"
)

// Request evidence, for the cluster's verdict under gossip. One replica's
// failed probes are one vote: a replica with a bad network path fails them
// alone. But the requests a failing engine fails are often seen by one
// replica at a time (light load, or affinity sending a key's requests
// through few replicas), so the vote also says which endpoints this
// replica holds out for failed requests and which answered its requests
// lately: an endpoint that fails one replica's requests is out
// cluster-wide unless a replica it answered vouches for it (see
// gossip/core.Tally).

// servedAt reports whether the endpoint answered a request within window
// before now and the checks hold it in.
func (c *check) servedAt(now time.Time, window time.Duration) bool {
	return c != nil && !c.ejected && !c.lastOK.IsZero() && now.Sub(c.lastOK) < window
}

// evidenceLocked lists the observed endpoints held out for failed requests
// and those that answered a request within ServedWindow.
func (s *Set) evidenceLocked(observed map[string]bool, now time.Time) (failing, served []string) {
	for id, c := range s.checks {
		switch {
		case !observed[id]:
		case c.ejected && c.byRequests:
			failing = append(failing, id)
		case c.servedAt(now, s.cfg.ServedWindow):
			served = append(served, id)
		}
	}
	slices.Sort(failing)
	slices.Sort(served)
	return failing, served
}

// servedLoop rebuilds the snapshot when an endpoint's last answer grows
// older than ServedWindow, so the arbiter hears that this replica no
// longer vouches for it. (A first answer rebuilds at once, in
// ObserveSuccess.)
func (s *Set) servedLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ServedWindow / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.now()
		s.mu.Lock()
		expired := slices.ContainsFunc(s.snap.Load().served, func(id string) bool {
			return !s.checks[id].servedAt(now, s.cfg.ServedWindow)
		})
		if expired {
			s.rebuildLocked()
			continue
		}
		s.mu.Unlock()
	}
}
