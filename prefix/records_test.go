package prefix

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/prefixring/prefixring/gossip/core/coretest"
	"github.com/prefixring/prefixring/internal/wire"
)

// sameRecord compares records as the wire carries them (an empty slice and
// nil alike).
func sameRecord(a, b SketchRecord) bool {
	return a.Node == b.Node && a.Addr == b.Addr && a.Incarnation == b.Incarnation && a.Version == b.Version &&
		a.Fanout == b.Fanout && slices.EqualFunc(a.Summary, b.Summary, func(x, y SummaryEntry) bool {
		return x.Hash == y.Hash && x.Count == y.Count && slices.Equal(x.Next, y.Next)
	})
}

func sameRecords(a, b []SketchRecord) bool { return slices.EqualFunc(a, b, sameRecord) }

func testRecords() []SketchRecord {
	s0, s1, s2 := testSummaries()
	return []SketchRecord{
		{Node: "r0", Addr: "10.0.0.1:7946", Incarnation: 1 << 62, Version: 1, Fanout: 4, Summary: normalizeSummary(s0)},
		{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 3, Version: 1 << 40, Fanout: 64, Summary: normalizeSummary(s1)},
		{Node: "r2", Addr: "", Incarnation: 0, Version: 0, Fanout: 2, Summary: normalizeSummary(s2)},
		{Node: "r3", Addr: "10.0.0.4:7946", Incarnation: 1, Version: 1, Fanout: 4,
			Groups: []SummaryEntry{{Hash: 1, Count: 30}, {Hash: 1 << 63, Count: 70}}, Requests: 100},
		{Node: "r4", Addr: "10.0.0.5:7946", Incarnation: 1, Version: 1, Fanout: 4,
			Summary: []SummaryEntry{{Hash: 0, Count: 0}, {Hash: ^uint64(0), Count: ^uint64(0), Next: []uint32{0, ^uint32(0)}}}},
	}
}

// rawRecord builds a records section of one record by hand: n claimed
// entries, then body.
func rawRecord(node string, fanout, n uint64, body ...byte) []byte {
	return append([]byte{sectionRecords, 1}, rawRecordBody(node, fanout, n, body...)...)
}

func rawRecordBody(node string, fanout, n uint64, body ...byte) []byte {
	return rawRecordGroups(node, fanout, n, body, []byte{0, 0}) // no requests, no groups
}

// rawRecordGroups is a record body whose summary entries are body and whose
// group part (requests, g, g groups) is groups.
func rawRecordGroups(node string, fanout, n uint64, body, groups []byte) []byte {
	var b []byte
	b = wire.AppendString(b, node)
	b = wire.AppendString(b, "10.0.0.1:7946")
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendUvarint(b, fanout)
	b = binary.AppendUvarint(b, n)
	b = append(b, body...)
	return append(b, groups...)
}

// rawGroups is a record's group part: requests, then one count of 5 per
// hash.
func rawGroups(requests uint64, n uint64, hashes ...uint64) []byte {
	b := binary.AppendUvarint(nil, requests)
	b = binary.AppendUvarint(b, n)
	for _, h := range hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
		b = binary.AppendUvarint(b, 5)
	}
	return b
}

