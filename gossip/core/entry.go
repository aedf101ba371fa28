package core

import (
	"cmp"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Entry is one replica's record of its loads and observations. Only the
// replica named Node writes it; every other replica keeps the newest copy
// it has seen. An Entry is immutable once built: merges share its slices.
type Entry struct {
	// Node is the replica's memberlist name; it keys the entry.
	Node string
	// Addr is the replica's gossip advertise address. It ties the name to
	// one process, so a second process that takes the same name is ignored.
	Addr string
	// Incarnation orders the processes that have held the name, and reads
	// no clock: a process starts at [FirstIncarnation], and when it hears
	// of an entry of its name that it did not write (an earlier process's,
	// at its address or another), it takes [NextIncarnation] of it. A
	// restart on a host whose clock is behind its predecessor's is then
	// still ordered after it.
	Incarnation uint64
	// Version orders updates within an incarnation.
	Version uint64
	// Stamp is the owner's wall clock at publication, unix milliseconds.
	// Nothing ages an entry by it (see [Liveness]): a receiver reads it
	// against its own clock only to report the owner's clock skew.
	Stamp int64
	// Heard is this replica's own clock, unix milliseconds, when it merged
	// this version of the entry: what [Liveness] ages the entry from, so
	// a peer whose clock is off still counts. It is local: never on the
	// wire (zero in a decoded entry), no part of the entry's order or
	// content, and kept by a merge that changes nothing. [NewEntry] sets it
	// to the stamp: the owner heard its entry when it built it.
	Heard int64
	// Left marks a tombstone: the replica left the cluster cleanly. A
	// tombstone carries no counts or votes.
	Left bool
	// Endpoints are the endpoints this replica discovered or holds
	// leases on, sorted.
	Endpoints []string
	// Counts[i] is this replica's load on Endpoints[i]: the weights of the
	// leases it holds there (ring.Inflight's counts, token-weighted when
	// the balancer weighs leases by tokens).
	Counts []int64
	// KV[i] is this replica's K on Endpoints[i]: the prompt tokens its
	// in-flight requests hold in that engine's KV cache, a group's shared
	// part once (ring.Inflight's KVCounts). Nil reads as zeros.
	KV []int64
	// KVShared[i] is the part of KV[i] that is groups' shared parts, each
	// group's once (ring.Inflight's KVSharedCounts): the cluster's view
	// counts a group's shared part once however many replicas hold the
	// group on an endpoint ([Remote]). Nil reads as zeros.
	KVShared []int64
	// Down[i] reports that this replica's checks see Endpoints[i] down.
	Down []bool
	// Listed[i] reports that this replica discovered Endpoints[i]: its vote
	// for the endpoint set. An endpoint it routes to (because the majority
	// lists it) but has not discovered itself (DNS lag, a different
	// --endpoints) is carried for its counts alone, so the bound everywhere
	// sees every lease.
	Listed []bool
	// Failing[i]: Down[i] because Endpoints[i] failed this replica's
	// requests (not its probes); Served[i]: up, and it answered this
	// replica's requests lately. Set by [Entry.WithRequestEvidence]; see
	// [Tally] for how they count.
	Failing, Served []bool
}

// NewEntry builds an entry from a replica's observations: the endpoints it
// discovered (its votes), its loads on any endpoint (including ones it did
// not discover), and the endpoints its checks see down. It carries no K:
// see [NewEntryKV].
func NewEntry(node, addr string, inc, ver uint64, now time.Time, discovered []string,
	counts map[string]int64, down map[string]bool) Entry {
	return NewEntryKV(node, addr, inc, ver, now, discovered, counts, nil, down)
}

// NewEntryKV is [NewEntry] with the replica's K per endpoint beside its
// load (P).
func NewEntryKV(node, addr string, inc, ver uint64, now time.Time, discovered []string,
	counts, kv map[string]int64, down map[string]bool) Entry {
	listed := make(map[string]bool, len(discovered))
	eps := slices.Clone(discovered)
	for _, id := range discovered {
		listed[id] = true
	}
	for _, m := range []map[string]int64{counts, kv} {
		for id, n := range m {
			if n != 0 && !listed[id] {
				eps = append(eps, id)
			}
		}
	}
	slices.Sort(eps)
	eps = slices.Compact(eps)
	e := Entry{
		Node: node, Addr: addr, Incarnation: inc, Version: ver, Stamp: now.UnixMilli(), Heard: now.UnixMilli(),
		Endpoints: eps, Counts: make([]int64, len(eps)), KV: make([]int64, len(eps)), Down: make([]bool, len(eps)), Listed: make([]bool, len(eps)),
	}
	for i, id := range eps {
		e.Counts[i], e.KV[i] = counts[id], kv[id]
		e.Listed[i] = listed[id]
		e.Down[i] = listed[id] && down[id]
	}
	return e
}

// FirstIncarnation is a new process's incarnation.
const FirstIncarnation = 1

// NextIncarnation is the incarnation a process whose own is inc takes on
// hearing of heard, an entry of its name it did not write: one above both.
func NextIncarnation(inc uint64, heard Entry) uint64 { return max(inc, heard.Incarnation) + 1 }

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

// Total returns the entry's load over all its endpoints.
func (e Entry) Total() int64 {
	var t int64
	for _, n := range e.Counts {
		t += n
	}
	return t
}

// Compare orders two versions of one node's entry: by incarnation, version
// and stamp, and, for the equal triples only two processes sharing a name
// can produce, by a hash of the content, so merging stays commutative even
// then. It returns 0 only for identical content.
func Compare(a, b Entry) int {
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

func fingerprint(e Entry) uint64 { return xxhash.Sum64(AppendEntry(nil, e)) }

// SameContent reports whether two entries of one incarnation say the same
// (versions and stamps aside): a replica republishes only a changed entry.
func SameContent(a, b Entry) bool {
	return a.Incarnation == b.Incarnation && a.Left == b.Left && slices.Equal(a.Endpoints, b.Endpoints) &&
		slices.Equal(a.Counts, b.Counts) && sameKV(a, b) && slices.Equal(a.Down, b.Down) && slices.Equal(a.Listed, b.Listed) &&
		slices.Equal(a.Failing, b.Failing) && slices.Equal(a.Served, b.Served)
}

// sameKV reports whether two entries over the same endpoints carry the same
// K, a missing KV reading as zeros.
func sameKV(a, b Entry) bool {
	for i := range a.Counts {
		if a.kv(i) != b.kv(i) || a.kvShared(i) != b.kvShared(i) {
			return false
		}
	}
	return true
}

// WithKVShared returns e carrying shared, the part of its K per endpoint
// that is groups' shared parts (see [Entry.KVShared]), clamped to K.
func (e Entry) WithKVShared(shared map[string]int64) Entry {
	if len(shared) == 0 {
		e.KVShared = nil
		return e
	}
	e.KVShared = make([]int64, len(e.Endpoints))
	for i, id := range e.Endpoints {
		e.KVShared[i] = min(max(shared[id], 0), e.kv(i))
	}
	return e
}

// listed reports whether the entry's replica discovered Endpoints[i]. An
// entry built without Listed (by hand, in tests) lists all its endpoints.
func (e Entry) listed(i int) bool { return e.Listed == nil || e.Listed[i] }

func (e Entry) listsAny() bool {
	for i := range e.Endpoints {
		if e.listed(i) {
			return true
		}
	}
	return false
}

// kv is KV[i], zero where the entry carries no K.
func (e Entry) kv(i int) int64 {
	if i < len(e.KV) {
		return e.KV[i]
	}
	return 0
}

// kvShared is KVShared[i], zero where the entry carries none.
func (e Entry) kvShared(i int) int64 {
	if i < len(e.KVShared) {
		return e.KVShared[i]
	}
	return 0
}
