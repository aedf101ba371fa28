package core

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixring/prefixring/ring"
)

// Liveness is the rule that decides whose entry counts. An entry of another
// replica counts toward loads and health votes while all of these hold:
//
//   - it is not a tombstone (the replica left cleanly);
//   - its node is not in Gone: at the view's last Refresh memberlist did
//     not list it alive at the entry's address (it died, left, or a later
//     process took its name). An entry that arrives in between does not
//     count until a Refresh finds its node alive again; the gossip node
//     refreshes on every publication tick and on every membership change;
//   - it is fresh: now - Heard <= StaleAfter, both read on this replica's
//     clock. Every replica republishes at least every heartbeat, so an
//     entry goes stale only when its owner stopped (or its packets stopped
//     arriving) for StaleAfter. The age is never read from the owner's
//     stamp: a replica whose clock is off by more than StaleAfter would be
//     invisible to every peer (it used to be, silently). Replicas
//     drop a silent replica's counts within the spread of their receipts
//     of its last entry (a network delay), plus one merge-loop turn.
//
// The replica's own entry is never counted here: [ClusterLoads] adds either
// its exact live counters or its last publication, by [ViewMode].
type Liveness struct {
	Self       string
	StaleAfter time.Duration
	Gone       map[string]bool
}

// Counts reports whether e counts at now.
func (l Liveness) Counts(e Entry, now time.Time) bool {
	return e.Node != l.Self && !e.Left && !l.Gone[e.Node] &&
		now.UnixMilli()-e.Heard <= l.StaleAfter.Milliseconds()
}

// Remote is the immutable sum of the other replicas' counted entries.
type Remote struct {
	byID  map[string]int64
	total int64
	peers int // entries summed
	// kv and kvTotal sum K as byID and total sum the load (P), less the
	// groups' shared parts: an engine holds a group's shared part once
	// however many replicas hold a request of the group there, so those
	// are not summed. sharedBy[id][node] is an entry's shared part on id,
	// shared[id] the largest of them (the cluster's estimate of the shared
	// parts an engine holds: exact when the replicas hold the same groups
	// there, as key-consistent routing makes them at load, and short of it
	// by the smaller entries' groups that the largest lacks), and
	// sharedTotal the sum of shared.
	kv          map[string]int64
	kvTotal     int64
	sharedBy    map[string]map[string]int64
	shared      map[string]int64
	sharedTotal int64
}

// add adds (sign 1) or takes out (sign -1) e's load and K. The inner
// sharedBy maps may be another Remote's: add replaces one before it
// changes it.
func (r *Remote) add(e Entry, sign int64) {
	for i, id := range e.Endpoints {
		if n := e.Counts[i]; n != 0 {
			r.byID[id] += sign * n
			r.total += sign * n
		}
		sh := e.kvShared(i)
		if own := e.kv(i) - sh; own != 0 {
			r.kv[id] += sign * own
			r.kvTotal += sign * own
		}
		if _, held := r.sharedBy[id][e.Node]; sh == 0 && !held {
			continue
		}
		by := maps.Clone(r.sharedBy[id])
		if by == nil {
			by = map[string]int64{}
		}
		if sign > 0 {
			by[e.Node] = sh
		} else {
			delete(by, e.Node)
		}
		var top int64
		for _, n := range by {
			top = max(top, n)
		}
		r.sharedTotal += top - r.shared[id]
		if len(by) == 0 {
			delete(r.sharedBy, id)
			delete(r.shared, id)
			continue
		}
		r.sharedBy[id], r.shared[id] = by, top
	}
}

func newRemote(n int) *Remote {
	return &Remote{byID: make(map[string]int64, n), kv: make(map[string]int64, n),
		sharedBy: map[string]map[string]int64{}, shared: map[string]int64{}}
}

// SumRemote adds up the entries that count under l at now.
func SumRemote(entries []Entry, l Liveness, now time.Time) *Remote {
	r := newRemote(0)
	for _, e := range entries {
		if !l.Counts(e, now) {
			continue
		}
		r.peers++
		r.add(e, 1)
	}
	return r
}