// rawEntry is one summary entry claiming k continuations, followed by next.
func rawEntry(h uint64, k uint64, next ...uint32) []byte {
	b := binary.LittleEndian.AppendUint64(nil, h)
	b = binary.AppendUvarint(b, 9)
	b = binary.AppendUvarint(b, k)
	for _, x := range next {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func join(parts ...[]byte) []byte { return slices.Concat(parts...) }

// TestSketchWireRejects: malformed, oversized and lying messages are
// refused with an error, without panicking or allocating what they claim.
func TestSketchWireRejects(t *testing.T) {
	nexts := func(k int) []uint32 {
		out := make([]uint32, k)
		for i := range out {
			out[i] = uint32(i)
		}
		return out
	}
	entries := func(n int) []byte {
		var b []byte
		for i := range n {
			b = append(b, rawEntry(uint64(i), 2, 1, 2)...)
		}
		return b
	}
	cases := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"valid by hand", rawRecord("r0", 4, 2, join(rawEntry(1, 2, 3, 4), rawEntry(2, 0))...), true},
		{"groups", join([]byte{sectionRecords, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, 2, 7, 9))), true},
		{"groups unsorted", join([]byte{sectionRecords, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, 2, 9, 7))), false},
		{"groups claimed beyond the bytes", join([]byte{sectionRecords, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, 50, 7))), false},
		{"groups past maxSketchEntries", join([]byte{sectionRecords, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, maxSketchEntries+1))), false},
		{"no group part", join([]byte{sectionRecords, 1}, rawRecordGroups("r0", 4, 0, nil, nil)), false},
		{"64 continuations", rawRecord("r0", 64, 1, rawEntry(1, 64, nexts(64)...)...), true},
		{"1024 entries", rawRecord("r0", 4, 1024, entries(1024)...), true},
		{"1025 entries", rawRecord("r0", 4, 1025, entries(1025)...), false},
		{"65 continuations", rawRecord("r0", 4, 1, rawEntry(1, 65, nexts(65)...)...), false},
		{"entries claimed beyond the bytes", rawRecord("r0", 4, 1000, entries(3)...), false},
		{"continuations claimed beyond the bytes", rawRecord("r0", 4, 1, rawEntry(1, 60, 1, 2)...), false},
		{"a huge entry count", rawRecord("r0", 4, 1<<62), false},
		{"a count past 64 bits", append(rawRecord("r0", 4, 0)[:len(rawRecord("r0", 4, 0))-1], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), false},
		{"hashes not increasing", rawRecord("r0", 4, 2, join(rawEntry(2, 0), rawEntry(2, 0))...), false},
		{"hashes decreasing", rawRecord("r0", 4, 2, join(rawEntry(2, 0), rawEntry(1, 0))...), false},
		{"continuations repeated", rawRecord("r0", 4, 1, rawEntry(1, 2, 5, 5)...), false},
		{"continuations unsorted", rawRecord("r0", 4, 1, rawEntry(1, 2, 6, 5)...), false},
		{"fanout 1", rawRecord("r0", 1, 0), false},
		{"fanout 65", rawRecord("r0", 65, 0), false},
		{"no node", rawRecord("", 4, 0), false},
		{"a node name over 4 KiB", rawRecord(string(make([]byte, wire.MaxString+1)), 4, 0), false},
		{"trailing byte", rawRecord("r0", 4, 0, 0), false},
		{"no records", []byte{sectionRecords, 0}, true},
		{"two records", join([]byte{sectionRecords, 2}, rawRecordBody("r0", 4, 0), rawRecordBody("r1", 4, 0)), true},
		{"fewer records than counted", join([]byte{sectionRecords, 3}, rawRecordBody("r0", 4, 0), rawRecordBody("r1", 4, 0)), false},
		{"a huge record count", binary.AppendUvarint([]byte{sectionRecords}, 1<<14), false},
		{"records past maxRecords", binary.AppendUvarint([]byte{sectionRecords}, 1<<14+1), false},
		{"a malformed record", join([]byte{sectionRecords, 1}, rawRecordBody("r0", 1, 0)), false},
		{"versions", appendVersions(nil, SketchVersion{"r1", 1, 2}), true},
		{"versions of nothing", appendVersions(nil), true},
		{"more versions than bytes", join([]byte{sectionVersions}, binary.AppendUvarint(nil, 1000), []byte{1, 'a', 1, 1}), false},
		{"versions past maxRecords", join([]byte{sectionVersions}, binary.AppendUvarint(nil, 1<<14+1)), false},
		{"an unknown section", []byte{9, 0}, false},
		{"nothing", nil, false},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		recs, vs, err := decodeSection(c.b)
		runtime.ReadMemStats(&after)
		if (err == nil) != c.ok {
			t.Fatalf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if err == nil && c.b[0] == sectionRecords {
			if re := appendRecords(nil, recs...); !bytes.Equal(re, c.b) {
				t.Fatalf("%s: re-encodes as %x", c.name, re)
			}
		}
		if err == nil && c.b[0] == sectionVersions {
			if re := appendVersions(nil, vs...); !bytes.Equal(re, c.b) {
				t.Fatalf("%s: re-encodes as %x", c.name, re)
			}
		}
		// Allocation follows the message's length, not its claims.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64*len(c.b))+64<<10 {
			t.Fatalf("%s: %d-byte message allocated %d bytes", c.name, len(c.b), grew)
		}
	}
}

