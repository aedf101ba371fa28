package gossip

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/gossip/core/coretest"
	"math/rand/v2"
	"net"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prefixring/prefixring/prefix"
	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/workers"
)

// fakeSource is a SketchSource whose summary the test sets.
type fakeSource struct {
	mu     sync.Mutex
	sum    []prefix.SummaryEntry
	groups prefix.GroupCounts
	fanout int
}

func (f *fakeSource) Groups() prefix.GroupCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return prefix.GroupCounts{Groups: slices.Clone(f.groups.Groups), Requests: f.groups.Requests}
}

func (f *fakeSource) setGroups(g prefix.GroupCounts) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups = g
}

func (f *fakeSource) Summary() []prefix.SummaryEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sum)
}

func (f *fakeSource) Fanout() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fanout
}

func (f *fakeSource) set(s []prefix.SummaryEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sum = s
}

// observed is the summary a replica publishes after routing requests whose
// anchor prefixes are paths (fanout 4).
func observed(paths ...[]uint64) []prefix.SummaryEntry {
	s := prefix.NewSketch(4, 0)
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

func testSummaries() (s0, s1, s2 []prefix.SummaryEntry) {
	s0 = observed([]uint64{preamble, 1}, []uint64{preamble, 2}, []uint64{twoWays, 11}, []uint64{twoWays, 12})
	s1 = observed([]uint64{preamble, 3}, []uint64{preamble, 4, 40}, []uint64{twoWays, 11}, []uint64{twoWays, 12})
	s2 = observed([]uint64{local4, 7}, []uint64{local4, 8}, []uint64{local4, 9}, []uint64{local4, 10},
		[]uint64{other, 5}, []uint64{other, 6})
	return
}

func hashesOf(c *prefix.Common) []uint64 { return c.Hashes() }

// sketchRig plugs a fake source into every replica a cluster starts (a
// fresh, empty one at each start, as a restarted process has) and records
// each replica's last table.
type sketchRig struct {
	mu    sync.Mutex
	src   map[string]*fakeSource
	got   map[string]*prefix.Common
	calls map[string]int
}

func newSketchRig(c *cluster) *sketchRig {
	g := &sketchRig{src: map[string]*fakeSource{}, got: map[string]*prefix.Common{}, calls: map[string]int{}}
	c.plug = func(name string, n *Node) {
		src := &fakeSource{fanout: 4}
		g.mu.Lock()
		g.src[name] = src
		delete(g.got, name)
		g.mu.Unlock()
		n.ShareSketch(src, func(t *prefix.Common) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.got[name] = t
			g.calls[name]++
		})
	}
	return g
}

func (g *sketchRig) source(name string) *fakeSource {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.src[name]
}

func (g *sketchRig) tables() map[string][]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string][]uint64{}
	for name, t := range g.got {
		out[name] = hashesOf(t)
	}
	return out
}

