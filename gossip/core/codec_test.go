package core

import (
	"math"
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
