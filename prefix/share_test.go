package prefix

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeSource is a Source whose summary the test sets.
type fakeSource struct {
	mu     sync.Mutex
	sum    []SummaryEntry
	groups GroupCounts
	fanout int
}

func (f *fakeSource) Groups() GroupCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return GroupCounts{Groups: slices.Clone(f.groups.Groups), Requests: f.groups.Requests}
}

func (f *fakeSource) Summary() []SummaryEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sum)
}

func (f *fakeSource) Fanout() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fanout
}

func (f *fakeSource) set(s []SummaryEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sum = s
}

// observed is the summary a replica publishes after routing requests whose
// anchor prefixes are paths (fanout 4).
func observed(paths ...[]uint64) []SummaryEntry {
	s := NewSketch(4, 0)
	for _, p := range paths {
		s.Observe(p)
	}
	return s.Summary(256)
}

// The prefixes of the tests' summaries.
const (
	preamble = 0xA11CE0000001 // continued 2 ways on r0 and 2 other ways on r1: shared only when merged
	twoWays  = 0xB0B000000002 // the same 2 ways on r0 and r1: never shared
	local4   = 0xC0FFEE000003 // continued 4 ways on r2 alone: shared everywhere
	other    = 0xD00D00000004 // continued 2 ways on r2
)

func testSummaries() (s0, s1, s2 []SummaryEntry) {
	s0 = observed([]uint64{preamble, 1}, []uint64{preamble, 2}, []uint64{twoWays, 11}, []uint64{twoWays, 12})
	s1 = observed([]uint64{preamble, 3}, []uint64{preamble, 4, 40}, []uint64{twoWays, 11}, []uint64{twoWays, 12})
	s2 = observed([]uint64{local4, 7}, []uint64{local4, 8}, []uint64{local4, 9}, []uint64{local4, 10},
		[]uint64{other, 5}, []uint64{other, 6})
	return
}

// members is a membership the test edits.
type members struct {
	mu sync.Mutex
	m  map[string]string
}

func (m *members) get() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.m)
}

func (m *members) set(name, addr string, alive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if alive {
		m.m[name] = addr
	} else {
		delete(m.m, name)
	}
}

// testShare is r0's share at 10.0.0.1:7946, r0 alone a member.
func testShare(src Source, onCommon func(*Common)) (*Share, *members, *time.Time) {
	ms := &members{m: map[string]string{"r0": "10.0.0.1:7946"}}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewShare(src, ShareConfig{Name: "r0", Members: ms.get, OnCommon: onCommon, Now: func() time.Time { return now }})
	return s, ms, &now
}

func recordsSection(recs ...SketchRecord) []byte { return appendRecords(nil, recs...) }

