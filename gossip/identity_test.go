package gossip

import (
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/prefix"
)

// peerGauge returns the value of the gauge name{peer=peer} in reg.
func peerGauge(t *testing.T, reg prometheus.Gatherer, name, peer string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" && l.GetValue() == peer {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// restartBehind crashes r1 of a two-replica cluster, waits until its name
// may be taken again, and restarts it at a new address on a host whose
// clock is a minute behind its predecessor's.
func restartBehind(t *testing.T, c *cluster) *replica {
	t.Helper()
	c.crash("r1")
	c.waitAgreed(2*DefaultConfig().PushPull+DefaultConfig().StaleAfter, func(v string) bool {
		return strings.HasPrefix(v, "total=0 ") && c.members(c.reps["r0"]) == 1
	})
	// memberlist gives a dead member's name to another address once it
	// has been dead for DeadNodeReclaimTime (StaleAfter).
	time.Sleep(DefaultConfig().StaleAfter + time.Second)
	c.skew["r1"] = -time.Minute
	return c.mustStart("r1", "10.0.0.5:7946")
}

// TestRestartBehindClockAtNewAddressCountsAtOnce: a replica restarted
// under its name at a new address, on a host whose clock is a minute
// behind its predecessor's, is counted by its peer at once. Before issue
// 19 its incarnation (its start time) was below its predecessor's, so its
// entries were dropped for the minute its predecessor's was remembered,
// and its stamps read a minute old, so even those were stale.
func TestRestartBehindClockAtNewAddressCountsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 41)
		defer c.stopAll()
		c.startAgreed(2)
		for i := range 3 {
			c.reps["r1"].hold(t, uint64(100+i))
		}
		c.waitAgreed(2*time.Second, func(v string) bool { return strings.HasPrefix(v, "total=3 ") })

		r1 := restartBehind(t, c)
		for i := range 2 {
			r1.hold(t, uint64(200+i))
		}
		took := c.waitAgreed(3*time.Second, func(v string) bool {
			return strings.HasPrefix(v, "total=2 ") && c.members(c.reps["r0"]) == 2
		})
		t.Logf("the restarted replica counts everywhere %v after its leases", took)
	})
}

// TestRestartBehindClockAtNewAddressSketchCounts: the same restart's
// sketch summary counts everywhere at once. Its records used to be
// dropped as older than its predecessor's for as long as the name
// lived (the predecessor's record, at the old address, never counted and
// was never forgotten).
func TestRestartBehindClockAtNewAddressSketchCounts(t *testing.T) {
	s0, s1, _ := testSummaries()
	with1 := hashesOf(prefix.MergeSummaries(4, s0, s1))
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 42)
		g := newSketchRig(c)
		c.startAgreed(2)
		g.source("r0").set(s0)
		g.source("r1").set(s1)
		g.waitTables(c, 3*time.Second, all(with1))

		restartBehind(t, c)
		g.source("r1").set(s1)
		took := g.waitTables(c, 3*time.Second, all(with1))
		t.Logf("the restarted replica's summary counts everywhere after %v", took)
		recs := g.share("r0").Records()
		if i := slices.IndexFunc(recs, func(r prefix.SketchRecord) bool { return r.Node == "r1" }); i < 0 || recs[i].Addr != "10.0.0.5:7946" {
			t.Fatalf("r0 holds %+v", recs)
		}
		c.stopAll()
	})
}

// TestSkewedPeerCountsAndIsReported: a peer whose clock is 10 s behind
// (twice StaleAfter) is counted, and its skew is reported. Before issue
// 19 every peer read its stamps as 10 s old and ignored it, silently.
func TestSkewedPeerCountsAndIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 43)
		c.skew["r1"] = -10 * time.Second
		defer c.stopAll()
		c.startAgreed(2)
		c.reps["r0"].hold(t, 1)
		c.reps["r1"].hold(t, 2)
		c.reps["r1"].hold(t, 3)
		took := c.waitAgreed(3*time.Second, func(v string) bool { return strings.HasPrefix(v, "total=3 ") })
		t.Logf("both count both after %v", took)

		// r0 sees r1 10 s behind; r1 sees r0 10 s ahead.
		for _, w := range []struct {
			at, peer string
			skew     float64
		}{{"r0", "r1", 10}, {"r1", "r0", -10}} {
			got, ok := peerGauge(t, c.reps[w.at].reg, "prefixring_gossip_clock_skew_seconds", w.peer)
			if !ok || math.Abs(got-w.skew) > 0.5 {
				t.Fatalf("%s reports %s's skew %v (found %v), want about %v", w.at, w.peer, got, ok, w.skew)
			}
		}
		for _, e := range c.reps["r0"].node.Status().Entries {
			if e.Node == "r1" && (e.SkewMillis == nil || *e.SkewMillis < 9500 || *e.SkewMillis > 10500 || !e.Counted) {
				t.Fatalf("r0's /debug/cluster shows r1 as %+v", e)
			}
		}
	})
}

// TestSkewGoesWithTheForgottenPeer: a peer's clock-skew series goes when
// its entry is forgotten, and a late copy of its last publication (a UDP
// datagram delayed past ForgetAfter, or a replay), which the table
// refuses, does not bring it back. Before, the refused entry's skew was
// recorded all the same, and since only forgetting an entry deletes a
// series, it stayed for good: one series leaked per departed name.
func TestSkewGoesWithTheForgottenPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addrs := map[string]string{"a": "10.0.0.1:7946", "b": "10.0.0.2:7946"}
		a := offlineNode(t, "a", addrs["a"], core.ViewOverlay, addrs)
		b := offlineNode(t, "b", addrs["b"], core.ViewOverlay, addrs)
		reg := prometheus.NewRegistry()
		reg.MustRegister(skewCollector{a})
		skewOfB := func() bool {
			_, ok := peerGauge(t, reg, "prefixring_gossip_clock_skew_seconds", "b")
			return ok
		}
		time.Sleep(time.Second)
		b.publish(time.Now(), true)
		late := encodeFull(b.last)
		a.receive(late)
		if !skewOfB() {
			t.Fatal("b's skew is not reported")
		}
		time.Sleep(a.cfg.ForgetAfter + 2*time.Second) // b is gone
		a.publish(time.Now(), false)
		if _, ok := a.view.Table().Get("b"); ok || skewOfB() {
			t.Fatalf("b forgotten: entry held %v, skew reported %v", ok, skewOfB())
		}
		a.receive(late)
		if _, ok := a.view.Table().Get("b"); ok {
			t.Fatal("the forgotten entry came back")
		}
		time.Sleep(a.cfg.ForgetAfter + 2*time.Second) // and the forgotten record expires
		a.publish(time.Now(), false)
		if skewOfB() {
			t.Fatal("a refused entry's skew is reported after its peer was forgotten")
		}
	})
}
