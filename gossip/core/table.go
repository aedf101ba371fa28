package core

import (
	"slices"
	"time"

	"github.com/prefixring/prefixring/internal/lww"
)

// EntryTable is the table of entries one replica knows, one per node: an
// [lww.Map] map ordered by [Compare], plus the digest of each entry's endpoint
// list, so a delta that names only the digest can be expanded. It is pure
// (time is passed in) and not safe for concurrent use.
type EntryTable struct {
	lww     *lww.Map[string, Entry]
	digests map[string]uint64 // node -> Digest of its entry's endpoints
	// forgotten holds, for a while, the entries [EntryTable.Forget]
	// dropped, so a peer that still holds one cannot merge it back.
	forgotten map[string]forgotten
}

// forgotten is a forgotten entry and when it was forgotten (unix ms).
type forgotten struct {
	e  Entry
	at int64
}

// NewEntryTable returns an empty table.
func NewEntryTable() *EntryTable {
	return &EntryTable{lww: lww.New(func(e Entry) string { return e.Node }, Compare), digests: map[string]uint64{},
		forgotten: map[string]forgotten{}}
}

// Merge keeps, for every node, the newest of its known entry and the ones in
// in, and returns the entries that changed the table: the change to pass
// on. An entry of a node forgotten lately is refused if it is the
// forgotten one or an older one of its process: of its incarnation, not
// newer, and stamped no later (see [EntryTable.Forget]).
func (t *EntryTable) Merge(in ...Entry) []Entry {
	if len(t.forgotten) > 0 {
		in = slices.DeleteFunc(slices.Clone(in), t.refuses)
	}
	changed := t.lww.Merge(in...)
	for _, e := range changed {
		t.digests[e.Node] = Digest(e.Endpoints)
	}
	return changed
}

// refuses reports whether Merge refuses e: an entry of a node forgotten
// lately that is the forgotten one or an older one of its process.
func (t *EntryTable) refuses(e Entry) bool {
	f, ok := t.forgotten[e.Node]
	return ok && e.Incarnation == f.e.Incarnation && Compare(e, f.e) <= 0 && e.Stamp <= f.e.Stamp
}

// Get returns the entry of node.
func (t *EntryTable) Get(node string) (Entry, bool) { return t.lww.Get(node) }

// Entries returns all entries sorted by node.
func (t *EntryTable) Entries() []Entry { return t.lww.Values() }

// Len returns the number of entries.
func (t *EntryTable) Len() int { return t.lww.Len() }

// EndpointsOf returns an endpoint list some entry carries with the given
// digest, so a delta that names only the digest can be expanded.
func (t *EntryTable) EndpointsOf(digest uint64) ([]string, bool) {
	for node, d := range t.digests {
		if d == digest {
			e, _ := t.lww.Get(node)
			return e.Endpoints, true
		}
	}
	return nil, false
}

// Forget drops entries heard longer than after ago (by [Entry.Heard],
// this replica's clock), except keep's, and returns their nodes, sorted.
// Each replica ages entries from its own receipt, so a peer that heard an
// entry later still holds it and would push it back, heard anew, and the
// two would pass a dead replica's entry back and forth for ever: so a
// forgotten entry, and any older of its incarnation stamped no later, is
// refused for after more. A new process of the name is not: it has
// another incarnation, or, when it and its predecessor both started at
// FirstIncarnation and no peer handed it the old entry to supersede, lower
// versions stamped later (its owner's clock at publication; a successor
// on a host whose clock is behind its predecessor's waits out the
// forgotten record, as every successor did before stop 40).
func (t *EntryTable) Forget(now time.Time, after time.Duration, keep string) []string {
	var gone []string
	ms := now.UnixMilli()
	for node, f := range t.forgotten {
		if ms-f.at > after.Milliseconds() {
			delete(t.forgotten, node)
		}
	}
	for _, e := range t.lww.Values() {
		if e.Node != keep && ms-e.Heard > after.Milliseconds() {
			t.lww.Delete(e.Node)
			delete(t.digests, e.Node)
			t.forgotten[e.Node] = forgotten{e: e, at: ms}
			gone = append(gone, e.Node)
		}
	}
	return gone
}
