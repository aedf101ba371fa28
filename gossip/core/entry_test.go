package core

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/prefixring/prefixring/gossip/core/coretest"
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

// TestEntryTableMergeLaws: merging entries is idempotent, commutative and
// associative, and what Merge returns, merged into the old table, gives the
// new one.
func TestEntryTableMergeLaws(t *testing.T) {
	coretest.CheckMergeLaws(t, coretest.State[*EntryTable, Entry]{
		New:           NewEntryTable,
		Merge:         (*EntryTable).Merge,
		Values:        (*EntryTable).Entries,
		Value:         randomEntry,
		ReportsChange: true,
	})
}

// TestMergeChangeHoldsNothingKnown: the change holds no entry the old
// table had.
func TestMergeChangeHoldsNothingKnown(t *testing.T) {
	r := rand.New(rand.NewPCG(coretest.Seed(t), 1))
	for range 2000 {
		a, b := randomEntries(r), randomEntries(r)
		s, old := NewEntryTable(), NewEntryTable()
		s.Merge(a...)
		old.Merge(a...)
		for _, e := range s.Merge(b...) {
			if o, ok := old.Get(e.Node); ok && reflect.DeepEqual(o, e) {
				t.Fatalf("change repeats known entry %v", e)
			}
		}
	}
}

func randomEntries(r *rand.Rand) []Entry {
	out := make([]Entry, r.IntN(5))
	for i := range out {
		out[i] = randomEntry(r)
	}
	return out
}

func TestNewerIncarnationWinsOverHigherVersion(t *testing.T) {
	s := NewEntryTable()
	s.Merge(Entry{Node: "a", Incarnation: 1, Version: 99})
	if ch := s.Merge(Entry{Node: "a", Incarnation: 2, Version: 1}); len(ch) != 1 {
		t.Fatal("a restart's first entry did not replace the old incarnation's")
	}
	if ch := s.Merge(Entry{Node: "a", Incarnation: 1, Version: 100}); len(ch) != 0 {
		t.Fatal("an old incarnation's late entry came back")
	}
}

func TestForgetDropsOldEntriesAndTheyStayDead(t *testing.T) {
	s := NewEntryTable()
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

// TestEntriesAgeFromTheirReceipt: an entry counts for StaleAfter after
// this replica heard it, whatever its owner's clock said: a peer whose
// clock is a minute behind counts, and a minute ahead stops counting on
// time. The age used to be read from the owner's stamp.
func TestEntriesAgeFromTheirReceipt(t *testing.T) {
	for _, skew := range []time.Duration{-time.Minute, -10 * time.Second, 0, time.Minute} {
		loads := NewClusterLoads(zeroLoads{}, ViewExact)
		v := NewView("me", 5*time.Second, loads)
		now := t0.Add(time.Hour)
		e := NewEntry("peer", "10.0.0.2:7946", 1, 1, now.Add(skew), []string{"a"}, map[string]int64{"a": 3}, nil)
		e.Heard = 0 // as decoded off the wire
		v.Receive(now, e)
		if got := loads.Load("a"); got != 3 {
			t.Errorf("skew %v: load %d at receipt, want 3", skew, got)
		}
		v.Refresh(now.Add(5*time.Second), nil)
		if got := loads.Load("a"); got != 3 {
			t.Errorf("skew %v: load %d StaleAfter after receipt, want 3", skew, got)
		}
		v.Refresh(now.Add(5*time.Second+time.Millisecond), nil)
		if got := loads.Load("a"); got != 0 {
			t.Errorf("skew %v: load %d past StaleAfter, want 0", skew, got)
		}
	}
}

type zeroLoads struct{}

func (zeroLoads) Load(string) int64 { return 0 }
func (zeroLoads) Total() int64      { return 0 }

// TestForgottenEntryIsRefusedButNotANewProcess: a peer that heard an entry
// later pushes it back after it was forgotten: it is refused (else two
// replicas pass a dead replica's entry back and forth, each hearing it
// anew), until ForgetAfter more has passed. A new process of the name, at
// a lower incarnation, is not refused.
func TestForgottenEntryIsRefusedButNotANewProcess(t *testing.T) {
	old := NewEntry("old", "10.0.0.2:7946", 5, 9, t0, []string{"a"}, map[string]int64{"a": 7}, nil)
	s, back := forgetOne(t, old)
	older := back
	older.Version = 8
	if ch := s.Merge(older); len(ch) != 0 {
		t.Fatal("an older version of a forgotten entry came back")
	}
	fresh := NewEntry("old", "10.0.0.5:7946", FirstIncarnation, 1, t0.Add(62*time.Second), []string{"a"}, nil, nil)
	if ch := s.Merge(fresh); len(ch) != 1 {
		t.Fatal("a new process of a forgotten name was refused")
	}
	s2 := NewEntryTable()
	s2.Merge(old)
	s2.Forget(t0.Add(61*time.Second), time.Minute, "self")
	s2.Forget(t0.Add(122*time.Second), time.Minute, "self")
	if ch := s2.Merge(back); len(ch) != 1 {
		t.Fatal("still refused ForgetAfter after it was forgotten")
	}
}

// TestForgottenFirstIncarnationDoesNotBlockItsSuccessor: a new process
// starts at FirstIncarnation and takes a higher one only when it hears an
// entry of its name; once every peer forgot its predecessor's entry, none
// hands one back. If the predecessor too was at FirstIncarnation, its
// successor's entries have the same incarnation and lower versions. They
// are stamped after the forgotten entry, which a peer pushing that entry
// back never is: the successor is taken at once. Until stop 40 it was
// refused until the forgotten record expired, up to ForgetAfter, so a
// replica restarted 1 to 2 minutes after a crash counted nowhere.
func TestForgottenFirstIncarnationDoesNotBlockItsSuccessor(t *testing.T) {
	old := NewEntry("b", "10.0.0.2:7946", FirstIncarnation, 5000, t0, []string{"a"}, map[string]int64{"a": 7}, nil)
	s, _ := forgetOne(t, old)
	next := NewEntry("b", "10.0.0.2:7946", FirstIncarnation, 11, t0.Add(90*time.Second), []string{"a"}, map[string]int64{"a": 1}, nil)
	if ch := s.Merge(next); len(ch) != 1 {
		t.Fatal("the successor of a forgotten process at its first incarnation was refused")
	}
}

// forgetOne returns a table that held old and forgot it after a minute,
// and old as a peer that heard it later pushes it back, which the table
// has just refused.
func forgetOne(t *testing.T, old Entry) (*EntryTable, Entry) {
	t.Helper()
	s := NewEntryTable()
	s.Merge(old)
	if gone := s.Forget(t0.Add(61*time.Second), time.Minute, "self"); len(gone) != 1 {
		t.Fatalf("forgot %v", gone)
	}
	back := old
	back.Heard = t0.Add(62 * time.Second).UnixMilli()
	if ch := s.Merge(back); len(ch) != 0 {
		t.Fatal("a forgotten entry came back")
	}
	return s, back
}

// TestNextIncarnation: a process that hears of an entry of its name it did
// not write takes an incarnation above both, whatever either's clock.
func TestNextIncarnation(t *testing.T) {
	for _, c := range []struct{ own, heard, want uint64 }{{1, 7, 8}, {9, 7, 10}, {1, 1, 2}} {
		if got := NextIncarnation(c.own, Entry{Incarnation: c.heard}); got != c.want {
			t.Errorf("NextIncarnation(%d, %d) = %d, want %d", c.own, c.heard, got, c.want)
		}
	}
}
