package gossip

import (
	"cmp"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Entry is one replica's record in the cluster state. Only the replica named
// Node writes it; every other replica keeps the newest copy it has seen.
// An Entry is immutable once built: merges share its slices.
type Entry struct {
	// Node is the replica's memberlist name; it keys the entry.
	Node string
	// Addr is the replica's gossip advertise address. It ties the name to
	// one process, so a second process that takes the same name is ignored.
	Addr string
	// Incarnation orders restarts: the replica's start time in unix
	// nanoseconds, raised above any older incarnation of its name it hears of.
	Incarnation uint64
	// Version orders updates within an incarnation.
	Version uint64
	// Stamp is the owner's wall clock at publication, unix milliseconds. It
	// drives staleness (see [Liveness]); no replica reads another's clock
	// for anything else.
	Stamp int64
	// Left marks a tombstone: the replica left the cluster cleanly. A
	// tombstone carries no counts or votes.
	Left bool
	// Endpoints are the endpoints this replica discovered or holds
	// requests on, sorted.
	Endpoints []string
	// Counts[i] is this replica's in-flight requests on Endpoints[i].
	Counts []int64
	// Down[i] reports that this replica's checks see Endpoints[i] down.
	Down []bool
	// Listed[i] reports that this replica discovered Endpoints[i]: its vote
	// for the endpoint set. An endpoint it routes to (because the majority
	// lists it) but has not discovered itself (DNS lag, a different
	// --endpoints) is carried for its counts alone, so the bound everywhere
	// sees every lease.
	Listed []bool
}

// NewEntry builds an entry from this replica's observations: the endpoints
// it discovered (its votes), its in-flight counts on any endpoint
// (including ones it did not discover), and the endpoints its checks see
// down.
func NewEntry(node, addr string, inc, ver uint64, now time.Time, discovered []string,
	counts map[string]int64, down map[string]bool) Entry {
	listed := make(map[string]bool, len(discovered))
	eps := slices.Clone(discovered)
	for _, id := range discovered {
		listed[id] = true
	}
	for id, n := range counts {
		if n != 0 && !listed[id] {
			eps = append(eps, id)
		}
	}
	slices.Sort(eps)
	eps = slices.Compact(eps)
	e := Entry{
		Node: node, Addr: addr, Incarnation: inc, Version: ver, Stamp: now.UnixMilli(),
		Endpoints: eps, Counts: make([]int64, len(eps)), Down: make([]bool, len(eps)), Listed: make([]bool, len(eps)),
	}
	for i, id := range eps {
		e.Counts[i] = counts[id]
		e.Listed[i] = listed[id]
		e.Down[i] = listed[id] && down[id]
	}
	return e
}

// Digest identifies the endpoint list, so a delta can refer to it without
// carrying it. IDs are separated by a 0x00 byte, so ["ab","c"] and
// ["a","bc"] differ.
func Digest(endpoints []string) uint64 {
	d := xxhash.New()
	for _, id := range endpoints {
		_, _ = d.WriteString(id)
		_, _ = d.Write([]byte{0})
	}
	return d.Sum64()
}

// Total returns the entry's in-flight requests over all its endpoints.
func (e Entry) Total() int64 {
	var t int64
	for _, n := range e.Counts {
		t += n
	}
	return t
}

// compare orders two versions of one node's entry: by incarnation, version
// and stamp, and, for the equal triples only two processes sharing a name
// can produce, by a hash of the content, so merging stays commutative even
// then. It returns 0 only for identical content.
func compare(a, b Entry) int {
	if c := cmp.Compare(a.Incarnation, b.Incarnation); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Version, b.Version); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Stamp, b.Stamp); c != 0 {
		return c
	}
	return cmp.Compare(fingerprint(a), fingerprint(b))
}

func fingerprint(e Entry) uint64 { return xxhash.Sum64(appendFull(nil, e)) }

// State is the set of entries one replica knows, keyed by node. It is the
// pure core of the gossip layer: no I/O, no goroutines, no clock (time is
// passed in). It is not safe for concurrent use; the [Node] guards it.
type State struct {
	entries map[string]Entry
	digests map[string]uint64 // node -> Digest of its entry's endpoints
}

// NewState returns an empty state.
func NewState() *State {
	return &State{entries: map[string]Entry{}, digests: map[string]uint64{}}
}

// Merge keeps, for every node, the newest of its known entry and the ones in
// in, and returns the entries that changed the state: the change to pass
// on. Merging an entry already known, or older than the known one, returns
// nothing.
func (s *State) Merge(in ...Entry) []Entry {
	var changed []Entry
	for _, e := range in {
		if old, ok := s.entries[e.Node]; ok && compare(e, old) <= 0 {
			continue
		}
		s.entries[e.Node] = e
		s.digests[e.Node] = Digest(e.Endpoints)
		// A later entry of the same node in this batch supersedes an earlier
		// one in the change too.
		changed = slices.DeleteFunc(changed, func(c Entry) bool { return c.Node == e.Node })
		changed = append(changed, e)
	}
	return changed
}

// Get returns the entry of node.
func (s *State) Get(node string) (Entry, bool) {
	e, ok := s.entries[node]
	return e, ok
}

// Entries returns all entries sorted by node.
func (s *State) Entries() []Entry {
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// Len returns the number of entries.
func (s *State) Len() int { return len(s.entries) }

// EndpointsOf returns an endpoint list some entry carries with the given
// digest, so a delta that names only the digest can be expanded.
func (s *State) EndpointsOf(digest uint64) ([]string, bool) {
	for node, d := range s.digests {
		if d == digest {
			return s.entries[node].Endpoints, true
		}
	}
	return nil, false
}

// Forget drops entries whose stamp is older than now-after, except keep's,
// and returns their nodes. A forgotten entry that comes back from a peer
// that still holds it is just as old, so it never counts again (see
// [Liveness]) and is forgotten again at the next call.
func (s *State) Forget(now time.Time, after time.Duration, keep string) []string {
	var gone []string
	for node, e := range s.entries {
		if node != keep && now.UnixMilli()-e.Stamp > after.Milliseconds() {
			delete(s.entries, node)
			delete(s.digests, node)
			gone = append(gone, node)
		}
	}
	slices.Sort(gone)
	return gone
}
