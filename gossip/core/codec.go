package core

import (
	"encoding/binary"

	"github.com/prefixring/prefixring/internal/wire"
)

// The entries' codec. Integers are varints; strings are length-prefixed.
//
//	header: node, addr, incarnation, version, stamp, flags (bit 0: left)
//	entry:  header, n, n endpoint IDs, n counts, n KV counts, KV shared parts, down bits, listed bits, evidence bits
//	delta:  header, digest (8 bytes LE), n, n counts, n KV counts, KV shared parts, down bits, listed bits, evidence bits
//	table:  m, then m entries
//
// A delta names its endpoint list by [Digest] only, so at 500 endpoints it
// still fits one UDP packet; the receiver expands it from an entry it holds
// with the same list ([Delta.Expand]), or drops it and waits for a full
// entry. KV shared parts are sparse, as few endpoints hold a group: m, then
// m pairs of the endpoint's index less the previous pair's (the first: its
// index) and the part. Bits are ceil(n/8) bytes, bit i of byte i/8 for endpoint i. An
// evidence bit is Failing for an endpoint that is down, Served for one that
// is up (see [Entry.WithRequestEvidence]): one never holds with the other.
const (
	maxEndpoints = 1 << 16
	maxEntries   = 1 << 14
)

// MaxCount bounds a count a peer publishes, in any unit (requests, prefill
// or KV tokens): about 10^12, past any engine's queue or memory, and small
// enough that the sum over the most entries a table holds cannot overflow.
// Decoding clamps counts to [0, MaxCount], so a peer with a bug (or a key
// holder who means harm) cannot make the loads the bound reads negative,
// or wrap their sums.
const MaxCount = 1 << 40

func clampCount(n int64) int64 { return min(max(n, 0), MaxCount) }

func appendHeader(b []byte, e Entry) []byte {
	b = wire.AppendString(b, e.Node)
	b = wire.AppendString(b, e.Addr)
	b = binary.AppendUvarint(b, e.Incarnation)
	b = binary.AppendUvarint(b, e.Version)
	b = binary.AppendVarint(b, e.Stamp)
	var flags byte
	if e.Left {
		flags |= 1
	}
	return append(b, flags)
}

func appendCountsAndDown(b []byte, e Entry) []byte {
	for _, n := range e.Counts {
		b = binary.AppendVarint(b, n)
	}
	for i := range e.Counts {
		b = binary.AppendVarint(b, e.kv(i))
	}
	b = appendSparse(b, e.KVShared, len(e.Counts))
	b = appendBits(b, e.Down, len(e.Counts))
	b = appendBits(b, e.Listed, len(e.Counts))
	return appendBits(b, evidenceBits(e), len(e.Counts))
}

// appendSparse appends the non-zero values of vs[:n] as m, then m pairs
// of index gap and value.
func appendSparse(b []byte, vs []int64, n int) []byte {
	vs = vs[:min(n, len(vs))]
	m := 0
	for _, v := range vs {
		if v != 0 {
			m++
		}
	}
	b = binary.AppendUvarint(b, uint64(m))
	last := 0
	for i, v := range vs {
		if v != 0 {
			b = binary.AppendUvarint(b, uint64(i-last))
			b = binary.AppendVarint(b, v)
			last = i
		}
	}
	return b
}

// readSparse reads what appendSparse wrote for n values: nil when none is
// set.
func readSparse(r *wire.Reader, n int) []int64 {
	m := r.Count(n)
	if m == 0 || r.Err() != nil {
		return nil
	}
	out := make([]int64, n)
	i := 0
	for k := 0; k < m && r.Err() == nil; k++ {
		gap := r.Uvarint()
		if (k > 0 && gap == 0) || gap >= uint64(n-i) {
			r.Fail(wire.ErrMalformed) // indexes rise, within the entry's endpoints
			return nil
		}
		i += int(gap)
		out[i] = r.Varint()
	}
	return out
}

