package workers

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newSet(node string, c *clock) *Set { return NewSet(node, c.now, time.Hour) }

// randomOps draws ops on a few URLs with colliding stamps and origins, so
// every tie-break is exercised.
func randomOps(r *rand.Rand, n int) []Op {
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = Op{
			URL:     []string{"http://a:1", "http://b:1", "http://c:1"}[r.IntN(3)],
			Stamp:   uint64(t0.UnixMilli())<<16 + uint64(r.IntN(4)),
			Origin:  []string{"r0", "r1"}[r.IntN(2)],
			Removed: r.IntN(2) == 0,
		}
	}
	return ops
}

func state(s *Set) []Op { return s.Ops() }

// The merge laws: applying the same ops in any order, in any grouping, any
// number of times, gives the same set.
func TestMergeIsCommutativeAssociativeIdempotent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := &clock{t0}
	for trial := range 200 {
		a, b, d := randomOps(r, 5), randomOps(r, 5), randomOps(r, 5)

		// commutative: a then b == b then a
		x, y := newSet("x", c), newSet("y", c)
		x.Merge(a)
		x.Merge(b)
		y.Merge(b)
		y.Merge(a)
		if !slices.Equal(state(x), state(y)) {
			t.Fatalf("trial %d: a,b gives %v; b,a gives %v", trial, state(x), state(y))
		}
		// associative: (a+b)+d == a+(b+d), grouping as whole states
		ab, bd := newSet("ab", c), newSet("bd", c)
		ab.Merge(a)
		ab.Merge(b)
		bd.Merge(b)
		bd.Merge(d)
		l, rr := newSet("l", c), newSet("r", c)
		l.Merge(ab.Ops())
		l.Merge(d)
		rr.Merge(a)
		rr.Merge(bd.Ops())
		if !slices.Equal(state(l), state(rr)) {
			t.Fatalf("trial %d: (a+b)+d gives %v; a+(b+d) gives %v", trial, state(l), state(rr))
		}
		// idempotent: merging a state into itself changes nothing
		before := state(l)
		if l.Merge(l.Ops()); !slices.Equal(before, state(l)) {
			t.Fatalf("trial %d: self-merge changed %v to %v", trial, before, state(l))
		}
	}
}

// Two replicas add and remove the same URL in the same millisecond, each
// without hearing the other: after they exchange ops, both hold the same
// set, and the URL's fate is the newer of the two replicas' last ops (by
// stamp, then origin), whichever order the ops arrive in.
func TestConcurrentAddAndRemoveConverge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 100 {
		c := &clock{t0}
		r0, r1 := newSet("r0", c), newSet("r1", c)
		r0.Add("http://w:8000")
		r1.Merge(r0.Ops())
		c.t = c.t.Add(time.Second)
		for _, s := range []*Set{r0, r1} {
			for range 1 + r.IntN(3) {
				if s.Has("http://w:8000") {
					s.Remove("http://w:8000")
				} else {
					s.Add("http://w:8000")
				}
			}
		}
		a, b := r0.Ops()[0], r1.Ops()[0]
		want := b
		if Newer(a, b) {
			want = a
		}
		r0.Merge([]Op{b})
		r1.Merge([]Op{a})
		if !slices.Equal(r0.Ops(), r1.Ops()) || r0.Ops()[0] != want {
			t.Fatalf("trial %d: r0 %v, r1 %v, want both %v", trial, r0.Ops(), r1.Ops(), want)
		}
		if r0.Has("http://w:8000") != !want.Removed {
			t.Fatalf("trial %d: registered %v after %v", trial, r0.Has("http://w:8000"), want)
		}
	}
}

// An exact tie (same stamp, same origin: one replica's op replayed with a
// different verdict, which only a bug or a restart with a clock reset can
// make) resolves to the add: a worker is not lost to a tie.
func TestExactTieAddWins(t *testing.T) {
	add := Op{URL: "u", Stamp: 7, Origin: "r0"}
	rm := add
	rm.Removed = true
	if !Newer(add, rm) || Newer(rm, add) {
		t.Fatal("a tie does not go to the add")
	}
}

// A replica whose clock is behind still orders its op after one it heard
// of: the hybrid clock never stamps below a stamp it has seen.
func TestClockBehindStillOrdersAfterWhatItHeard(t *testing.T) {
	fast, slow := &clock{t0.Add(time.Minute)}, &clock{t0}
	a, b := newSet("a", fast), newSet("b", slow)
	a.Add("http://w:1")
	b.Merge(a.Ops())
	b.Remove("http://w:1")
	a.Merge(b.Ops())
	if a.Has("http://w:1") || b.Has("http://w:1") {
		t.Fatalf("the slow clock's later remove lost: a %v b %v", a.Members(), b.Members())
	}
}

