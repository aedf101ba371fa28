package core

import (
	"maps"
	"slices"
	"time"
)

// The aligned view ([ViewAligned]) applies every publication at one time
// that every replica computes alike: its owner's stamp plus the apply lag.
// Replicas that heard the same publications then sum the same entries at
// the same instant, whatever order and delay the network delivered them
// in, provided each arrived within the lag. In the shared view each
// replica applies its own publication at once and the others' on receipt,
// so at most instants two replicas hold different sets of publications.
//
// Clock skew is capped: a publication never waits longer than the lag
// after this replica heard it (its owner's clock may be ahead), and one
// whose stamp plus lag has passed (a late delivery, a relayed entry, an
// owner whose clock is behind) applies at once. Its due time is thus
// within [heard, heard+lag] on this replica's clock, and it is what
// [Liveness] ages the applied entry from.

// aligner holds the publications received and not yet due, and the entry
// of each node applied so far.
type aligner struct {
	self    string
	lag     int64            // ms
	applied map[string]Entry // per node, the entry the sum reads; Heard is when it applied
	// pending are the entries of each node not yet applied, in the order
	// the table took them (each newer than the one before); Heard is the
	// due time.
	pending map[string][]Entry
}

// NewAlignedView returns the view of [ViewAligned]: [NewView] whose
// entries, this replica's own included, each apply lag after their stamp
// (at most lag after their receipt). [View.NextDue] says when the next
// one is due and [View.Promote] applies the due ones; the caller runs the
// timer.
func NewAlignedView(self string, staleAfter, lag time.Duration, loads *ClusterLoads) *View {
	v := NewView(self, staleAfter, loads)
	v.align = &aligner{self: self, lag: lag.Milliseconds(), applied: map[string]Entry{}, pending: map[string][]Entry{}}
	return v
}

// NewModeView returns the view loads' mode reads: [NewAlignedView] with
// the apply lag in [ViewAligned], else [NewView] (which ignores lag).
func NewModeView(self string, staleAfter, lag time.Duration, loads *ClusterLoads) *View {
	if loads.Mode() == ViewAligned {
		return NewAlignedView(self, staleAfter, lag, loads)
	}
	return NewView(self, staleAfter, loads)
}

// hold queues e, heard at heard (unix ms, this replica's clock), until
// min(stamp, heard) + lag, and no earlier than heard, unless it is no
// newer than the entry applied or one already pending (a second copy).
// Pending entries stay in [Compare] order: one delivered after a newer
// one (reordered within the lag) still applies in its turn.
func (a *aligner) hold(e Entry, heard int64) {
	if old, ok := a.applied[e.Node]; ok && Compare(e, old) <= 0 {
		return
	}
	p := a.pending[e.Node]
	i, found := slices.BinarySearchFunc(p, e, Compare)
	if found {
		return
	}
	e.Heard = max(min(e.Stamp, heard)+a.lag, heard)
	a.pending[e.Node] = slices.Insert(p, i, e)
}

// NextDue returns when the next pending entry is due; false: none is, or
// the view has no apply lag.
func (v *View) NextDue() (time.Time, bool) {
	if v.align == nil || len(v.align.pending) == 0 {
		return time.Time{}, false
	}
	due := int64(0)
	for _, p := range v.align.pending {
		for _, e := range p {
			if due == 0 || e.Heard < due {
				due = e.Heard
			}
		}
	}
	return time.UnixMilli(due), true
}

// Promote applies, for each node, the newest of its entries due by now and
// drops the older ones pending (a newer entry due first supersedes them),
// and reports whether the health verdict may have changed. This replica's
// own entry goes to [ClusterLoads.SetOwn].
func (v *View) Promote(now time.Time) (verdict bool) {
	a := v.align
	if a == nil {
		return false
	}
	ms, changed := now.UnixMilli(), false
	for _, node := range slices.Sorted(maps.Keys(a.pending)) {
		p := a.pending[node]
		due := -1
		for j, e := range p {
			if e.Heard <= ms {
				due = j
			}
		}
		if due < 0 {
			continue
		}
		e := p[due]
		if rest := p[due+1:]; len(rest) > 0 {
			a.pending[node] = rest
		} else {
			delete(a.pending, node)
		}
		if old, ok := a.applied[node]; ok && Compare(e, old) <= 0 {
			continue
		}
		a.applied[node] = e
		if node == a.self {
			v.loads.SetOwn(e)
			continue
		}
		verdict = v.update(e, now) || verdict
		changed = true
	}
	if changed {
		v.loads.SetRemote(v.remote)
	}
	return verdict
}

// prune forgets what is held of the nodes t no longer holds (forgotten).
func (a *aligner) prune(t *EntryTable) {
	for node := range a.applied {
		if _, ok := t.Get(node); !ok {
			delete(a.applied, node)
		}
	}
	for node := range a.pending {
		if _, ok := t.Get(node); !ok {
			delete(a.pending, node)
		}
	}
}

// appliedEntries returns the applied entries, sorted by node.
func (a *aligner) appliedEntries() []Entry {
	out := make([]Entry, 0, len(a.applied))
	for _, node := range slices.Sorted(maps.Keys(a.applied)) {
		out = append(out, a.applied[node])
	}
	return out
}

// Pending returns how many publications of node wait for their due time.
func (v *View) Pending(node string) int {
	if v.align == nil {
		return 0
	}
	return len(v.align.pending[node])
}

// Applied returns the entry of node the view sums: the table's, or with an
// apply lag the last one applied (its Heard is when it applied).
func (v *View) Applied(node string) (Entry, bool) {
	if v.align == nil {
		return v.table.Get(node)
	}
	e, ok := v.align.applied[node]
	return e, ok
}