// TestSketchMessageSize measures the encoded sizes DESIGN.md states.
func TestSketchMessageSize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	summary := func(n, k int) []SummaryEntry {
		out := make([]SummaryEntry, n)
		for i := range out {
			out[i] = SummaryEntry{Hash: r.Uint64(), Count: uint64(2 + r.IntN(5000))}
			for range k {
				out[i].Next = append(out[i].Next, r.Uint32())
			}
		}
		return normalizeSummary(out)
	}
	rec := SketchRecord{Node: "prefixring-7f9c4d8b6-xk2lp", Addr: "10.244.12.34:7946", Incarnation: 1 << 62, Version: 1 << 20, Fanout: 4}
	rec.Summary = summary(256, 4)
	one := len(appendRecords(nil, rec))
	recs := make([]SketchRecord, 8)
	for i := range recs {
		recs[i] = rec
		recs[i].Node = fmt.Sprintf("prefixring-7f9c4d8b6-xk2l%d", i)
	}
	eight := len(appendRecords(nil, recs...))
	vers := make([]SketchVersion, len(recs))
	for i, r := range recs {
		vers[i] = SketchVersion{r.Node, r.Incarnation, r.Version}
	}
	versions := len(appendVersions(nil, vers...))
	big := rec
	big.Summary = summary(maxSketchEntries, maxSketchNext)
	most := len(appendRecords(nil, big))
	t.Logf("sketch section: 256 entries x 4 continuations: %d B (%.1f B/entry); push/pull of 8 such, on a join: %d B, periodic (versions): %d B; 1024 x 64 (the most): %d B",
		one, float64(one)/256, eight, versions, most)
	if one < 256*(8+1+1+16) || one > 256*(8+2+1+16)+64 {
		t.Fatalf("256 x 4: %d bytes", one)
	}
	if most > 1024*(8+2+1+256)+64 {
		t.Fatalf("1024 x 64: %d bytes", most)
	}
}

func randomRecord(r *rand.Rand) SketchRecord {
	sum := make([]SummaryEntry, r.IntN(4))
	for i := range sum {
		sum[i] = SummaryEntry{Hash: uint64(r.IntN(4)), Count: uint64(r.IntN(3))}
		for range r.IntN(4) {
			sum[i].Next = append(sum[i].Next, uint32(r.IntN(5)))
		}
	}
	return SketchRecord{
		Node: fmt.Sprintf("n%d", r.IntN(3)), Addr: "10.0.0.1:7946",
		Incarnation: uint64(r.IntN(2)), Version: uint64(r.IntN(3)), Fanout: 2 + 2*r.IntN(2),
		Summary: normalizeSummary(sum),
	}
}

func randomRecords(r *rand.Rand) []SketchRecord {
	out := make([]SketchRecord, r.IntN(5))
	for i := range out {
		out[i] = randomRecord(r)
	}
	return out
}

func mergedRecords(parts ...[]SketchRecord) []SketchRecord {
	s := newRecordTable()
	for _, p := range parts {
		s.Merge(p...)
	}
	return s.Records()
}

