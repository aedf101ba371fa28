package gossip

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prefixring/prefixring/prefix"
)

// These tests carry the shared-prefix sketch (prefix.Share) through
// running nodes: the node's half of the payload contract (broadcasts,
// joins, push/pull, replies). The share's own rules are tested in prefix.

// fakeSource is a prefix.Source whose summary the test sets.
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

// sketchRig plugs a share of a fake source into every replica a cluster
// starts (a fresh, empty one at each start, as a restarted process has),
// runs it as a router does (publish at once, then tick every second) and
// records each replica's last table.
type sketchRig struct {
	mu     sync.Mutex
	src    map[string]*fakeSource
	shares map[string]*prefix.Share
	got    map[string]*prefix.Common
	calls  map[string]int
	stop   map[string]context.CancelFunc
	wg     sync.WaitGroup
}

func newSketchRig(c *cluster) *sketchRig {
	g := &sketchRig{src: map[string]*fakeSource{}, shares: map[string]*prefix.Share{}, got: map[string]*prefix.Common{},
		calls: map[string]int{}, stop: map[string]context.CancelFunc{}}
	c.plug = func(name string, n *Node) {
		src := &fakeSource{fanout: 4}
		sh := prefix.NewShare(src, prefix.ShareConfig{Name: name, Members: n.Members, Now: c.clock(name), OnCommon: func(t *prefix.Common) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.got[name] = t
			g.calls[name]++
		}})
		if err := n.Carry(sh); err != nil {
			c.t.Fatal(err)
		}
		g.mu.Lock()
		g.src[name], g.shares[name] = src, sh
		delete(g.got, name)
		g.mu.Unlock()
	}
	c.started = func(name string) {
		ctx, cancel := context.WithCancel(context.Background())
		sh := g.share(name)
		g.mu.Lock()
		g.stop[name] = cancel
		g.mu.Unlock()
		g.wg.Go(func() {
			sh.Publish(true)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					sh.Tick()
				}
			}
		})
	}
	c.stopped = func(name string) {
		g.mu.Lock()
		cancel := g.stop[name]
		g.mu.Unlock()
		cancel()
	}
	return g
}

func (g *sketchRig) source(name string) *fakeSource {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.src[name]
}

func (g *sketchRig) share(name string) *prefix.Share {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shares[name]
}

func (g *sketchRig) lastVersion(name string) uint64 { return g.share(name).Last().Version }

func (g *sketchRig) tables() map[string][]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string][]uint64{}
	for name, t := range g.got {
		out[name] = t.Hashes()
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
			if got := hashesOf(g.share(r.name).Common()); !slices.Equal(got, want) {
				t.Fatalf("%s: Common() = %x", r.name, got)
			}
			if st := g.share(r.name).Stats(); st.Prefixes != 2 || st.Summaries != 3 {
				t.Fatalf("%s: %d prefixes from %d summaries, want 2 from 3", r.name, st.Prefixes, st.Summaries)
			}
		}
		// More requests on the same prefixes and continuations: counts
		// change, the knowledge does not; nothing is republished.
		g.mu.Lock()
		calls := g.calls["r0"]
		g.mu.Unlock()
		ver := g.lastVersion("r0")
		bumped := slices.Clone(s0)
		for i := range bumped {
			bumped[i].Count *= 10
		}
		g.source("r0").set(bumped)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if v := g.lastVersion("r0"); v != ver {
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
		c.mustStart("r2", "10.0.0.3:7946")
		synctest.Wait() // the loop has merged the join's push/pull
		if d := time.Since(start); d != 0 {
			t.Fatalf("%v passed", d)
		}
		if got := hashesOf(g.share("r2").Common()); !slices.Equal(got, without2) {
			t.Fatalf("restarted replica's table right after its join: %x, want %x", got, without2)
		}
		inc := g.share("r2").Last().Incarnation
		if recs := g.share("r2").Records(); len(recs) != 3 || recs[2].Incarnation != inc || inc == 0 {
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
		if recs := g.share("r0").Records(); len(recs) != 3 {
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
		sentBefore := testutil.ToFloat64(r0.node.met.messages.WithLabelValues("out", "payload"))
		c.net.Partition([]string{"10.0.0.1:7946"}, []string{"10.0.0.2:7946", "10.0.0.3:7946"})
		g.source("r0").set(s0)
		time.Sleep(1500 * time.Millisecond)
		if v := g.lastVersion("r0"); v < 2 {
			t.Fatalf("r0 did not publish during the cut (version %d)", v)
		}
		if sent := testutil.ToFloat64(r0.node.met.messages.WithLabelValues("out", "payload")); sent != sentBefore {
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
		if sent := testutil.ToFloat64(r0.node.met.messages.WithLabelValues("out", "payload")); sent == sentBefore {
			t.Fatal("r0 sent no repair")
		}
		c.stopAll()
	})
}