// Tombstones are dropped after their time to live, and an old tombstone
// heard later is not revived.
func TestTombstonesExpire(t *testing.T) {
	c := &clock{t0}
	s := newSet("r0", c)
	s.Add("http://w:1")
	s.Remove("http://w:1")
	old := s.Ops()
	if len(old) != 1 || !old[0].Removed {
		t.Fatalf("ops %v", old)
	}
	c.t = c.t.Add(30 * time.Minute)
	if n := s.GC(); n != 0 {
		t.Fatalf("GC dropped %d before the ttl", n)
	}
	c.t = c.t.Add(31 * time.Minute)
	if n := s.GC(); n != 1 || len(s.Ops()) != 0 {
		t.Fatalf("GC dropped %d, ops left %v", n, s.Ops())
	}
	if s.Merge(old); len(s.Ops()) != 0 {
		t.Fatalf("an expired tombstone came back: %v", s.Ops())
	}
}

// The router's set (NewSet with ttl 0) keeps a removal for a day, as
// docs/operating.md says: long enough that a replica that missed it
// cannot bring the worker back by republishing its add.
func TestTombstonesLastADayByDefault(t *testing.T) {
	c := &clock{t0}
	s := NewSet("r0", c.now, 0)
	s.Add("http://w:1")
	s.Remove("http://w:1")
	c.t = c.t.Add(24*time.Hour - time.Minute)
	if n := s.GC(); n != 0 {
		t.Fatalf("GC dropped %d tombstones within a day", n)
	}
	c.t = c.t.Add(2 * time.Minute)
	if n := s.GC(); n != 1 {
		t.Fatalf("GC dropped %d tombstones after a day, want 1", n)
	}
}

// Add and Remove report changes, and OnChange hears each, marked local.
func TestChangesAreReported(t *testing.T) {
	c := &clock{t0}
	s := newSet("r0", c)
	var heard []bool
	s.OnChange(func(local bool) { heard = append(heard, local) })
	if !s.Add("http://u:1") || s.Add("http://u:1") || !s.Remove("http://u:1") || s.Remove("http://u:1") || s.Remove("never") {
		t.Fatal("Add/Remove misreport changes")
	}
	peer := newSet("r1", c)
	c.t = c.t.Add(time.Second)
	peer.Add("http://v:1")
	if !s.Merge(peer.Ops()) || s.Merge(peer.Ops()) {
		t.Fatal("Merge misreports changes")
	}
	if want := []bool{true, true, false}; !slices.Equal(heard, want) {
		t.Fatalf("OnChange heard %v, want %v", heard, want)
	}
	if got := s.Members(); !slices.Equal(got, []string{"http://v:1"}) {
		t.Fatalf("members %v", got)
	}
}

// A peer's op stamped far in this replica's future is dropped, as a hybrid
// logical clock refuses a remote time beyond its maximum offset: taken in,
// it would carry the clock with it, so that every later stamp of this
// replica, and every tombstone, lay in that future and no tombstone ever
// aged out; at the stamp's greatest value the clock wrapped to 0 and a
// local remove lost to the add. An op within MaxClockAhead is applied.
func TestMergeDropsOpsFromTheFarFuture(t *testing.T) {
	c := &clock{t0}
	s := newSet("r1", c)
	for _, stamp := range []uint64{^uint64(0), uint64(t0.Add(MaxClockAhead+time.Second).UnixMilli()) << 16} {
		if s.Merge([]Op{{URL: "http://10.0.0.66:8000", Stamp: stamp, Origin: "r2"}}) || s.Has("http://10.0.0.66:8000") {
			t.Fatalf("stamp %#x: applied", stamp)
		}
	}
	if d := s.Dropped(); d.Future != 2 {
		t.Fatalf("dropped %+v, want 2 from the future", d)
	}
	s.Add("http://10.0.0.9:1")
	if op := s.Ops()[0]; op.Millis() != t0.UnixMilli() {
		t.Fatalf("the clock moved: a local op stamped at %v, want %v", time.UnixMilli(op.Millis()), t0)
	}

	ahead := Op{URL: "http://10.0.0.7:8000", Stamp: uint64(t0.Add(MaxClockAhead).UnixMilli()) << 16, Origin: "r2"}
	if !s.Merge([]Op{ahead}) || !s.Has(ahead.URL) {
		t.Fatal("an op within MaxClockAhead was not applied")
	}
	if !s.Remove(ahead.URL) {
		t.Fatal("remove refused")
	}
	s.Merge([]Op{ahead}) // the peer republishes its add
	if s.Has(ahead.URL) {
		t.Fatal("the removed worker came back")
	}
}