// appendBits appends n bits of flags (missing ones false).
func appendBits(b []byte, flags []bool, n int) []byte {
	bits := make([]byte, (n+7)/8)
	for i, f := range flags[:min(n, len(flags))] {
		if f {
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return append(b, bits...)
}

// AppendEntry appends e with its endpoint list.
func AppendEntry(b []byte, e Entry) []byte {
	b = appendHeader(b, e)
	b = binary.AppendUvarint(b, uint64(len(e.Endpoints)))
	for _, id := range e.Endpoints {
		b = wire.AppendString(b, id)
	}
	return appendCountsAndDown(b, e)
}

// AppendDelta appends e without its endpoint list, named by its digest.
func AppendDelta(b []byte, e Entry) []byte {
	b = appendHeader(b, e)
	b = binary.LittleEndian.AppendUint64(b, Digest(e.Endpoints))
	b = binary.AppendUvarint(b, uint64(len(e.Endpoints)))
	return appendCountsAndDown(b, e)
}

// AppendEntries appends a table of entries.
func AppendEntries(b []byte, entries []Entry) []byte {
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = AppendEntry(b, e)
	}
	return b
}

// Delta is a decoded delta: an entry whose Endpoints are nil until
// [Delta.Expand] fills them from a table holding the list of Digest.
type Delta struct {
	Entry  Entry
	Digest uint64
}

// Expand fills the delta's endpoint list from t. It reports false when t
// holds no list with the delta's digest, or the list's length differs.
func (d *Delta) Expand(t *EntryTable) bool {
	eps, ok := t.EndpointsOf(d.Digest)
	if !ok || len(eps) != len(d.Entry.Counts) {
		return false
	}
	d.Entry.Endpoints = eps
	return true
}

// DecodeEntry reads an entry written by [AppendEntry], and nothing after it.
func DecodeEntry(b []byte) (Entry, error) {
	r := wire.NewReader(b)
	e := readEntry(r)
	return e, r.Done()
}

// DecodeDelta reads a delta written by [AppendDelta], and nothing after it.
func DecodeDelta(b []byte) (Delta, error) {
	r := wire.NewReader(b)
	d := Delta{Entry: readHeader(r)}
	d.Digest = r.U64()
	readCountsAndDown(r, &d.Entry, r.Count(maxEndpoints))
	return d, r.Done()
}

// DecodeEntries reads a table written by [AppendEntries], and nothing after it.
func DecodeEntries(b []byte) ([]Entry, error) {
	r := wire.NewReader(b)
	n := r.Count(maxEntries)
	var out []Entry
	for i := 0; i < n && r.Err() == nil; i++ {
		out = append(out, readEntry(r))
	}
	return out, r.Done()
}

func readHeader(r *wire.Reader) Entry {
	e := Entry{Node: r.String(), Addr: r.String()}
	e.Incarnation, e.Version, e.Stamp = r.Uvarint(), r.Uvarint(), r.Varint()
	e.Left = r.Byte()&1 != 0
	return e
}

func readCountsAndDown(r *wire.Reader, e *Entry, n int) {
	// Each endpoint takes at least two bytes (its count and its K): a
	// count the bytes left cannot carry sizes nothing.
	if !r.Room(n, 2) {
		return
	}
	e.Counts = make([]int64, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		e.Counts[i] = clampCount(r.Varint())
	}
	e.KV = make([]int64, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		e.KV[i] = clampCount(r.Varint())
	}
	e.KVShared = readSparse(r, n)
	for i := range e.KVShared {
		// A shared part is within its K: a peer's larger one is clamped,
		// so the view's own part (K less it) is never negative.
		e.KVShared[i] = min(max(e.KVShared[i], 0), max(e.KV[i], 0))
	}
	e.Down, e.Listed = readBits(r, n), readBits(r, n)
	e.Failing, e.Served = splitEvidence(e.Down, readBits(r, n))
}

func readBits(r *wire.Reader, n int) []bool {
	out := make([]bool, n)
	bits := r.Bytes((n + 7) / 8)
	for i := 0; i < n && r.Err() == nil; i++ {
		out[i] = bits[i/8]&(1<<(i%8)) != 0
	}
	return out
}

func readEntry(r *wire.Reader) Entry {
	e := readHeader(r)
	n := r.Count(maxEndpoints)
	if !r.Room(n, 3) { // an ID's length, its count and its K, at least
		return e
	}
	e.Endpoints = make([]string, 0, min(n, 1024))
	for i := 0; i < n && r.Err() == nil; i++ {
		id := r.String()
		if i > 0 && id <= e.Endpoints[i-1] {
			r.Fail(wire.ErrMalformed) // entries keep their endpoints sorted and unique
		}
		e.Endpoints = append(e.Endpoints, id)
	}
	readCountsAndDown(r, &e, n)
	return e
}
