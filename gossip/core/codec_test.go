package core

import (
	"encoding/binary"
	"math"
	"runtime"
	"slices"
	"testing"
)

// A peer's counts are loads: never negative, and bounded, so that a peer
// with a bug (or a key holder who means harm) cannot make the sums the
// bound reads negative, or overflow them. Decoding clamps each count and
// each K to [0, MaxCount]; a shared part stays within its K.
func TestDecodedCountsAreClamped(t *testing.T) {
	e := Entry{Node: "r1", Addr: "10.0.0.1:7946", Incarnation: 1, Version: 1,
		Endpoints: []string{"a", "b", "c"},
		Counts:    []int64{-5, math.MaxInt64, 7},
		KV:        []int64{math.MaxInt64, -3, 9},
		KVShared:  []int64{math.MaxInt64, 0, 4},
		Down:      make([]bool, 3), Listed: make([]bool, 3)}
	got, err := DecodeEntries(AppendEntries(nil, []Entry{e}))
	if err != nil || len(got) != 1 {
		t.Fatalf("decode: %v, %d entries", err, len(got))
	}
	if want := []int64{0, MaxCount, 7}; !slices.Equal(got[0].Counts, want) {
		t.Errorf("counts %v, want %v", got[0].Counts, want)
	}
	if want := []int64{MaxCount, 0, 9}; !slices.Equal(got[0].KV, want) {
		t.Errorf("K %v, want %v", got[0].KV, want)
	}
	if want := []int64{MaxCount, 0, 4}; !slices.Equal(got[0].KVShared, want) {
		t.Errorf("shared parts %v, want %v", got[0].KVShared, want)
	}
	// The sum over the most entries a table holds stays far from overflow.
	if MaxCount > math.MaxInt64/maxEntries/4 {
		t.Fatalf("MaxCount %d: %d entries' sum could overflow", MaxCount, maxEntries)
	}
}

// A count read from the wire sizes nothing beyond what the bytes left
// could carry (internal/wire's rule): each endpoint of an entry takes at
// least two bytes (its count and its K). Until stop 40 a 19-byte
// truncated delta naming 65,536 endpoints made the decoder allocate about
// 1.4 MB on the merge loop before it failed.
func TestTruncatedDeltaAllocatesLittle(t *testing.T) {
	msg := appendHeader(nil, Entry{Node: "x", Addr: "y", Incarnation: 1, Version: 1})
	msg = binary.LittleEndian.AppendUint64(msg, 0) // the endpoints' digest
	msg = binary.AppendUvarint(msg, maxEndpoints)  // n, and nothing after
	entry := appendHeader(nil, Entry{Node: "x", Addr: "y", Incarnation: 1, Version: 1})
	entry = binary.AppendUvarint(entry, maxEndpoints)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const runs = 10
	for range runs {
		if _, err := DecodeDelta(msg); err == nil {
			t.Fatal("decoded a truncated delta")
		}
		if _, err := DecodeEntry(entry); err == nil {
			t.Fatal("decoded a truncated entry")
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 64<<10 {
		t.Fatalf("a %d-byte truncated delta and a %d-byte entry allocated %d bytes a decode", len(msg), len(entry), per)
	}
}
