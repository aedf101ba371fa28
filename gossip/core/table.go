package core

import (
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
}

// NewEntryTable returns an empty table.
func NewEntryTable() *EntryTable {
	return &EntryTable{lww: lww.New(func(e Entry) string { return e.Node }, Compare), digests: map[string]uint64{}}
}

// Merge keeps, for every node, the newest of its known entry and the ones in
// in, and returns the entries that changed the table: the change to pass
// on.
func (t *EntryTable) Merge(in ...Entry) []Entry {
	changed := t.lww.Merge(in...)
	for _, e := range changed {
		t.digests[e.Node] = Digest(e.Endpoints)
	}
	return changed
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

// Forget drops entries whose stamp is older than now-after, except keep's,
// and returns their nodes, sorted. A forgotten entry that comes back from a
// peer that still holds it is just as old, so it never counts again (see
// [Liveness]) and is forgotten again at the next call.
func (t *EntryTable) Forget(now time.Time, after time.Duration, keep string) []string {
	var gone []string
	for _, e := range t.lww.Values() {
		if e.Node != keep && now.UnixMilli()-e.Stamp > after.Milliseconds() {
			t.lww.Delete(e.Node)
			delete(t.digests, e.Node)
			gone = append(gone, e.Node)
		}
	}
	return gone
}