// TestSketchOnCommonFollowsPublishedRecords: the table is merged from
// published summaries only (our own last publication, not the live
// sketch), of live members only, and OnCommon hears of every change of
// that set and of nothing else.
func TestSketchOnCommonFollowsPublishedRecords(t *testing.T) {
	s0, s1, _ := testSummaries()
	src := &fakeSource{fanout: 4}
	var got []*Common
	n, ms, now := testShare(src, func(c *Common) { got = append(got, c) })
	merge := func(recs ...SketchRecord) {
		t.Helper()
		if reply, err := n.Merge("r1", recordsSection(recs...)); err != nil || reply != nil {
			t.Fatalf("merge: %v, reply %x", err, reply)
		}
	}
	expect := func(calls int, want []uint64) {
		t.Helper()
		if len(got) != calls {
			t.Fatalf("%d OnCommon calls, want %d", len(got), calls)
		}
		if h := got[len(got)-1].Hashes(); !slices.Equal(h, want) {
			t.Fatalf("table %x, want %x", h, want)
		}
		if p := n.Stats().Prefixes; p != len(want) {
			t.Fatalf("stats: %d prefixes, want %d", p, len(want))
		}
	}
	src.set(s0)
	n.Publish(true)
	expect(1, nil)
	// The live sketch alone would now share the preamble; the table does
	// not move until it is published.
	src.set(observed([]uint64{preamble, 1}, []uint64{preamble, 2}, []uint64{preamble, 3}, []uint64{preamble, 4}))
	expect(1, nil)

	rec1 := SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 5, Version: 2, Fanout: 4, Summary: normalizeSummary(s1)}
	merge(rec1) // not a member yet: held, not counted
	expect(1, nil)
	merge(SketchRecord{Node: "r8", Fanout: 4, Summary: normalizeSummary(observed(
		[]uint64{local4, 1}, []uint64{local4, 2}, []uint64{local4, 3}, []uint64{local4, 4}))}) // no address, no member
	expect(1, nil)
	ms.set("r1", "10.0.0.2:7946", true)
	n.Refresh()
	expect(2, []uint64{preamble})
	old := rec1
	old.Version, old.Summary = 1, nil
	merge(old) // older: nothing changes
	expect(2, []uint64{preamble})

	// A second process under r1's name at another address is ignored.
	imp := rec1
	imp.Addr, imp.Version = "10.0.0.9:7946", 9
	merge(imp)
	expect(2, []uint64{preamble})
	if v := n.Stats().NameConflicts; v != 1 {
		t.Fatalf("name conflicts counted %v", v)
	}

	// r1 dies: its summary stops counting; it comes back alive: it counts again.
	ms.set("r1", "", false)
	n.Refresh()
	expect(3, nil)
	ms.set("r1", "10.0.0.2:7946", true)
	n.Refresh()
	expect(4, []uint64{preamble})
	// r1 restarts: its new incarnation's empty record replaces the old.
	merge(SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 6, Version: 1, Fanout: 4})
	expect(5, nil)

	// Our own publication: on the tick, the live summary goes out.
	n.Publish(false)
	expect(6, []uint64{preamble})
	ver := n.Last().Version
	n.Publish(false) // unchanged: nothing
	expect(6, []uint64{preamble})
	src.mu.Lock()
	src.fanout = 3
	src.mu.Unlock()
	n.Publish(false) // the fanout is published too
	expect(7, []uint64{preamble})
	if l := n.Last(); l.Version != ver+1 || l.Fanout != 3 {
		t.Fatalf("after a fanout change: %+v", l)
	}

	// An earlier incarnation of ours at our address that outran this one
	// (a restart faster than the clock): ours is raised above it and
	// republished at the next tick.
	inc := n.Last().Incarnation
	merge(SketchRecord{Node: "r0", Addr: "10.0.0.1:7946", Incarnation: inc + 10, Version: 1, Fanout: 4})
	n.Publish(false)
	if r := n.Last(); r.Incarnation != inc+11 || len(r.Summary) == 0 {
		t.Fatalf("our record after the raise: %+v", r)
	}
	// So is one at another address (a restart at a new IP, on a host
	// whose clock was ahead): the gossip node gave us the name.
	merge(SketchRecord{Node: "r0", Addr: "10.0.0.8:7946", Incarnation: inc + 20, Version: 3, Fanout: 4})
	n.Publish(false)
	if r := n.Last(); r.Incarnation != inc+21 || r.Addr != "10.0.0.1:7946" {
		t.Fatalf("our record after a predecessor at another address: %+v", r)
	}

	// A record of a node that is no member is forgotten at the tick once
	// it has not been one for ForgetAfter; ours and members' stay.
	merge(SketchRecord{Node: "gone", Addr: "10.0.0.7:7946", Incarnation: 1, Version: 1, Fanout: 4})
	n.Tick()
	if recs := n.Records(); len(recs) != 2 || recs[0].Node != "r0" || recs[1].Node != "r1" {
		t.Fatalf("records %+v", recs)
	}
	ms.set("r1", "", false)
	n.Tick()
	*now = now.Add(time.Minute)
	n.Tick()
	if len(n.Records()) != 2 {
		t.Fatal("a member gone a minute was forgotten")
	}
	*now = now.Add(time.Second)
	n.Tick()
	if recs := n.Records(); len(recs) != 1 || recs[0].Node != "r0" {
		t.Fatalf("records of a member gone over a minute: %+v", recs)
	}
}