// Load returns the other replicas' load on id (the weights of their leases).
func (r *Remote) Load(id string) int64 { return r.byID[id] }

// Total returns the other replicas' load on all endpoints.
func (r *Remote) Total() int64 { return r.total }

// ViewMode says what the bound reads as the cluster-wide load; see DESIGN.md
// ("Which counts the bound reads").
type ViewMode string

const (
	// ViewShared: every replica's counts as it last published them, this
	// replica's own included (its own entry is updated the instant it
	// publishes). Every replica reads the same numbers, except while a
	// publication is on the wire, so all pick the same endpoint; a replica
	// does not see its own placements until its next publication.
	ViewShared ViewMode = "shared"
	// ViewExact: this replica's exact live counters plus the others' latest
	// publications. Each replica sees its own placements at once, but two
	// replicas' views differ by their own drift since they last published.
	ViewExact ViewMode = "exact"
	// ViewOverlay: the shared snapshot, with this replica's placements made
	// since its last publication laid over it. For each endpoint it reads
	// max(own last published, own live) + the others' publications: a new
	// placement counts at once (a burst shorter than the interval no longer
	// lands all at home), while a finished request keeps counting until it
	// is published, so two replicas' views differ only by each one's own
	// unpublished new placements, never by its releases. Those new
	// placements count once more for each other member
	// ([ClusterLoads.SetMirrors]): the others presumably made as many.
	ViewOverlay ViewMode = "overlay"
	// ViewAligned: the shared view, with every publication (this
	// replica's own included) applied at its stamp plus an apply lag
	// rather than on receipt ([NewAlignedView]): replicas that heard the
	// same publications read the same numbers at the same instant, however
	// the network delayed them within the lag. It reads the cluster's load
	// a lag later than the shared view does.
	ViewAligned ViewMode = "aligned"
)

// ViewModes lists the view modes, the default first.
var ViewModes = []ViewMode{ViewOverlay, ViewShared, ViewExact, ViewAligned}

// ParseViewMode checks s; the empty string is the default, [ViewOverlay].
func ParseViewMode(s string) (ViewMode, error) {
	switch m := ViewMode(s); m {
	case "":
		return ViewModes[0], nil
	case ViewShared, ViewExact, ViewOverlay, ViewAligned:
		return m, nil
	}
	return "", fmt.Errorf("gossip: view %q is not one of %q", s, ViewModes)
}

// ClusterLoads is the cluster-wide load the bound reads. In [ViewExact] it is
// this replica's exact live counters plus the counted entries of the others;
// in [ViewShared] and [ViewAligned] (whose [View] sets the own publication
// and the others' entries only at their due time) it is this replica's last published counts plus the counted
// entries of the others, except while no other entry counts: a replica
// alone has nobody to agree with, so it reads its exact live counters and
// does not overshoot the bound with its own unpublished placements. Reads
// take no lock and allocate nothing: both sums are immutable and swapped in
// together.
type ClusterLoads struct {
	mode   ViewMode
	shared bool // the own publication is kept: every mode but ViewExact
	local  ring.Loads
	mu     sync.Mutex // serializes writers
	sums   atomic.Pointer[loadSums]
	// mirrors is how many other replicas [ViewOverlay] presumes placed as
	// this one did since its last publication ([ClusterLoads.SetMirrors]).
	mirrors atomic.Int64
}

// SetMirrors tells a [ViewOverlay] view how many other replicas take a
// share of the traffic like this one's: the live members less itself.
// Behind DNS round-robin or a Service each replica receives about the
// same requests and, hashing alike, places them alike, so while their
// publications since this replica's last one are still on their way,
// their placements are presumed to equal its own: its unpublished new
// load counts 1 + n times on each endpoint, not once. Without this a
// burst shorter than the interval (a cold start's first requests, every
// replica at once) lands R times what each replica's bound allows on a
// home. A release is not presumed: the others' counts fall only when
// they publish. Other views ignore it. The view of K ([ClusterLoads.KV])
// mirrors K's growth likewise, less the groups' shared parts: the others'
// placements of a group on an endpoint share its one copy there.
func (c *ClusterLoads) SetMirrors(n int) { c.mirrors.Store(int64(max(n, 0))) }

