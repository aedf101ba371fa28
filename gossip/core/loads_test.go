package core

import (
	"reflect"
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
)

func TestLivenessRule(t *testing.T) {
	l := Liveness{Self: "me", StaleAfter: 5 * time.Second, Gone: map[string]bool{"dead": true}}
	mk := func(node string, stamp time.Time, left bool) Entry {
		e := NewEntry(node, "", 1, 1, stamp, []string{"x"}, map[string]int64{"x": 3}, nil)
		e.Left = left
		return e
	}
	now := t0.Add(time.Minute)
	cases := []struct {
		name string
		e    Entry
		want bool
	}{
		{"fresh peer", mk("p", now.Add(-time.Second), false), true},
		{"exactly StaleAfter old", mk("p", now.Add(-5*time.Second), false), true},
		{"stale peer", mk("p", now.Add(-5001*time.Millisecond), false), false},
		{"stamp ahead of our clock", mk("p", now.Add(time.Second), false), true},
		{"tombstone", mk("p", now, true), false},
		{"declared dead by memberlist", mk("dead", now, false), false},
		{"own entry", mk("me", now, false), false},
	}
	for _, c := range cases {
		if got := l.Counts(c.e, now); got != c.want {
			t.Errorf("%s: counts=%v, want %v", c.name, got, c.want)
		}
	}
}

func TestClusterLoadsAddsLocalAndRemote(t *testing.T) {
	bal, _ := ring.NewBalancer(ring.DefaultConfig())
	_ = bal.SetEndpoints([]string{"x", "y"})
	cl := NewClusterLoads(bal.Inflight(), ViewExact)
	lease, err := bal.Acquire(ring.Request{Key: 1, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	entries := []Entry{
		NewEntry("p", "", 1, 1, t0, []string{"x", "y"}, map[string]int64{"x": 2, "y": 5}, nil),
		NewEntry("q", "", 1, 1, t0, []string{"x", "y"}, map[string]int64{"x": 1}, nil),
	}
	cl.SetRemote(SumRemote(entries, Liveness{Self: "me", StaleAfter: time.Second}, t0))
	want := map[string]int64{"x": 3, "y": 5}
	want[lease.Endpoint]++
	for id, n := range want {
		if got := cl.Load(id); got != n {
			t.Errorf("load %s = %d, want %d", id, got, n)
		}
	}
	if cl.Total() != 9 {
		t.Errorf("total %d, want 9", cl.Total())
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = cl.Load("x") + cl.Total() }); allocs != 0 {
		t.Errorf("Load+Total allocate %v times", allocs)
	}
}

func TestTallyMajority(t *testing.T) {
	eps := []string{"e1", "e2", "e3"}
	voter := func(down ...string) Entry {
		d := map[string]bool{}
		for _, id := range down {
			d[id] = true
		}
		return NewEntry("v", "", 1, 1, t0, eps, nil, d)
	}
	cases := []struct {
		name   string
		voters []Entry
		down   []string
	}{
		{"one replica sees e1 down", []Entry{voter("e1")}, []string{"e1"}},
		{"1 of 3 sees e1 down: stays", []Entry{voter("e1"), voter(), voter()}, nil},
		{"2 of 3 see e1 down: out", []Entry{voter("e1"), voter("e1", "e2"), voter()}, []string{"e1"}},
		{"1 of 2: tie keeps it", []Entry{voter("e2"), voter()}, nil},
		{"tombstones do not vote", []Entry{voter("e3"), {Node: "gone", Left: true}}, []string{"e3"}},
	}
	for _, c := range cases {
		v := Tally(c.voters, 100)
		if !reflect.DeepEqual(v.Down, c.down) || !reflect.DeepEqual(v.Endpoints, eps) {
			t.Errorf("%s: %+v, want down %v", c.name, v, c.down)
		}
	}
}

func TestTallyEndpointSetByMajority(t *testing.T) {
	a := NewEntry("a", "", 1, 1, t0, []string{"e1", "e2", "new"}, nil, nil)
	b := NewEntry("b", "", 1, 1, t0, []string{"e1", "e2"}, nil, nil)
	c := NewEntry("c", "", 1, 1, t0, []string{"e1", "e2", "new"}, nil, nil)
	empty := NewEntry("d", "", 1, 1, t0, nil, nil, nil)
	if v := Tally([]Entry{a, b, empty}, 100); !reflect.DeepEqual(v.Endpoints, []string{"e1", "e2"}) {
		t.Errorf("1 of 2 voters list new: %v", v.Endpoints)
	}
	if v := Tally([]Entry{a, b, c}, 100); !reflect.DeepEqual(v.Endpoints, []string{"e1", "e2", "new"}) {
		t.Errorf("2 of 3 list new: %v", v.Endpoints)
	}
	// Order of voters does not matter.
	if x, y := Tally([]Entry{c, b, a}, 100), Tally([]Entry{a, b, c}, 100); !reflect.DeepEqual(x, y) {
		t.Errorf("order changes the verdict: %v vs %v", x, y)
	}
}

// TestOverlayMirrorsUnpublishedGrowth: with two mirrors, an overlay view
// counts this replica's load added since its last publication three
// times (the other two replicas, hashing alike, presumably added as much
// and have not published it yet), its releases once, and the others'
// publications as they are. No mirror is the overlay as before.
func TestOverlayMirrorsUnpublishedGrowth(t *testing.T) {
	local := fixedLoads{"x": 1000}
	cl := NewClusterLoads(local, ViewOverlay)
	check := func(step string, x, total int64) {
		t.Helper()
		if got, gotT := cl.Load("x"), cl.Total(); got != x || gotT != total {
			t.Errorf("%s: load %d total %d, want %d and %d", step, got, gotT, x, total)
		}
	}
	check("no mirrors, nothing heard", 1000, 1000)
	cl.SetMirrors(2)
	check("cold start: nothing published yet", 3000, 3000)
	cl.SetOwn(NewEntry("me", "", 1, 1, t0, []string{"x", "y"}, map[string]int64{"x": 600}, nil))
	check("400 added since the publication", 1000+2*400, 1000+2*400)
	peer := NewEntry("p", "", 1, 1, t0, []string{"x", "y"}, map[string]int64{"x": 500, "y": 200}, nil)
	cl.SetRemote(SumRemote([]Entry{peer}, Liveness{Self: "me", StaleAfter: time.Second}, t0))
	check("and a peer's publication", 1000+800+500, 1000+800+700)
	local["x"] = 300
	check("released below the publication: the publication counts, once", 600+500, 600+700)
	cl.SetMirrors(0)
	local["x"] = 1000
	check("mirrors off", 1000+500, 1000+700)
	for _, mode := range []ViewMode{ViewShared, ViewExact, ViewAligned} {
		other := NewClusterLoads(fixedLoads{"x": 1000}, mode)
		other.SetMirrors(2)
		if got := other.Load("x"); got != 1000 {
			t.Errorf("%s view with mirrors: load %d, want 1000 (mirrors are the overlay's)", mode, got)
		}
	}
}