// TestSketchRepair: a periodic push/pull's versions make the receiver
// answer the peer, in one section, with the records of live members it
// holds newer; nothing when the peer is up to date.
func TestSketchRepair(t *testing.T) {
	s0, s1, _ := testSummaries()
	n, ms, _ := testShare(&fakeSource{fanout: 4, sum: s0}, nil)
	n.Publish(true)
	own := n.Last()
	rec1 := SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 5, Version: 2, Fanout: 4, Summary: normalizeSummary(s1)}
	gone := SketchRecord{Node: "r9", Addr: "10.0.0.9:7946", Incarnation: 5, Version: 2, Fanout: 4}
	ms.set("r1", "10.0.0.2:7946", true)
	ms.set("r2", "10.0.0.3:7946", true)
	if _, err := n.Merge("r1", appendRecords(nil, rec1, gone)); err != nil {
		t.Fatal(err)
	}
	pushPull := func(from string, vs ...SketchVersion) []SketchRecord {
		t.Helper()
		reply, err := n.Merge(from, appendVersions(nil, vs...))
		if err != nil {
			t.Fatal(err)
		}
		if reply == nil {
			return nil
		}
		recs, _, err := decodeSection(reply)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	if got := pushPull("r2"); !sameRecords(got, []SketchRecord{own, rec1}) {
		t.Fatalf("to a peer holding nothing: %+v", got)
	}
	if got := pushPull("r2", SketchVersion{"r0", own.Incarnation, 1}, SketchVersion{"r1", 5, 1}, SketchVersion{"r9", 1, 1}); !sameRecords(got, []SketchRecord{rec1}) {
		t.Fatalf("to a peer one version behind on r1: %+v", got)
	}
	if got := pushPull("r2", SketchVersion{"r0", own.Incarnation, 1}, SketchVersion{"r1", 6, 0}); got != nil {
		t.Fatalf("to a peer up to date (or ahead): %+v", got)
	}
	if got := pushPull("r0"); got != nil {
		t.Fatalf("to ourselves: %+v", got)
	}
}

// TestShareState: nothing before the first publication; a join's
// push/pull carries every record, a periodic one their versions; Local is
// our own record.
func TestShareState(t *testing.T) {
	n, _, _ := testShare(&fakeSource{fanout: 4, sum: observed([]uint64{1, 2}, []uint64{1, 3})}, nil)
	if n.State(true) != nil || n.State(false) != nil || n.Local() != nil {
		t.Fatal("a section before the first publication")
	}
	n.Publish(true)
	rec1 := SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 5, Version: 2, Fanout: 4}
	if _, err := n.Merge("r1", appendRecords(nil, rec1)); err != nil {
		t.Fatal(err)
	}
	own := n.Last()
	if own.Addr != "10.0.0.1:7946" || own.Version != 1 {
		t.Fatalf("own record %+v", own)
	}
	recs, vs, err := decodeSection(n.State(true))
	if err != nil || vs != nil || !sameRecords(recs, []SketchRecord{own, rec1}) {
		t.Fatalf("join: %v %+v %+v", err, recs, vs)
	}
	recs, vs, err = decodeSection(n.State(false))
	if err != nil || recs != nil || !slices.Equal(vs, []SketchVersion{{"r0", own.Incarnation, 1}, {"r1", 5, 2}}) {
		t.Fatalf("periodic: %v %+v %+v", err, recs, vs)
	}
	recs, _, err = decodeSection(n.Local())
	if err != nil || !sameRecords(recs, []SketchRecord{own}) {
		t.Fatalf("local: %v %+v", err, recs)
	}
	select {
	case <-n.Changed():
	default:
		t.Fatal("a publication did not fire Changed")
	}
}

// Whether the cluster's shares are none, early or settled depends on the
// requests the records count, not only on each group's share of them: a
// replica whose request count grows past EarlyShareRequests and
// MinShareRequests publishes it although every share holds still, or the
// table would stay at its first publication's state.
func TestSharesSettleAsTheRequestsGrow(t *testing.T) {
	src := &fakeSource{fanout: 4}
	setGroups := func(requests uint64) {
		src.mu.Lock()
		defer src.mu.Unlock()
		src.groups = GroupCounts{Groups: []SummaryEntry{{Hash: 7, Count: 3 * requests / 10}}, Requests: requests}
	}
	setGroups(10)
	s, _, _ := testShare(src, nil)
	s.Publish(true)
	if got := s.Common().Share(7); got != 0 {
		t.Fatalf("a share of %v from 10 requests; want none", got)
	}
	for _, n := range []uint64{100, 10000} {
		setGroups(n)
		s.Tick()
		if c := s.Common(); c.Share(7) != 0.3 || c.EarlyShares() != (n < MinShareRequests) {
			t.Fatalf("after %d requests: share %v, early %v; want 0.3, early %v", n, c.Share(7), c.EarlyShares(), n < MinShareRequests)
		}
	}
}