// Mirrors returns what SetMirrors last set.
func (c *ClusterLoads) Mirrors() int { return int(c.mirrors.Load()) }

// loadSums is one immutable pair of sums; own is nil in ViewExact.
type loadSums struct {
	own, remote *Remote
}

var emptySum = newRemote(0)

// NewClusterLoads returns the view of mode over local plus nothing, until
// [ClusterLoads.SetRemote] and [ClusterLoads.SetOwn].
func NewClusterLoads(local ring.Loads, mode ViewMode) *ClusterLoads {
	if mode == "" {
		mode = ViewModes[0]
	}
	c := &ClusterLoads{mode: mode, shared: mode != ViewExact, local: local}
	s := &loadSums{remote: emptySum}
	if c.shared {
		s.own = emptySum
	}
	c.sums.Store(s)
	return c
}

// Mode returns the view mode.
func (c *ClusterLoads) Mode() ViewMode { return c.mode }

// SetRemote swaps in a new sum of the other replicas' counts.
func (c *ClusterLoads) SetRemote(r *Remote) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.sums.Load()
	s.remote = r
	c.sums.Store(&s)
}

// SetOwn records the entry this replica just published (in [ViewAligned],
// the one just due). Every mode but [ViewExact] reads it; a tombstone
// counts nothing.
func (c *ClusterLoads) SetOwn(e Entry) {
	if !c.shared {
		return
	}
	own := newRemote(len(e.Endpoints))
	if !e.Left {
		own.add(e, 1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.sums.Load()
	s.own = own
	c.sums.Store(&s)
}

// Remote returns the current sum of the other replicas' counts.
func (c *ClusterLoads) Remote() *Remote { return c.sums.Load().remote }

// Load implements [ring.Loads].
func (c *ClusterLoads) Load(id string) int64 {
	s := c.sums.Load()
	if c.mode == ViewOverlay {
		var pub int64
		if s.own != nil {
			pub = s.own.byID[id]
		}
		return c.overlay(c.local.Load(id), pub, s.remote.peers) + s.remote.byID[id]
	}
	if s.own == nil || s.remote.peers == 0 {
		return c.local.Load(id) + s.remote.byID[id]
	}
	return s.own.byID[id] + s.remote.byID[id]
}

// overlay is [ViewOverlay]'s own part, from this replica's live and last
// published counts: the larger of the two (the live count alone while no
// other replica's entry counts), plus the unpublished growth once for
// each mirror.
func (c *ClusterLoads) overlay(live, pub int64, peers int) int64 {
	own := live
	if peers > 0 {
		own = max(pub, live)
	}
	return own + c.mirrors.Load()*max(0, live-pub)
}

// Total implements [ring.Loads]. In [ViewOverlay] the own part is
// max(published total, live total): it counts the unpublished placements
// when they outnumber the unpublished releases, which keeps it O(1) where
// the exact sum of the per-endpoint maxima would walk every endpoint. It can
// read less than the sum of [ClusterLoads.Load] (by the releases on other
// endpoints since the publication), which only loosens the bound by that much
// until the next publication.
func (c *ClusterLoads) Total() int64 {
	s := c.sums.Load()
	if c.mode == ViewOverlay {
		var pub int64
		if s.own != nil {
			pub = s.own.total
		}
		return c.overlay(c.local.Total(), pub, s.remote.peers) + s.remote.total
	}
	if s.own == nil || s.remote.peers == 0 {
		return c.local.Total() + s.remote.total
	}
	return s.own.total + s.remote.total
}

// Replace returns r with old's counts taken out and new's added (in that
// order: both may be one node's); either may be nil. r is not modified.
func (r *Remote) Replace(old, new *Entry) *Remote {
	out := newRemote(len(r.byID))
	out.total, out.kvTotal, out.peers, out.sharedTotal = r.total, r.kvTotal, r.peers, r.sharedTotal
	maps.Copy(out.byID, r.byID)
	maps.Copy(out.kv, r.kv)
	maps.Copy(out.sharedBy, r.sharedBy) // inner maps are replaced, never changed, by add
	maps.Copy(out.shared, r.shared)
	if old != nil {
		out.peers--
		out.add(*old, -1)
	}
	if new != nil {
		out.peers++
		out.add(*new, 1)
	}
	return out
}

// Loads returns a copy of the load per endpoint, zeros left out.
func (r *Remote) Loads() map[string]int64 {
	out := make(map[string]int64, len(r.byID))
	for id, n := range r.byID {
		if n != 0 {
			out[id] = n
		}
	}
	return out
}

// KV returns the view of K that reads as this view reads the load:
// the others' published K plus this replica's own, local (its live K, from
// ring.Inflight.KV) laid over its last publication by the same [ViewMode].
// It is what [ring.Balancer.SetKVLoads] takes.
func (c *ClusterLoads) KV(local ring.Loads) ring.Loads { return kvLoads{c, local} }

type kvLoads struct {
	c     *ClusterLoads
	local ring.Loads
}

// localShared is the shared part within the local K on id (0 when the
// local view does not tell it), at most that K.
func (v kvLoads) localShared(id string, k int64) int64 {
	if sl, ok := v.local.(ring.SharedLoads); ok {
		return min(max(sl.Shared(id), 0), k)
	}
	return 0
}

// localSharedTotal is localShared over every endpoint: the shared parts
// within the local K total k.
func (v kvLoads) localSharedTotal(k int64) int64 {
	if sl, ok := v.local.(ring.SharedLoads); ok {
		return min(max(sl.SharedTotal(), 0), k)
	}
	return 0
}

// Load is the own K (its live counters or its last publication, by the
// mode, as for the load) and the others' K, their shared parts counted
// once: the own part of each, plus the largest shared part (see [Remote]).
// In [ViewOverlay] the own part's growth since the publication, shared
// parts left out, counts once more for each mirror
// ([ClusterLoads.SetMirrors]).
func (v kvLoads) Load(id string) int64 {
	s := v.c.sums.Load()
	live := v.local.Load(id)
	if s.own == nil || s.remote.peers == 0 {
		liveShared := v.localShared(id, live)
		return live + s.remote.kv[id] + max(0, s.remote.shared[id]-liveShared)
	}
	own, ownShared := s.own.kv[id]+s.own.shared[id], s.own.shared[id]
	var mirrored int64
	if v.c.mode == ViewOverlay {
		liveShared := v.localShared(id, live)
		if live > own {
			own, ownShared = live, liveShared
		}
		mirrored = v.c.mirrors.Load() * max(0, live-liveShared-s.own.kv[id])
	}
	return own + mirrored + s.remote.kv[id] + max(0, s.remote.shared[id]-ownShared)
}

// Total is the sum of [kvLoads.Load] over the endpoints, except that the
// shared parts are taken as the larger of the own and the others' totals
// rather than endpoint by endpoint, which keeps it O(1); only the average
// bound (ring.Config.KVAverage) reads it.
func (v kvLoads) Total() int64 {
	s := v.c.sums.Load()
	if s.own == nil || s.remote.peers == 0 {
		live := v.local.Total()
		return live + s.remote.kvTotal + max(0, s.remote.sharedTotal-v.localSharedTotal(live))
	}
	own, ownShared := s.own.kvTotal+s.own.sharedTotal, s.own.sharedTotal
	if v.c.mode == ViewOverlay {
		live := v.local.Total()
		own = max(own, live) + v.c.mirrors.Load()*max(0, live-v.localSharedTotal(live)-s.own.kvTotal)
	}
	return own + s.remote.kvTotal + max(0, s.remote.sharedTotal-ownShared)
}
