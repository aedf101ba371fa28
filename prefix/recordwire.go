package prefix

import (
	"encoding/binary"
	"fmt"

	"github.com/prefixring/prefixring/internal/wire"
)

// The sketch's section of a gossip message (tag [ShareTag]) starts with
// what it carries:
//
//	records:  1, m, then m records, each: node, addr, incarnation,
//	          version, fanout, n, then n entries: hash (8 bytes LE),
//	          count, k, k continuations (4 bytes LE each); then requests,
//	          g, and g group counts: hash (8 bytes LE), count
//	versions: 2, m, then m versions: node, incarnation, version
//
// Strings are length-prefixed, integers varints. Hashes are strictly
// increasing within a record and so are the continuations within an entry
// (a canonical form: two equal summaries encode alike). A record has at
// most 1024 entries and an entry at most 64 continuations; the decoder
// refuses more, and any count that claims more items than the bytes left
// could hold.
const (
	sectionRecords  byte = 1
	sectionVersions byte = 2

	maxRecords = 1 << 14

	minEntryBytes   = 8 + 1 + 1             // hash, count, k
	minRecordBytes  = 2 + 1 + 1 + 1 + 1 + 1 // node (non-empty), addr, inc, ver, fanout, n
	minVersionBytes = 1 + 1 + 1             // node, inc, ver
)

func appendRecord(b []byte, r SketchRecord) []byte {
	b = wire.AppendString(b, r.Node)
	b = wire.AppendString(b, r.Addr)
	b = binary.AppendUvarint(b, r.Incarnation)
	b = binary.AppendUvarint(b, r.Version)
	b = binary.AppendUvarint(b, uint64(r.Fanout))
	b = binary.AppendUvarint(b, uint64(len(r.Summary)))
	for _, e := range r.Summary {
		b = binary.LittleEndian.AppendUint64(b, e.Hash)
		b = binary.AppendUvarint(b, e.Count)
		b = binary.AppendUvarint(b, uint64(len(e.Next)))
		for _, x := range e.Next {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
	}
	b = binary.AppendUvarint(b, r.Requests)
	b = binary.AppendUvarint(b, uint64(len(r.Groups)))
	for _, g := range r.Groups {
		b = binary.LittleEndian.AppendUint64(b, g.Hash)
		b = binary.AppendUvarint(b, g.Count)
	}
	return b
}

// appendRecords appends a records section. A record is expected in its
// normalized form (see [SketchRecord]); one that is not decodes as
// malformed.
func appendRecords(b []byte, recs ...SketchRecord) []byte {
	b = append(b, sectionRecords)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = appendRecord(b, r)
	}
	return b
}

// appendVersions appends a versions section.
func appendVersions(b []byte, vs ...SketchVersion) []byte {
	b = append(b, sectionVersions)
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = wire.AppendString(b, v.Node)
		b = binary.AppendUvarint(b, v.Incarnation)
		b = binary.AppendUvarint(b, v.Version)
	}
	return b
}

// decodeSection reads a section written by [appendRecords] (records set)
// or [appendVersions] (versions set, possibly empty, never nil), and
// nothing after it. It never panics on bad input, and allocates what the
// bytes could carry, not what their counts claim.
func decodeSection(b []byte) (recs []SketchRecord, versions []SketchVersion, err error) {
	r := wire.NewReader(b)
	switch k := r.Byte(); k {
	case sectionRecords:
		recs = readRecords(r)
	case sectionVersions:
		versions = readVersions(r)
	default:
		if r.Err() == nil {
			return nil, nil, fmt.Errorf("prefix: unknown sketch section %d", k)
		}
	}
	if err := r.Done(); err != nil {
		return nil, nil, err
	}
	return recs, versions, nil
}

func readRecords(r *wire.Reader) []SketchRecord {
	n := r.Count(maxRecords)
	if !r.Room(n, minRecordBytes) {
		return nil
	}
	out := make([]SketchRecord, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		out = append(out, readRecord(r))
	}
	return out
}

func readVersions(r *wire.Reader) []SketchVersion {
	n := r.Count(maxRecords)
	if !r.Room(n, minVersionBytes) {
		return nil
	}
	out := make([]SketchVersion, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		out = append(out, SketchVersion{Node: r.String(), Incarnation: r.Uvarint(), Version: r.Uvarint()})
	}
	return out
}

func readRecord(r *wire.Reader) SketchRecord {
	rec := SketchRecord{Node: r.String(), Addr: r.String()}
	rec.Incarnation, rec.Version = r.Uvarint(), r.Uvarint()
	rec.Fanout = r.Count(maxSketchNext)
	if r.Err() == nil && (rec.Fanout < minFanout || rec.Node == "") {
		r.Fail(wire.ErrMalformed)
	}
	n := r.Count(maxSketchEntries)
	if !r.Room(n, minEntryBytes) {
		return SketchRecord{}
	}
	rec.Summary = make([]SummaryEntry, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		e := SummaryEntry{Hash: r.U64(), Count: r.Uvarint()}
		if i > 0 && e.Hash <= rec.Summary[i-1].Hash {
			r.Fail(wire.ErrMalformed)
		}
		k := r.Count(maxSketchNext)
		if !r.Room(k, 4) {
			break
		}
		e.Next = make([]uint32, k)
		for j := range e.Next {
			e.Next[j] = r.U32()
			if j > 0 && e.Next[j] <= e.Next[j-1] {
				r.Fail(wire.ErrMalformed)
			}
		}
		rec.Summary = append(rec.Summary, e)
	}
	rec.Requests = r.Uvarint()
	g := r.Count(maxSketchEntries)
	if !r.Room(g, 8+1) {
		return SketchRecord{}
	}
	rec.Groups = make([]SummaryEntry, 0, g)
	for i := 0; i < g && r.Err() == nil; i++ {
		e := SummaryEntry{Hash: r.U64(), Count: r.Uvarint()}
		if i > 0 && e.Hash <= rec.Groups[i-1].Hash {
			r.Fail(wire.ErrMalformed)
		}
		rec.Groups = append(rec.Groups, e)
	}
	return rec
}
