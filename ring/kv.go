package ring

import "math"

// K: the prompt tokens an endpoint's engine holds in its KV cache for the
// requests in flight there, counted from the pick until the request ends
// (P, the load, counts a prompt only until its first token). A recurring
// group's shared prefix is counted once per endpoint while any request of
// the group is in flight there, since the engine holds it once. A home, or
// a candidate on the walk, takes a request only if both P's bound and K's
// hold; K's bound is the engine's KV capacity where known
// ([Endpoint.KVCapacity]), else, with [Config.KVAverage], c·average as for
// P (see [Config.KVMinBound]).

// GroupHolder reports whether a replica holds a request of group in
// flight on endpoint id, so that a group's shared prefix is weighed once
// per endpoint. [Inflight] implements it for this replica's own requests.
type GroupHolder interface {
	HoldsGroup(id string, group uint64) bool
}

// kvState is what a pick reads of K; the zero value bounds nothing.
type kvState struct {
	loads  Loads       // K per endpoint; nil: K is not bounded
	cap    []int64     // KV capacity in tokens by ring index (nil or 0: unknown)
	groups GroupHolder // nil: no group is held anywhere
	bound  Bound       // c·average, for endpoints of unknown capacity
	// average applies bound; else an unknown capacity bounds nothing
	average bool
	// capFactor bounds K on an endpoint of known capacity (see
	// [KVCapacityBound]).
	capFactor float64
	// capTotal is the healthy endpoints' capacity when every one's is
	// known, else 0; with it an endpoint may also fill to capLoad times
	// the fleet's share of K that its capacity gives it (see
	// [Config.KVLoadFactor]).
	capTotal int64
	capLoad  float64
}

// fits reports whether endpoint i may hold a request of K weights pw of
// group besides what it holds: an idle endpoint always may (the request
// has to go somewhere); one of known capacity while K stays within
// KVCapacityFactor times it, or within KVLoadFactor times its share of the
// fleet's K (capacities known everywhere);
// others while K stays within max(ceil(c·(total+w)/n), Min, 2w).
func (k *kvState) fits(r *Ring, i, n int, pw *weights, group uint64) bool {
	if k.loads == nil || (!k.average && len(k.cap) == 0) {
		return true
	}
	id := r.ids[i]
	held := k.loads.Load(id)
	if held <= 0 {
		return true
	}
	w := pw.kv
	if pw.kvShared > 0 && (k.groups == nil || !k.groups.HoldsGroup(id, group)) {
		w += pw.kvShared
	}
	w = max(w, 1)
	if i < len(k.cap) && k.cap[i] > 0 {
		limit := KVCapacityBound(k.capFactor, k.cap[i])
		if k.capTotal > 0 && k.capLoad > 0 {
			share := float64(k.cap[i]) / float64(k.capTotal)
			limit = max(limit, int64(math.Ceil(k.capLoad*float64(k.loads.Total()+w)*share)))
		}
		return held+w <= limit
	}
	return !k.average || held+w <= k.bound.Limit(k.loads.Total(), w, n)
}

// KV returns the view of this replica's K counters: [Loads] in prompt
// tokens held in KV cache (see the package's K). It is also a
// [SharedLoads].
func (f *Inflight) KV() Loads { return kvView{f} }

// SharedLoads is what a view of K reports of the groups' shared parts
// within it: a cluster-wide view counts a group's shared part once
// however many replicas hold the group on an endpoint, so it reads each
// replica's shared part apart from the rest of its K.
type SharedLoads interface {
	// Shared returns the shared parts within Load(id): each group's once.
	Shared(id string) int64
	// SharedTotal returns the shared parts within Total().
	SharedTotal() int64
}

type kvView struct{ f *Inflight }

// SharedTotal is O(1), as Total is: the average bound reads it on every
// candidate of a pick.
func (v kvView) SharedTotal() int64 { return v.f.sharedTotal.Load() }

func (v kvView) Shared(id string) int64 {
	if c := (*v.f.counters.Load())[id]; c != nil {
		return c.shared.Load()
	}
	return 0
}

func (v kvView) Load(id string) int64 {
	if c := (*v.f.counters.Load())[id]; c != nil {
		return c.kv.Load()
	}
	return 0
}

func (v kvView) Total() int64 { return v.f.kvTotal.Load() }

// KVCounts returns a copy of the non-zero K counts, for gossip and
// debugging.
func (f *Inflight) KVCounts() map[string]int64 {
	return f.nonZero(func(c *counter) int64 { return c.kv.Load() })
}

// KVSharedCounts returns a copy of the non-zero shared parts within the K
// counts ([Inflight.KVCounts]): per endpoint, the shared part of each
// group this replica holds a request of there, once. Gossip publishes it
// beside K so that the cluster counts a group's shared part once.
func (f *Inflight) KVSharedCounts() map[string]int64 {
	return f.nonZero(func(c *counter) int64 { return c.shared.Load() })
}

// HoldsGroup reports whether a request of group is in flight on id.
func (f *Inflight) HoldsGroup(id string, group uint64) bool {
	c := (*f.counters.Load())[id]
	if c == nil || group == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.groups[group]
	return held
}

// addKV counts a request's K on c: its own part, and its group's shared
// part if no other request of the group is in flight there.
func (c *counter) addKV(own int64, group uint64, shared int64) {
	if group != 0 && shared > 0 {
		c.mu.Lock()
		if c.groups == nil {
			c.groups = map[uint64]groupCount{}
		}
		g, held := c.groups[group]
		if !held {
			// The first of the group here: the engine now holds the part,
			// at this request's estimate, until the group's last leaves.
			g.shared = shared
			own += shared
			c.shared.Add(shared)
			c.sharedTotal.Add(shared)
		}
		g.reqs++
		c.groups[group] = g
		c.mu.Unlock()
	}
	c.kv.Add(own)
	c.kvTotal.Add(own)
}

// releaseKV undoes addKV. The group's last request to leave removes the
// shared part that was added, whatever its own estimate of it.
func (c *counter) releaseKV(own int64, group uint64, shared int64) {
	if group != 0 && shared > 0 {
		c.mu.Lock()
		if g, held := c.groups[group]; held {
			if g.reqs--; g.reqs > 0 {
				c.groups[group] = g
			} else {
				delete(c.groups, group)
				own += g.shared
				c.shared.Add(-g.shared)
				c.sharedTotal.Add(-g.shared)
			}
		}
		c.mu.Unlock()
	}
	c.kv.Add(-own)
	c.kvTotal.Add(-own)
}

// KVCapacityBound is K's bound on an endpoint of known KV capacity:
// factor times it ([Config.KVCapacityFactor], [DefaultKVCapacityFactor]
// says why below 1).
func KVCapacityBound(factor float64, capacity int64) int64 {
	b := math.Ceil(max(factor, 0) * float64(capacity))
	if b >= math.MaxInt64 {
		// Go leaves converting it implementation-defined (MinInt64 on
		// amd64): with a factor above 1, an engine that reports 2^62
		// tokens would refuse every request while it held any.
		return math.MaxInt64
	}
	return int64(b)
}