// waitTables sleeps until every replica's last table has the hashes want
// gives for it, and returns how long it took; it fails the test after
// limit.
func (g *sketchRig) waitTables(c *cluster, limit time.Duration, want func(name string) []uint64) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		got := g.tables()
		ok := true
		for name := range c.reps {
			t, called := got[name]
			ok = ok && called && slices.Equal(t, want(name))
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			c.t.Fatalf("tables did not converge within %v: %v", limit, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func all(h []uint64) func(string) []uint64 { return func(string) []uint64 { return h } }

func startThree(t *testing.T, seed uint64) (*cluster, *sketchRig) {
	c := newCluster(t, seed)
	g := newSketchRig(c)
	c.mustStart("r0", "10.0.0.1:7946")
	c.mustStart("r1", "10.0.0.2:7946")
	c.mustStart("r2", "10.0.0.3:7946")
	for _, r := range c.sorted() {
		for c.members(r) != 3 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return c, g
}

// TestSketchSharedByEveryReplica: after each replica publishes its
// summary, every replica's onCommon receives the same table, the merge of
// all three summaries, well before a push/pull. The preamble continued 2
// ways on each of two replicas is shared only in the merged table.
func TestSketchSharedByEveryReplica(t *testing.T) {
	s0, s1, s2 := testSummaries()
	for i, s := range [][]prefix.SummaryEntry{s0, s1} {
		if c := prefix.MergeSummaries(4, s); c.Len() != 0 {
			t.Fatalf("r%d's summary alone shares %v", i, c.Hashes())
		}
	}
	want := hashesOf(prefix.MergeSummaries(4, s0, s1, s2))
	if !slices.Equal(want, []uint64{preamble, local4}) {
		t.Fatalf("merged table %x, want the preamble and the locally shared prefix", want)
	}
	synctest.Test(t, func(t *testing.T) {
		c, g := startThree(t, 21)
		g.waitTables(c, time.Second, all(nil)) // each has published its empty summary at start
		start := time.Now()
		g.source("r0").set(s0)
		g.source("r1").set(s1)
		g.source("r2").set(s2)
		took := g.waitTables(c, 3*time.Second, all(want))
		t.Logf("every replica keys with the merged table %v after the summaries were set", took)
		if took := time.Since(start); took >= DefaultConfig().PushPull {
			t.Fatalf("took %v: waited for push/pull", took)
		}
		for _, r := range c.sorted() {
			if got := hashesOf(r.node.Common()); !slices.Equal(got, want) {
				t.Fatalf("%s: Common() = %x", r.name, got)
			}
			if p, s := testutil.ToFloat64(r.node.met.sketchPrefixes), testutil.ToFloat64(r.node.met.sketchSummaries); p != 2 || s != 3 {
				t.Fatalf("%s: gauges %v prefixes from %v summaries, want 2 from 3", r.name, p, s)
			}
		}
		// More requests on the same prefixes and continuations: counts
		// change, the knowledge does not; nothing is republished.
		g.mu.Lock()
		calls := g.calls["r0"]
		g.mu.Unlock()
		ver := lastVersion(c.reps["r0"].node)
		bumped := slices.Clone(s0)
		for i := range bumped {
			bumped[i].Count *= 10
		}
		g.source("r0").set(bumped)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if v := lastVersion(c.reps["r0"].node); v != ver {
			t.Fatalf("counts alone republished: version %d -> %d", ver, v)
		}
		g.mu.Lock()
		if g.calls["r0"] != calls {
			t.Fatalf("onCommon called %d times more with no change", g.calls["r0"]-calls)
		}
		g.mu.Unlock()
		c.stopAll()
	})
}

func lastVersion(n *Node) uint64 {
	n.sk.mu.Lock()
	defer n.sk.mu.Unlock()
	return n.sk.last.Version
}

// TestRestartedReplicaGetsSketchesBack: a replica that restarts (a new
// process, an empty sketch) has the others' summaries back from its join's
// push/pull, before any virtual time passes, and its new, empty record
// replaces its old one everywhere.
func TestRestartedReplicaGetsSketchesBack(t *testing.T) {
	s0, s1, s2 := testSummaries()
	want := hashesOf(prefix.MergeSummaries(4, s0, s1, s2))
	without2 := hashesOf(prefix.MergeSummaries(4, s0, s1))
	synctest.Test(t, func(t *testing.T) {
		c, g := startThree(t, 22)
		g.source("r0").set(s0)
		g.source("r1").set(s1)
		g.source("r2").set(s2)
		g.waitTables(c, 3*time.Second, all(want))

		c.crash("r2")
		took := g.waitTables(c, 30*time.Second, all(without2))
		t.Logf("the crashed replica's summary stopped counting after %v", took)

		start := time.Now()
		r2 := c.mustStart("r2", "10.0.0.3:7946")
		synctest.Wait() // the loop has merged the join's push/pull
		if d := time.Since(start); d != 0 {
			t.Fatalf("%v passed", d)
		}
		if got := hashesOf(r2.node.Common()); !slices.Equal(got, without2) {
			t.Fatalf("restarted replica's table right after its join: %x, want %x", got, without2)
		}
		r2.node.mu.Lock()
		inc := r2.node.inc
		r2.node.mu.Unlock()
		if recs := r2.node.sketchRecords(); len(recs) != 3 || recs[2].Incarnation != inc {
			t.Fatalf("restarted replica holds %+v", recs)
		}
		took = g.waitTables(c, time.Second, all(without2))
		t.Logf("all three key alike %v after the restart", took)
		c.stopAll()
	})
}

// TestSketchConvergesAfterAPartition: split 2|1, each side learns new
// continuations of the preamble that make it shared only together; each
// side's table counts only the members it sees, and after the heal all
// three key with the union.
func TestSketchConvergesAfterAPartition(t *testing.T) {
	s0 := observed([]uint64{preamble, 1}, []uint64{preamble, 2})
	s1 := observed([]uint64{twoWays, 1}, []uint64{twoWays, 2})
	s2 := observed([]uint64{preamble, 3}, []uint64{preamble, 4}, []uint64{other, 5}, []uint64{other, 6})
	synctest.Test(t, func(t *testing.T) {
		c, g := startThree(t, 23)
		g.source("r1").set(s1)
		g.waitTables(c, 3*time.Second, all(nil))

		c.net.Partition([]string{"10.0.0.1:7946", "10.0.0.2:7946"}, []string{"10.0.0.3:7946"})
		time.Sleep(time.Second)
		g.source("r0").set(s0)
		g.source("r2").set(s2)
		time.Sleep(40 * time.Second)
		if c.members(c.reps["r0"]) != 2 || c.members(c.reps["r2"]) != 1 {
			t.Fatal("the partition did not split the members")
		}
		g.waitTables(c, time.Second, all(nil)) // neither side alone sees 4 ways
		if recs := c.reps["r0"].node.sketchRecords(); len(recs) != 3 {
			t.Fatalf("r0 holds %d records; the unreachable replica's should be kept, uncounted", len(recs))
		}

		c.net.Heal()
		want := hashesOf(prefix.MergeSummaries(4, s0, s1, s2))
		if !slices.Equal(want, []uint64{preamble}) {
			t.Fatalf("want %x", want)
		}
		took := g.waitTables(c, 2*DefaultConfig().RejoinInterval+2*DefaultConfig().PushPull, all(want))
		t.Logf("converged %v after the heal", took)
		c.stopAll()
	})
}

// unstarted builds a node that is never started: tests drive publication
// and receipt by hand (publish and publishSketch do not send before Start).
func unstarted(t *testing.T, name string) *Node {
	t.Helper()
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{NodeName: name, BindAddr: "10.0.0.1:7946"}, bal, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func member(name, addr string) *memberlist.Node {
	host, port, _ := splitHostPort(addr)
	return &memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(port)}
}

// TestSketchOnCommonFollowsPublishedRecords: the table is merged from
// published summaries only (our own last publication, not the live
// sketch), of live members only, and onCommon hears of every change of
// that set and of nothing else.
func TestSketchOnCommonFollowsPublishedRecords(t *testing.T) {
	s0, s1, _ := testSummaries()
	n := unstarted(t, "r0")
	src := &fakeSource{fanout: 4}
	var got []*prefix.Common
	n.ShareSketch(src, func(c *prefix.Common) { got = append(got, c) })
	expect := func(calls int, want []uint64) {
		t.Helper()
		if len(got) != calls {
			t.Fatalf("%d onCommon calls, want %d", len(got), calls)
		}
		if h := hashesOf(got[len(got)-1]); !slices.Equal(h, want) {
			t.Fatalf("table %x, want %x", h, want)
		}
		if p := testutil.ToFloat64(n.met.sketchPrefixes); p != float64(len(want)) {
			t.Fatalf("gauge %v, want %d", p, len(want))
		}
	}
	src.set(s0)
	n.publishSketch(true)
	expect(1, nil)
	// The live sketch alone would now share the preamble; the table does
	// not move until it is published.
	src.set(observed([]uint64{preamble, 1}, []uint64{preamble, 2}, []uint64{preamble, 3}, []uint64{preamble, 4}))
	expect(1, nil)

	rec1 := SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 5, Version: 2, Fanout: 4, Summary: normalizeSummary(s1)}
	n.receive(EncodeSketch(rec1)) // not a member yet: held, not counted
	expect(1, nil)
	n.receive(EncodeSketch(SketchRecord{Node: "r8", Fanout: 4, Summary: normalizeSummary(observed(
		[]uint64{local4, 1}, []uint64{local4, 2}, []uint64{local4, 3}, []uint64{local4, 4}))})) // no address, no member
	expect(1, nil)
	n.setMember(member("r1", "10.0.0.2:7946"), true)
	n.refreshSketch()
	expect(2, []uint64{preamble})
	old := rec1
	old.Version, old.Summary = 1, nil
	n.receive(EncodeSketch(old)) // older: nothing changes
	expect(2, []uint64{preamble})

	// A second process under r1's name at another address is ignored.
	imp := rec1
	imp.Addr, imp.Version = "10.0.0.9:7946", 9
	n.receive(EncodeSketch(imp))
	expect(2, []uint64{preamble})
	if v := testutil.ToFloat64(n.met.dropped.WithLabelValues("name_conflict")); v != 1 {
		t.Fatalf("name conflicts counted %v", v)
	}

	// r1 dies: its summary stops counting; it comes back alive: it counts again.
	n.setMember(member("r1", "10.0.0.2:7946"), false)
	n.refreshSketch()
	expect(3, nil)
	n.setMember(member("r1", "10.0.0.2:7946"), true)
	n.refreshSketch()
	expect(4, []uint64{preamble})
	// r1 restarts: its new incarnation's empty record replaces the old.
	n.receive(EncodeSketch(SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 6, Version: 1, Fanout: 4}))
	expect(5, nil)

	// Our own publication: on the tick, the live summary goes out.
	n.publishSketch(false)
	expect(6, []uint64{preamble})
	ver := n.sk.last.Version
	n.publishSketch(false) // unchanged: nothing
	expect(6, []uint64{preamble})
	src.mu.Lock()
	src.fanout = 3
	src.mu.Unlock()
	n.publishSketch(false) // the fanout is published too
	expect(7, []uint64{preamble})
	if n.sk.last.Version != ver+1 || n.sk.last.Fanout != 3 {
		t.Fatalf("after a fanout change: %+v", n.sk.last)
	}

	// An earlier incarnation of ours at our address that outran this one
	// (a restart faster than the clock): ours is raised above it and
	// republished at the next tick.
	inc := n.inc
	n.receive(EncodeSketch(SketchRecord{Node: "r0", Addr: n.addr, Incarnation: inc + 10, Version: 1, Fanout: 4}))
	if n.inc != inc+11 {
		t.Fatalf("incarnation %d, want %d", n.inc, inc+11)
	}
	n.publishSketch(false)
	if r, _ := n.sk.state.Get("r0"); r.Incarnation != inc+11 || len(r.Summary) == 0 {
		t.Fatalf("our record after the raise: %+v", r)
	}

	// Records of nodes neither members nor holding a load entry are
	// forgotten at the tick; ours and members' stay.
	n.receive(EncodeSketch(SketchRecord{Node: "gone", Addr: "10.0.0.7:7946", Incarnation: 1, Version: 1, Fanout: 4}))
	n.tickSketch()
	if _, ok := n.sk.state.Get("gone"); ok {
		t.Fatal("a departed node's record was kept")
	}
	if n.sk.state.Len() != 2 {
		t.Fatalf("records %v", n.sk.state.Records())
	}
}

// TestNoSketchSendsTodaysBytes: without a sketch, push/pull sends exactly
// what the build before it sent; with one, the same entries and ops ride
// in a state+ext message.
func TestNoSketchSendsTodaysBytes(t *testing.T) {
	// The state encoding itself is unchanged (golden).
	e := core.NewEntry("r0", "10.0.0.1:7946", 7, 3, t0, []string{"http://a:1", "http://b:1"}, map[string]int64{"http://a:1": 2}, map[string]bool{"http://b:1": true})
	const golden = "020301027230" + "0d31302e302e302e313a37393436" + "0703" + "80f0cbf28365" + "00" +
		"02" + "0a687474703a2f2f613a31" + "0a687474703a2f2f623a31" + "0400" + "02" + "03"
	if got := hex.EncodeToString(EncodeState([]core.Entry{e})); got != golden {
		t.Fatalf("state encoding changed:\n%s\n%s", got, golden)
	}

	n := unstarted(t, "r0")
	n.VoteEndpoints(testEndpoints)
	n.publish(time.Now(), true)
	d := &delegate{n: n}
	entries := n.view.Table().Entries()
	if got := d.LocalState(false); !bytes.Equal(got, EncodeState(entries)) {
		t.Fatalf("no workers, no sketch: %x", got)
	}
	ws := workers.NewSet("r0", nil, 0)
	n.ShareWorkers(ws)
	if got := d.LocalState(false); !bytes.Equal(got, EncodeState(entries)) {
		t.Fatalf("workers without ops: %x", got)
	}
	ws.Add("http://10.9.1.1:8000")
	if got := d.LocalState(false); !bytes.Equal(got, EncodeStateWorkers(entries, ws.Ops())) {
		t.Fatalf("workers: %x", got)
	}
	// A message with a sketch record, received without a sketch plugged,
	// is not held: push/pull stays the same.
	n.receive(EncodeStateExt(Message{Sketches: []SketchRecord{{Node: "r1", Addr: "x", Incarnation: 1, Version: 1, Fanout: 4}},
		SketchFrom: "r1", SketchVersions: []SketchVersion{{"r1", 1, 1}}}))
	for _, join := range []bool{false, true} {
		if got := d.LocalState(join); !bytes.Equal(got, EncodeStateWorkers(entries, ws.Ops())) {
			t.Fatalf("after hearing a sketch: %x", got)
		}
	}

	// Plugged but not published yet: still the old bytes.
	n.ShareSketch(&fakeSource{fanout: 4, sum: observed([]uint64{1, 2}, []uint64{1, 3})}, nil)
	for _, join := range []bool{false, true} {
		if got := d.LocalState(join); !bytes.Equal(got, EncodeStateWorkers(entries, ws.Ops())) {
			t.Fatalf("plugged, unpublished: %x", got)
		}
	}
	n.publishSketch(true)
	// A join's push/pull carries every record; a periodic one, versions.
	m, err := Decode(d.LocalState(true))
	if err != nil || m.Kind != kindStateExt || !reflect.DeepEqual(m.Entries, entries) || !slices.Equal(m.Workers, ws.Ops()) ||
		!sameRecords(m.Sketches, []SketchRecord{n.sk.last}) || m.SketchFrom != "" {
		t.Fatalf("state+ext on a join: %v %+v", err, m)
	}
	b := d.LocalState(false)
	m, err = Decode(b)
	if err != nil || m.Kind != kindStateExt || !reflect.DeepEqual(m.Entries, entries) || !slices.Equal(m.Workers, ws.Ops()) ||
		len(m.Sketches) != 0 || m.SketchFrom != "r0" || !slices.Equal(m.SketchVersions, []SketchVersion{{"r0", n.sk.last.Incarnation, 1}}) {
		t.Fatalf("state+ext, periodic: %v %+v", err, m)
	}
	if extra := len(b) - len(EncodeStateWorkers(entries, ws.Ops())); extra > 24 {
		t.Fatalf("versions cost %d bytes", extra)
	}
}

// TestSketchRepair: a periodic push/pull's versions make the receiver
// send the peer, in one message, the records of live members it holds
// newer; nothing when the peer is up to date or not a member.
func TestSketchRepair(t *testing.T) {
	s0, s1, _ := testSummaries()
	n := unstarted(t, "r0")
	n.ShareSketch(&fakeSource{fanout: 4, sum: s0}, nil)
	n.publishSketch(true)
	own := n.sk.last
	rec1 := SketchRecord{Node: "r1", Addr: "10.0.0.2:7946", Incarnation: 5, Version: 2, Fanout: 4, Summary: normalizeSummary(s1)}
	gone := SketchRecord{Node: "r9", Addr: "10.0.0.9:7946", Incarnation: 5, Version: 2, Fanout: 4}
	n.setMember(member("r1", "10.0.0.2:7946"), true)
	n.setMember(member("r2", "10.0.0.3:7946"), true)
	n.receive(EncodeSketch(rec1, gone))
	pushPull := func(from string, vs ...SketchVersion) []SketchRecord {
		t.Helper()
		n.receive(EncodeStateExt(Message{SketchFrom: from, SketchVersions: vs}))
		select {
		case r := <-n.sk.repair:
			if r.to.Name != from {
				t.Fatalf("repair sent to %s, want %s", r.to.Name, from)
			}
			return r.recs
		default:
			return nil
		}
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
	if got := pushPull("r7"); got != nil {
		t.Fatalf("to a non-member: %+v", got)
	}
}

// sameRecord compares records as the wire carries them (an empty slice and
// nil alike).
func sameRecord(a, b SketchRecord) bool {
	return a.Node == b.Node && a.Addr == b.Addr && a.Incarnation == b.Incarnation && a.Version == b.Version &&
		a.Fanout == b.Fanout && slices.EqualFunc(a.Summary, b.Summary, func(x, y prefix.SummaryEntry) bool {
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
			Groups: []prefix.SummaryEntry{{Hash: 1, Count: 30}, {Hash: 1 << 63, Count: 70}}, Requests: 100},
		{Node: "r4", Addr: "10.0.0.5:7946", Incarnation: 1, Version: 1, Fanout: 4,
			Summary: []prefix.SummaryEntry{{Hash: 0, Count: 0}, {Hash: ^uint64(0), Count: ^uint64(0), Next: []uint32{0, ^uint32(0)}}}},
	}
}

// TestSketchWire: every combination of the state+ext sections round-trips,
// push/pull picks the oldest kind that carries its content, old kinds
// still decode, and every truncation is refused.
func TestSketchWire(t *testing.T) {
	recs := testRecords()
	ops := []workers.Op{{URL: "http://a:1", Stamp: 1 << 40, Origin: "r0"}, {URL: "http://b:1", Stamp: 7, Origin: "r1", Removed: true}}
	entries := []core.Entry{core.NewEntry("r0", "x", 1, 1, t0, testEndpoints, map[string]int64{testEndpoints[0]: 3}, nil)}
	var msgs [][]byte
	for _, rs := range [][]SketchRecord{recs[:1], recs[1:2], recs} {
		b := EncodeSketch(rs...)
		m, err := Decode(b)
		if err != nil || m.Kind != kindSketch || !sameRecords(m.Sketches, rs) || len(m.Entries) != 0 {
			t.Fatalf("sketch of %d: %v %+v", len(rs), err, m)
		}
		msgs = append(msgs, b)
	}
	vers := []SketchVersion{{"r0", 1 << 62, 1}, {"r1", 0, 0}, {"r2", 3, 1 << 40}}
	for _, es := range [][]core.Entry{nil, entries} {
		for _, o := range [][]workers.Op{nil, ops} {
			for _, rs := range [][]SketchRecord{nil, recs[:1], recs} {
				for _, from := range []string{"", "r9"} {
					in := Message{Entries: es, Workers: o, Sketches: rs, SketchFrom: from}
					if from != "" && len(rs) != 1 {
						in.SketchVersions = vers
					}
					for _, b := range [][]byte{EncodeStateExt(in), EncodePushPull(in)} {
						m, err := Decode(b)
						if err != nil || len(m.Entries) != len(es) || !slices.Equal(m.Workers, o) || !sameRecords(m.Sketches, rs) ||
							m.SketchFrom != from || !slices.Equal(m.SketchVersions, in.SketchVersions) {
							t.Fatalf("kind %d, %d entries, %d ops, %d records, from %q: %v %+v", b[1], len(es), len(o), len(rs), from, err, m)
						}
						if len(es) > 0 && !reflect.DeepEqual(m.Entries, entries) {
							t.Fatalf("entries %+v", m.Entries)
						}
						msgs = append(msgs, b)
					}
					wantKind := kindStateExt
					switch {
					case len(rs) > 0 || from != "":
					case len(o) > 0:
						wantKind = kindStateWorkers
					default:
						wantKind = kindState
					}
					if k := EncodePushPull(in)[1]; k != wantKind {
						t.Fatalf("push/pull of %d ops, %d records, from %q: kind %d, want %d", len(o), len(rs), from, k, wantKind)
					}
				}
			}
		}
	}
	// The old kinds decode as before.
	for _, b := range [][]byte{EncodeState(entries), EncodeStateWorkers(entries, ops), EncodeWorkers(ops)} {
		m, err := Decode(b)
		if err != nil || m.Sketches != nil || m.SketchFrom != "" {
			t.Fatalf("kind %d: %v %+v", b[1], err, m)
		}
	}
	for _, b := range msgs {
		for i := range len(b) {
			if _, err := Decode(b[:i]); err == nil {
				t.Fatalf("kind %d: truncated to %d of %d bytes decoded", b[1], i, len(b))
			}
		}
		if _, err := Decode(append(slices.Clone(b), 0)); err == nil {
			t.Fatalf("kind %d: a trailing byte decoded", b[1])
		}
	}
}

// rawRecord builds a sketch message of one record by hand: n claimed
// entries, then body.
func rawRecord(node string, fanout, n uint64, body ...byte) []byte {
	return append([]byte{wireVersion, kindSketch, 1}, rawRecordBody(node, fanout, n, body...)...)
}

func rawRecordBody(node string, fanout, n uint64, body ...byte) []byte {
	return rawRecordGroups(node, fanout, n, body, []byte{0, 0}) // no requests, no groups
}

// rawRecordGroups is a record body whose summary entries are body and whose
// group part (requests, g, g groups) is groups.
func rawRecordGroups(node string, fanout, n uint64, body, groups []byte) []byte {
	var b []byte
	b = appendString(b, node)
	b = appendString(b, "10.0.0.1:7946")
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

// rawExt builds a state+ext message with no entries and the given
// section count and sections.
func rawExt(count uint64, sections ...[]byte) []byte {
	b := binary.AppendUvarint([]byte{wireVersion, kindStateExt, 0}, count)
	return join(append([][]byte{b}, sections...)...)
}

func section(tag uint64, body []byte) []byte { return appendSection(nil, tag, body) }

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
	validRecs := appendSketchRecords(nil, testRecords())
	cases := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"valid by hand", rawRecord("r0", 4, 2, join(rawEntry(1, 2, 3, 4), rawEntry(2, 0))...), true},
		{"groups", join([]byte{wireVersion, kindSketch, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, 2, 7, 9))), true},
		{"groups unsorted", join([]byte{wireVersion, kindSketch, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, 2, 9, 7))), false},
		{"groups claimed beyond the bytes", join([]byte{wireVersion, kindSketch, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, 50, 7))), false},
		{"groups past maxSketchEntries", join([]byte{wireVersion, kindSketch, 1}, rawRecordGroups("r0", 4, 0, nil, rawGroups(100, maxSketchEntries+1))), false},
		{"no group part", join([]byte{wireVersion, kindSketch, 1}, rawRecordGroups("r0", 4, 0, nil, nil)), false},
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
		{"a node name over 4 KiB", rawRecord(string(make([]byte, maxString+1)), 4, 0), false},
		{"trailing byte", rawRecord("r0", 4, 0, 0), false},
		{"ext: no sections", rawExt(0), true},
		{"ext: sketch section", rawExt(1, section(sectionSketch, validRecs)), true},
		{"ext: an unknown section is skipped", rawExt(2, section(sectionSketch, validRecs), section(9, []byte("later"))), true},
		{"ext: a section count with no section", rawExt(1), false},
		{"ext: fewer sections than counted", rawExt(2, section(sectionSketch, validRecs)), false},
		{"ext: too many sections", rawExt(maxSections + 1), false},
		{"ext: tags out of order", rawExt(2, section(sectionSketch, validRecs), section(sectionWorkers, workers.AppendOps(nil, nil))), false},
		{"ext: a tag twice", rawExt(2, section(sectionSketch, validRecs), section(sectionSketch, validRecs)), false},
		{"ext: tag 0", rawExt(1, section(0, nil)), false},
		{"ext: a section longer than the message", rawExt(1, join(binary.AppendUvarint([]byte{sectionSketch}, 1<<20), validRecs)), false},
		{"ext: garbage after a section's body", rawExt(1, section(sectionSketch, append(slices.Clone(validRecs), 0))), false},
		{"ext: a section short of its body", rawExt(1, section(sectionSketch, validRecs[:len(validRecs)-1])), false},
		{"ext: a huge record count", rawExt(1, section(sectionSketch, binary.AppendUvarint(nil, 1<<14))), false},
		{"ext: records past maxEntries", rawExt(1, section(sectionSketch, binary.AppendUvarint(nil, 1<<14+1))), false},
		{"ext: a malformed record", rawExt(1, section(sectionSketch, join([]byte{1}, rawRecordBody("r0", 1, 0)))), false},
		{"ext: no records", rawExt(1, section(sectionSketch, []byte{0})), true},
		{"sketch: no records", []byte{wireVersion, kindSketch, 0}, false},
		{"sketch: two records", join([]byte{wireVersion, kindSketch, 2}, rawRecordBody("r0", 4, 0), rawRecordBody("r1", 4, 0)), true},
		{"sketch: fewer records than counted", join([]byte{wireVersion, kindSketch, 3}, rawRecordBody("r0", 4, 0), rawRecordBody("r1", 4, 0)), false},
		{"sketch: a huge record count", binary.AppendUvarint([]byte{wireVersion, kindSketch}, 1<<14), false},
		{"ext: versions", rawExt(1, section(sectionSketchVersions, appendSketchVersions(nil, "r0", []SketchVersion{{"r1", 1, 2}}))), true},
		{"ext: versions of nothing", rawExt(1, section(sectionSketchVersions, appendSketchVersions(nil, "r0", nil))), true},
		{"ext: versions from nobody", rawExt(1, section(sectionSketchVersions, appendSketchVersions(nil, "", nil))), false},
		{"ext: more versions than bytes", rawExt(1, section(sectionSketchVersions, join(appendString(nil, "r0"), binary.AppendUvarint(nil, 1000), []byte{1, 'a', 1, 1}))), false},
		{"ext: versions past maxEntries", rawExt(1, section(sectionSketchVersions, join(appendString(nil, "r0"), binary.AppendUvarint(nil, 1<<14+1)))), false},
		{"ext: all three sections", rawExt(3, section(sectionWorkers, workers.AppendOps(nil, []workers.Op{{URL: "u"}})), section(sectionSketch, validRecs),
			section(sectionSketchVersions, appendSketchVersions(nil, "r0", nil))), true},
		{"ext: malformed workers", rawExt(1, section(sectionWorkers, []byte{5})), false},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := Decode(c.b)
		runtime.ReadMemStats(&after)
		if (err == nil) != c.ok {
			t.Fatalf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if err == nil && m.Kind == kindSketch {
			if re := EncodeSketch(m.Sketches...); !bytes.Equal(re, c.b) {
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
	summary := func(n, k int) []prefix.SummaryEntry {
		out := make([]prefix.SummaryEntry, n)
		for i := range out {
			out[i] = prefix.SummaryEntry{Hash: r.Uint64(), Count: uint64(2 + r.IntN(5000))}
			for range k {
				out[i].Next = append(out[i].Next, r.Uint32())
			}
		}
		return normalizeSummary(out)
	}
	rec := SketchRecord{Node: "prefixring-7f9c4d8b6-xk2lp", Addr: "10.244.12.34:7946", Incarnation: 1 << 62, Version: 1 << 20, Fanout: 4}
	rec.Summary = summary(256, 4)
	one := len(EncodeSketch(rec))
	recs := make([]SketchRecord, 8)
	for i := range recs {
		recs[i] = rec
		recs[i].Node = fmt.Sprintf("prefixring-7f9c4d8b6-xk2l%d", i)
	}
	eight := len(EncodeStateExt(Message{Sketches: recs}))
	vers := make([]SketchVersion, len(recs))
	for i, r := range recs {
		vers[i] = SketchVersion{r.Node, r.Incarnation, r.Version}
	}
	versions := len(EncodeStateExt(Message{SketchFrom: recs[0].Node, SketchVersions: vers}))
	big := rec
	big.Summary = summary(maxSketchEntries, maxSketchNext)
	most := len(EncodeSketch(big))
	t.Logf("sketch message: 256 entries x 4 continuations: %d B (%.1f B/entry); push/pull of 8 such, on a join: %d B, periodic (versions): %d B; 1024 x 64 (the most): %d B",
		one, float64(one)/256, eight, versions, most)
	if one < 256*(8+1+1+16) || one > 256*(8+2+1+16)+64 {
		t.Fatalf("256 x 4: %d bytes", one)
	}
	if most > 1024*(8+2+1+256)+64 {
		t.Fatalf("1024 x 64: %d bytes", most)
	}
}

func randomRecord(r *rand.Rand) SketchRecord {
	sum := make([]prefix.SummaryEntry, r.IntN(4))
	for i := range sum {
		sum[i] = prefix.SummaryEntry{Hash: uint64(r.IntN(4)), Count: uint64(r.IntN(3))}
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
	s := NewSketchState()
	for _, p := range parts {
		s.Merge(p...)
	}
	return s.Records()
}

// TestSketchMergeLaws: the records' merge laws, and the table depends on
// the set of records, not on their order.
func TestSketchMergeLaws(t *testing.T) {
	coretest.CheckMergeLaws(t, coretest.State[*SketchState, SketchRecord]{
		New: NewSketchState, Merge: (*SketchState).Merge, Values: (*SketchState).Records,
		Value: randomRecord, ReportsChange: true,
	})
	r := lawRand(t)
	for range 2000 {
		ab := mergedRecords(randomRecords(r), randomRecords(r))
		rev := slices.Clone(ab)
		slices.Reverse(rev)
		if x, y := hashesOf(MergeRecords(ab)), hashesOf(MergeRecords(rev)); !slices.Equal(x, y) {
			t.Fatalf("table %x reversed %x", x, y)
		}
	}
}

// TestSketchRestartWins: a restart's newer incarnation wins over any
// version of the old one.
func TestSketchRestartWins(t *testing.T) {
	s := NewSketchState()
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
	in := []prefix.SummaryEntry{{Hash: 9, Count: 1, Next: []uint32{3, 1, 3, 2}}, {Hash: 2, Count: 5}, {Hash: 9, Count: 7}}
	got := normalizeSummary(in)
	if len(got) != 2 || got[0].Hash != 2 || got[1].Hash != 9 || !slices.Equal(got[1].Next, []uint32{1, 2, 3}) {
		t.Fatalf("%+v", got)
	}
	if !slices.Equal(in[0].Next, []uint32{3, 1, 3, 2}) {
		t.Fatal("normalizing changed the source's slices")
	}
	many := make([]prefix.SummaryEntry, 3000)
	for i := range many {
		many[i] = prefix.SummaryEntry{Hash: uint64(3000 - i), Count: uint64(i)}
		for j := range 100 {
			many[i].Next = append(many[i].Next, uint32(j))
		}
	}
	got = normalizeSummary(many)
	if len(got) != maxSketchEntries || got[0].Hash != 1 || len(got[0].Next) != maxSketchNext {
		t.Fatalf("%d entries, first %d with %d continuations", len(got), got[0].Hash, len(got[0].Next))
	}
	if _, err := Decode(EncodeSketch(SketchRecord{Node: "r0", Fanout: 4, Summary: got})); err != nil {
		t.Fatal(err)
	}
}

func TestSketchIntervalValidated(t *testing.T) {
	if DefaultConfig().SketchInterval != time.Second {
		t.Fatal("default sketch interval")
	}
	c := DefaultConfig()
	c.SketchInterval = -time.Second
	if c.Validate() == nil {
		t.Fatal("a negative sketch interval passed")
	}
}

func FuzzDecodeSketch(f *testing.F) {
	recs := testRecords()
	for _, r := range recs {
		f.Add(EncodeSketch(r))
	}
	f.Add(EncodeSketch(recs...))
	f.Add(EncodeStateExt(Message{Workers: []workers.Op{{URL: "u", Stamp: 1, Origin: "o"}}, Sketches: recs,
		SketchFrom: "r0", SketchVersions: []SketchVersion{{"r1", 1, 2}}}))
	f.Add(rawExt(2, section(sectionSketch, appendSketchRecords(nil, recs[:2])), section(7, []byte{1, 2})))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		for _, r := range m.Sketches {
			if r.Fanout < minFanout || r.Fanout > maxSketchNext || len(r.Summary) > maxSketchEntries {
				t.Fatalf("record out of bounds: %+v", r)
			}
			for i, e := range r.Summary {
				if len(e.Next) > maxSketchNext || (i > 0 && e.Hash <= r.Summary[i-1].Hash) ||
					!slices.IsSorted(e.Next) || len(slices.Compact(slices.Clone(e.Next))) != len(e.Next) {
					t.Fatalf("entry not canonical: %+v", e)
				}
			}
			m2, err := Decode(EncodeSketch(r))
			if err != nil || !sameRecords(m2.Sketches, []SketchRecord{r}) {
				t.Fatalf("re-encoding: %v %+v", err, m2)
			}
		}
	})
}

// TestLostSketchPublicationIsRepaired: a publication that could not be
// sent (r0 cut off for a second and a half, too short for anyone to be
// declared dead, so nobody rejoins) reaches the others through the
// versions of a periodic push/pull and the repair they trigger.
func TestLostSketchPublicationIsRepaired(t *testing.T) {
	s0 := observed([]uint64{local4, 1}, []uint64{local4, 2}, []uint64{local4, 3}, []uint64{local4, 4})
	synctest.Test(t, func(t *testing.T) {
		c, g := startThree(t, 24)
		g.waitTables(c, 3*time.Second, all(nil))
		r0 := c.reps["r0"]
		sentBefore := testutil.ToFloat64(r0.node.met.messages.WithLabelValues("out", "sketch"))
		c.net.Partition([]string{"10.0.0.1:7946"}, []string{"10.0.0.2:7946", "10.0.0.3:7946"})
		g.source("r0").set(s0)
		time.Sleep(1500 * time.Millisecond)
		if v := lastVersion(r0.node); v < 2 {
			t.Fatalf("r0 did not publish during the cut (version %d)", v)
		}
		if sent := testutil.ToFloat64(r0.node.met.messages.WithLabelValues("out", "sketch")); sent != sentBefore {
			t.Fatalf("a publication crossed the cut (%v sent)", sent-sentBefore)
		}
		c.net.Heal()
		joins := 0.0
		for _, r := range c.sorted() {
			joins += testutil.ToFloat64(r.node.met.joins)
		}
		took := g.waitTables(c, 3*DefaultConfig().PushPull, all([]uint64{local4}))
		t.Logf("repaired %v after the heal", took)
		for _, r := range c.sorted() {
			if m := c.members(r); m != 3 {
				t.Fatalf("%s sees %d members: the cut was long enough for a death", r.name, m)
			}
			joins -= testutil.ToFloat64(r.node.met.joins)
		}
		if joins != 0 {
			t.Fatal("a rejoin repaired it, not push/pull")
		}
		// Its summary did not change since: what r0 sent after the heal
		// were repairs.
		if sent := testutil.ToFloat64(r0.node.met.messages.WithLabelValues("out", "sketch")); sent == sentBefore {
			t.Fatal("r0 sent no repair")
		}
		c.stopAll()
	})
}

// Group counts merge into shares of all requests, and a publication is due
// only when a group's share moves by more than a tenth.
func TestSketchGroupShares(t *testing.T) {
	a := SketchRecord{Node: "a", Fanout: 4, Groups: []prefix.SummaryEntry{{Hash: 7, Count: 300}, {Hash: 9, Count: 100}}, Requests: 1000}
	b := SketchRecord{Node: "b", Fanout: 4, Groups: []prefix.SummaryEntry{{Hash: 7, Count: 100}}, Requests: 1000}
	table := MergeRecords([]SketchRecord{a, b})
	if got := table.Share(7); got != 0.2 {
		t.Fatalf("share of 7: %v, want (300+100)/2000", got)
	}
	if got := table.Share(9); got != 0.05 {
		t.Fatalf("share of 9: %v, want 100/2000", got)
	}
	few := a
	few.Groups, few.Requests = []prefix.SummaryEntry{{Hash: 7, Count: 30}}, 100
	if got := MergeRecords([]SketchRecord{few}).Share(7); got != 0 {
		t.Fatalf("a share of %v from 100 requests; want none below prefix.MinShareRequests", got)
	}
	if MergeRecords([]SketchRecord{b, a}).Share(7) != table.Share(7) {
		t.Fatal("the merge depends on the order")
	}
	near := a
	near.Groups = []prefix.SummaryEntry{{Hash: 7, Count: 320}, {Hash: 9, Count: 100}}
	near.Requests = 1040
	if !sameShares(a, near) {
		t.Fatal("a share moved by 2% republished")
	}
	far := near
	far.Groups = []prefix.SummaryEntry{{Hash: 7, Count: 400}, {Hash: 9, Count: 100}}
	if sameShares(a, far) {
		t.Fatal("a share moved by a third did not republish")
	}
	other := a
	other.Groups = []prefix.SummaryEntry{{Hash: 7, Count: 300}, {Hash: 11, Count: 100}}
	if sameShares(a, other) {
		t.Fatal("a new group did not republish")
	}
}