// TestSketchMergeLaws: the records' merge laws, and the table depends on
// the set of records, not on their order.
func TestSketchMergeLaws(t *testing.T) {
	coretest.CheckMergeLaws(t, coretest.State[*recordTable, SketchRecord]{
		New: newRecordTable, Merge: (*recordTable).Merge, Values: (*recordTable).Records,
		Value: randomRecord, ReportsChange: true,
	})
	r := rand.New(rand.NewPCG(coretest.Seed(t), 1))
	for range 2000 {
		ab := mergedRecords(randomRecords(r), randomRecords(r))
		rev := slices.Clone(ab)
		slices.Reverse(rev)
		if x, y := MergeRecords(ab).Hashes(), MergeRecords(rev).Hashes(); !slices.Equal(x, y) {
			t.Fatalf("table %x reversed %x", x, y)
		}
	}
}

// TestSketchRestartWins: a restart's newer incarnation wins over any
// version of the old one.
func TestSketchRestartWins(t *testing.T) {
	s := newRecordTable()
	s.Merge(SketchRecord{Node: "a", Incarnation: 1, Version: 99, Fanout: 4})
	if ch := s.Merge(SketchRecord{Node: "a", Incarnation: 2, Version: 1, Fanout: 4}); len(ch) != 1 {
		t.Fatal("a restart's first record did not replace the old incarnation's")
	}
	if ch := s.Merge(SketchRecord{Node: "a", Incarnation: 1, Version: 100, Fanout: 4}); len(ch) != 0 {
		t.Fatal("an old incarnation's late record came back")
	}
}

