package gossip

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/ring"
)

// Liveness is the rule that decides whose entry counts. An entry of another
// replica counts toward loads and health votes while all of these hold:
//
//   - it is not a tombstone (the replica left cleanly);
//   - its node is not in Gone: memberlist declared it dead or left, and no
//     newer entry of it arrived since;
//   - it is fresh: now - Stamp <= StaleAfter. Every replica republishes at
//     least every heartbeat, so an entry goes stale only when its owner
//     stopped (or its packets stopped arriving) for StaleAfter. Because the
//     age is read from the owner's stamp, every replica drops a silent
//     replica's counts at the same moment, up to clock skew.
//
// The replica's own entry never counts: it reads its exact live counters.
type Liveness struct {
	Self       string
	StaleAfter time.Duration
	Gone       map[string]bool
}

// Counts reports whether e counts at now.
func (l Liveness) Counts(e Entry, now time.Time) bool {
	return e.Node != l.Self && !e.Left && !l.Gone[e.Node] &&
		now.UnixMilli()-e.Stamp <= l.StaleAfter.Milliseconds()
}

// Remote is the immutable sum of the other replicas' counted entries.
type Remote struct {
	byID  map[string]int64
	total int64
}

// SumRemote adds up the entries that count under l at now.
func SumRemote(entries []Entry, l Liveness, now time.Time) *Remote {
	r := &Remote{byID: map[string]int64{}}
	for _, e := range entries {
		if !l.Counts(e, now) {
			continue
		}
		for i, id := range e.Endpoints {
			if n := e.Counts[i]; n != 0 {
				r.byID[id] += n
				r.total += n
			}
		}
	}
	return r
}

// Load returns the other replicas' requests on id.
func (r *Remote) Load(id string) int64 { return r.byID[id] }

// Total returns the other replicas' requests on all endpoints.
func (r *Remote) Total() int64 { return r.total }

// ClusterLoads is the cluster-wide load the bound reads: this replica's exact
// live counters plus the latest counted entries of the others. Reads take no
// lock and allocate nothing; the remote part is swapped in whole.
type ClusterLoads struct {
	local  ring.Loads
	remote atomic.Pointer[Remote]
}

// NewClusterLoads returns local plus nothing, until [ClusterLoads.SetRemote].
func NewClusterLoads(local ring.Loads) *ClusterLoads {
	c := &ClusterLoads{local: local}
	c.remote.Store(&Remote{byID: map[string]int64{}})
	return c
}

// SetRemote swaps in a new sum of the other replicas' counts.
func (c *ClusterLoads) SetRemote(r *Remote) { c.remote.Store(r) }

// Remote returns the current remote sum.
func (c *ClusterLoads) Remote() *Remote { return c.remote.Load() }

// Load implements [ring.Loads].
func (c *ClusterLoads) Load(id string) int64 { return c.local.Load(id) + c.remote.Load().byID[id] }

// Total implements [ring.Loads].
func (c *ClusterLoads) Total() int64 { return c.local.Total() + c.remote.Load().total }

// Verdict is the endpoint set and health every replica computes the same way
// from the same entries.
type Verdict struct {
	// Endpoints are listed by a strict majority of the voters, sorted.
	Endpoints []string `json:"endpoints"`
	// Down are the endpoints of Endpoints that a strict majority of the
	// voters listing them see down, sorted.
	Down []string `json:"down"`
}

// Decide combines the voters' observations. Voters are this replica's own
// entry and the entries that count under [Liveness]; tombstones and entries
// with no endpoints (a replica that has not discovered any yet) do not vote.
// A tie keeps an endpoint in, and healthy: a replica whose own probes fail
// alone (a one-sided network fault) does not take an endpoint away from the
// others, and two replicas that disagree fail open.
func Decide(voters []Entry) Verdict {
	listed, down := map[string]int{}, map[string]int{}
	n := 0
	for _, e := range voters {
		if e.Left || len(e.Endpoints) == 0 {
			continue
		}
		n++
		for i, id := range e.Endpoints {
			listed[id]++
			if e.Down[i] {
				down[id]++
			}
		}
	}
	var v Verdict
	for id, k := range listed {
		if 2*k > n {
			v.Endpoints = append(v.Endpoints, id)
			if 2*down[id] > k {
				v.Down = append(v.Down, id)
			}
		}
	}
	slices.Sort(v.Endpoints)
	slices.Sort(v.Down)
	return v
}

// replace returns r with old's counts taken out and new's added; either may
// be nil. r is not modified.
func (r *Remote) replace(old, new *Entry) *Remote {
	out := &Remote{byID: make(map[string]int64, len(r.byID)), total: r.total}
	for id, n := range r.byID {
		out.byID[id] = n
	}
	for sign, e := range map[int64]*Entry{-1: old, 1: new} {
		if e == nil {
			continue
		}
		for i, id := range e.Endpoints {
			out.byID[id] += sign * e.Counts[i]
			out.total += sign * e.Counts[i]
		}
	}
	return out
}
