package gossip

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// randomEntry draws from small ranges so equal versions, and even equal
// (incarnation, version, stamp) triples with different content, occur.
func randomEntry(r *rand.Rand) Entry {
	eps := []string{"a", "b", "c"}[:1+r.IntN(3)]
	e := Entry{
		Node: fmt.Sprintf("n%d", r.IntN(3)), Addr: "10.0.0.1:7946",
		Incarnation: uint64(r.IntN(2)), Version: uint64(r.IntN(3)), Stamp: int64(r.IntN(2)),
		Left: r.IntN(5) == 0, Endpoints: eps,
		Counts: make([]int64, len(eps)), Down: make([]bool, len(eps)), Listed: make([]bool, len(eps)),
	}
	for i := range eps {
		e.Counts[i] = int64(r.IntN(3))
		e.Down[i] = r.IntN(4) == 0
		e.Listed[i] = r.IntN(3) != 0
	}
	return e
}

func randomState(r *rand.Rand) []Entry {
	out := make([]Entry, r.IntN(5))
	for i := range out {
		out[i] = randomEntry(r)
	}
	return out
}

func merged(parts ...[]Entry) []Entry {
	s := NewState()
	for _, p := range parts {
		s.Merge(p...)
	}
	return s.Entries()
}

// lawRand returns the law tests' source: seed 1, or $GOSSIP_SEED to explore.
func lawRand(t *testing.T) *rand.Rand {
	seed := uint64(1)
	if s := os.Getenv("GOSSIP_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 1))
}

func TestMergeLawIdempotent(t *testing.T) {
	r := lawRand(t)
	for range 2000 {
		a := randomState(r)
		s := NewState()
		s.Merge(a...)
		if ch := s.Merge(s.Entries()...); len(ch) != 0 {
			t.Fatalf("merging a state into itself changed %v", ch)
		}
		if got, want := merged(a, a), merged(a); !reflect.DeepEqual(got, want) {
			t.Fatalf("a∪a = %v, a = %v", got, want)
		}
	}
}

func TestMergeLawCommutative(t *testing.T) {
	r := lawRand(t)
	for range 2000 {
		a, b := randomState(r), randomState(r)
		if ab, ba := merged(a, b), merged(b, a); !reflect.DeepEqual(ab, ba) {
			t.Fatalf("a∪b = %v\nb∪a = %v", ab, ba)
		}
	}
}

func TestMergeLawAssociative(t *testing.T) {
	r := lawRand(t)
	for range 2000 {
		a, b, c := randomState(r), randomState(r), randomState(r)
		left := merged(merged(a, b), c)
		right := merged(a, merged(b, c))
		if !reflect.DeepEqual(left, right) {
			t.Fatalf("(a∪b)∪c = %v\na∪(b∪c) = %v", left, right)
		}
	}
}

// TestMergeReturnsOnlyTheChange: what Merge returns, merged into the old
// state, gives the new state; and it holds nothing the old state had.
func TestMergeReturnsOnlyTheChange(t *testing.T) {
	r := lawRand(t)
	for range 2000 {
		a, b := randomState(r), randomState(r)
		s := NewState()
		s.Merge(a...)
		change := s.Merge(b...)
		if got, want := merged(a, change), s.Entries(); !reflect.DeepEqual(got, want) {
			t.Fatalf("a∪change = %v, a∪b = %v", got, want)
		}
		old := NewState()
		old.Merge(a...)
		for _, e := range change {
			if o, ok := old.Get(e.Node); ok && reflect.DeepEqual(o, e) {
				t.Fatalf("change repeats known entry %v", e)
			}
		}
	}
}

func TestNewerIncarnationWinsOverHigherVersion(t *testing.T) {
	s := NewState()
	s.Merge(Entry{Node: "a", Incarnation: 1, Version: 99})
	if ch := s.Merge(Entry{Node: "a", Incarnation: 2, Version: 1}); len(ch) != 1 {
		t.Fatal("a restart's first entry did not replace the old incarnation's")
	}
	if ch := s.Merge(Entry{Node: "a", Incarnation: 1, Version: 100}); len(ch) != 0 {
		t.Fatal("an old incarnation's late entry came back")
	}
}

func TestForgetDropsOldEntriesAndTheyStayDead(t *testing.T) {
	s := NewState()
	old := NewEntry("old", "", 1, 1, t0, []string{"a"}, map[string]int64{"a": 7}, nil)
	fresh := NewEntry("fresh", "", 1, 1, t0.Add(58*time.Second), []string{"a"}, map[string]int64{"a": 1}, nil)
	self := NewEntry("self", "", 1, 1, t0, []string{"a"}, nil, nil)
	s.Merge(old, fresh, self)
	now := t0.Add(61 * time.Second)
	if gone := s.Forget(now, time.Minute, "self"); !reflect.DeepEqual(gone, []string{"old"}) {
		t.Fatalf("forgot %v, want [old]", gone)
	}
	if _, ok := s.Get("self"); !ok {
		t.Fatal("forgot its own entry")
	}
	// A peer that has not forgotten yet pushes the old entry back: it is
	// merged, but it is as old as before, so it does not count.
	s.Merge(old)
	l := Liveness{Self: "self", StaleAfter: 5 * time.Second}
	if r := SumRemote(s.Entries(), l, now); r.Load("a") != 1 || r.Total() != 1 {
		t.Fatalf("resurrected entry counts: a=%d total=%d, want 1 1", r.Load("a"), r.Total())
	}
}
