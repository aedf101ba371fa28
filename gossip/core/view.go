package core

import (
	"maps"
	"slices"
	"time"
)

// View is one replica's view of the cluster: the table of entries it holds,
// whose of them count under [Liveness], and their sum, kept current in the
// replica's [ClusterLoads]. The gossip node drives it from the wire;
// sim/replicas drives it from a simulated network. It is pure (time is
// passed in) and not safe for concurrent use.
//
// A view with an apply lag ([NewAlignedView], for [ViewAligned]) sums not
// the table but the entries applied so far: each publication, this
// replica's own included, waits until its due time (align.go).
type View struct {
	table   *EntryTable
	live    Liveness
	counted map[string]Entry // entries in remote
	remote  *Remote
	loads   *ClusterLoads
	align   *aligner // nil: entries apply on receipt
}

// NewView returns the empty view of replica self, whose entries go stale
// after staleAfter, feeding loads.
func NewView(self string, staleAfter time.Duration, loads *ClusterLoads) *View {
	return &View{
		table: NewEntryTable(), live: Liveness{Self: self, StaleAfter: staleAfter, Gone: map[string]bool{}},
		counted: map[string]Entry{}, remote: emptySum, loads: loads,
	}
}

// Table returns the entries held.
func (v *View) Table() *EntryTable { return v.table }

// Liveness returns the rule the view counts by.
func (v *View) Liveness() Liveness { return v.live }

// Remote returns the sum of the counted entries.
func (v *View) Remote() *Remote { return v.remote }

// Publish merges this replica's own new entry: the loads read it as the
// own publication at once ([ClusterLoads.SetOwn]), or, with an apply lag,
// at its due time ([View.Promote]).
func (v *View) Publish(e Entry) {
	e.Heard = e.Stamp // our own clock
	v.table.Merge(e)
	if v.align != nil {
		v.align.hold(e, e.Stamp)
		return
	}
	v.loads.SetOwn(e)
}

// Refresh rebuilds whose entries count and their sum from scratch. gone are
// the nodes memberlist does not list alive (nil: none).
func (v *View) Refresh(now time.Time, gone map[string]bool) {
	if gone == nil {
		gone = map[string]bool{}
	}
	v.live.Gone = gone
	entries := v.table.Entries()
	if v.align != nil {
		v.align.prune(v.table)
		entries = v.align.appliedEntries()
	}
	v.counted = map[string]Entry{}
	for _, e := range entries {
		if v.live.Counts(e, now) {
			v.counted[e.Node] = e
		}
	}
	v.remote = SumRemote(entries, v.live, now)
	v.loads.SetRemote(v.remote)
}

// Receive merges entries heard from peers, updates the sum by the change
// alone, and returns the change and whether the health verdict may have
// changed (an entry started or stopped counting, or its endpoints, votes
// or health changed).
func (v *View) Receive(now time.Time, in ...Entry) (changed []Entry, verdict bool) {
	heard := make([]Entry, len(in))
	for i, e := range in {
		e.Heard = now.UnixMilli()
		heard[i] = e
	}
	changed = v.table.Merge(heard...)
	if v.align != nil {
		// Every entry the table holds its node for, not only the ones
		// that changed it: one overtaken on the wire by a newer one
		// still applies before it. Not one the table refused: a
		// forgotten entry pushed back may be newer than the entry of
		// the process that took its name.
		for _, e := range heard {
			if _, ok := v.table.Get(e.Node); ok && !v.table.refuses(e) {
				v.align.hold(e, e.Heard)
			}
		}
		return changed, v.Promote(now)
	}
	for _, e := range changed {
		verdict = v.update(e, now) || verdict
	}
	if len(changed) > 0 {
		v.loads.SetRemote(v.remote)
	}
	return changed, verdict
}

// update accounts for a newly merged entry and reports whether the health
// verdict may have changed.
func (v *View) update(e Entry, now time.Time) bool {
	prev, had := v.counted[e.Node]
	counts := v.live.Counts(e, now)
	if !had && !counts {
		return false
	}
	var oldp, newp *Entry
	if had {
		oldp = &prev
		delete(v.counted, e.Node)
	}
	if counts {
		newp = &e
		v.counted[e.Node] = e
	}
	v.remote = v.remote.Replace(oldp, newp)
	return had != counts || !slices.Equal(prev.Down, e.Down) || !slices.Equal(prev.Endpoints, e.Endpoints) ||
		!slices.Equal(prev.Listed, e.Listed) || !slices.Equal(prev.Failing, e.Failing) || !slices.Equal(prev.Served, e.Served)
}

// Voters returns own and the counted entries, the voters of [Tally].
func (v *View) Voters(own Entry) []Entry {
	voters := []Entry{own}
	for _, node := range slices.Sorted(maps.Keys(v.counted)) {
		voters = append(voters, v.counted[node])
	}
	return voters
}