// TestNormalizeSummary: what is published is canonical and within the
// wire's bounds, whatever the source returns.
func TestNormalizeSummary(t *testing.T) {
	in := []SummaryEntry{{Hash: 9, Count: 1, Next: []uint32{3, 1, 3, 2}}, {Hash: 2, Count: 5}, {Hash: 9, Count: 7}}
	got := normalizeSummary(in)
	if len(got) != 2 || got[0].Hash != 2 || got[1].Hash != 9 || !slices.Equal(got[1].Next, []uint32{1, 2, 3}) {
		t.Fatalf("%+v", got)
	}
	if !slices.Equal(in[0].Next, []uint32{3, 1, 3, 2}) {
		t.Fatal("normalizing changed the source's slices")
	}
	many := make([]SummaryEntry, 3000)
	for i := range many {
		many[i] = SummaryEntry{Hash: uint64(3000 - i), Count: uint64(i)}
		for j := range 100 {
			many[i].Next = append(many[i].Next, uint32(j))
		}
	}
	got = normalizeSummary(many)
	if len(got) != maxSketchEntries || got[0].Hash != 1 || len(got[0].Next) != maxSketchNext {
		t.Fatalf("%d entries, first %d with %d continuations", len(got), got[0].Hash, len(got[0].Next))
	}
	if _, _, err := decodeSection(appendRecords(nil, SketchRecord{Node: "r0", Fanout: 4, Summary: got})); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeSketch(f *testing.F) {
	recs := testRecords()
	for _, r := range recs {
		f.Add(appendRecords(nil, r))
	}
	f.Add(appendRecords(nil, recs...))
	f.Add(appendVersions(nil, SketchVersion{"r1", 1, 2}, SketchVersion{"r2", 3, 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _, err := decodeSection(b)
		if err != nil {
			return
		}
		for _, r := range recs {
			if r.Fanout < minFanout || r.Fanout > maxSketchNext || len(r.Summary) > maxSketchEntries {
				t.Fatalf("record out of bounds: %+v", r)
			}
			for i, e := range r.Summary {
				if len(e.Next) > maxSketchNext || (i > 0 && e.Hash <= r.Summary[i-1].Hash) ||
					!slices.IsSorted(e.Next) || len(slices.Compact(slices.Clone(e.Next))) != len(e.Next) {
					t.Fatalf("entry not canonical: %+v", e)
				}
			}
			again, _, err := decodeSection(appendRecords(nil, r))
			if err != nil || !sameRecords(again, []SketchRecord{r}) {
				t.Fatalf("re-encoding: %v %+v", err, again)
			}
		}
	})
}

// TestSketchWire: records and versions round-trip, and every truncation
// or trailing byte is refused.
func TestSketchWire(t *testing.T) {
	recs := testRecords()
	vers := []SketchVersion{{"r0", 1 << 62, 1}, {"r1", 0, 0}, {"r2", 3, 1 << 40}}
	var msgs [][]byte
	for _, rs := range [][]SketchRecord{nil, recs[:1], recs[1:2], recs} {
		b := appendRecords(nil, rs...)
		got, vs, err := decodeSection(b)
		if err != nil || vs != nil || !sameRecords(got, rs) {
			t.Fatalf("%d records: %v %+v", len(rs), err, got)
		}
		msgs = append(msgs, b)
	}
	for _, v := range [][]SketchVersion{nil, vers} {
		b := appendVersions(nil, v...)
		got, vs, err := decodeSection(b)
		if err != nil || got != nil || vs == nil || !slices.Equal(vs, v) {
			t.Fatalf("%d versions: %v %+v", len(v), err, vs)
		}
		msgs = append(msgs, b)
	}
	for _, b := range msgs {
		for i := range len(b) {
			if _, _, err := decodeSection(b[:i]); err == nil {
				t.Fatalf("kind %d: truncated to %d of %d bytes decoded", b[0], i, len(b))
			}
		}
		if _, _, err := decodeSection(append(slices.Clone(b), 0)); err == nil {
			t.Fatalf("kind %d: a trailing byte decoded", b[0])
		}
	}
}

// Group counts merge into shares of all requests, and a publication is due
// only when a group's share moves by more than a tenth.
func TestSketchGroupShares(t *testing.T) {
	a := SketchRecord{Node: "a", Fanout: 4, Groups: []SummaryEntry{{Hash: 7, Count: 300}, {Hash: 9, Count: 100}}, Requests: 1000}
	b := SketchRecord{Node: "b", Fanout: 4, Groups: []SummaryEntry{{Hash: 7, Count: 100}}, Requests: 1000}
	table := MergeRecords([]SketchRecord{a, b})
	if got := table.Share(7); got != 0.2 {
		t.Fatalf("share of 7: %v, want (300+100)/2000", got)
	}
	if got := table.Share(9); got != 0.05 {
		t.Fatalf("share of 9: %v, want 100/2000", got)
	}
	if table.EarlyShares() {
		t.Fatal("2000 requests gave early shares")
	}
	few := a
	few.Groups, few.Requests = []SummaryEntry{{Hash: 7, Count: 30}}, 100
	if early := MergeRecords([]SketchRecord{few}); early.Share(7) != 0.3 || !early.EarlyShares() {
		t.Fatalf("from 100 requests: share %v, early %v; want an early 0.3", early.Share(7), early.EarlyShares())
	}
	few.Groups, few.Requests = []SummaryEntry{{Hash: 7, Count: 3}}, 10
	if got := MergeRecords([]SketchRecord{few}).Share(7); got != 0 {
		t.Fatalf("a share of %v from 10 requests; want none below EarlyShareRequests", got)
	}
	if MergeRecords([]SketchRecord{b, a}).Share(7) != table.Share(7) {
		t.Fatal("the merge depends on the order")
	}
	near := a
	near.Groups = []SummaryEntry{{Hash: 7, Count: 320}, {Hash: 9, Count: 100}}
	near.Requests = 1040
	if !sameShares(a, near) {
		t.Fatal("a share moved by 2% republished")
	}
	far := near
	far.Groups = []SummaryEntry{{Hash: 7, Count: 400}, {Hash: 9, Count: 100}}
	if sameShares(a, far) {
		t.Fatal("a share moved by a third did not republish")
	}
	other := a
	other.Groups = []SummaryEntry{{Hash: 7, Count: 300}, {Hash: 11, Count: 100}}
	if sameShares(a, other) {
		t.Fatal("a new group did not republish")
	}
}
