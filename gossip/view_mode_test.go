package gossip

import (
	"fmt"
	"github.com/prefixring/prefixring/gossip/core"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/ring"
)

// offlineNode is a node that is never started: the test drives publish and
// receive by hand, so no goroutine, socket or timer runs. peers are
// registered as live members at their addresses, as memberlist would.
func offlineNode(t *testing.T, name, addr string, mode core.ViewMode, peers map[string]string) *Node {
	t.Helper()
	return offlineNodeOver(t, name, addr, mode, peers, testEndpoints)
}

// offlineNodeOver is offlineNode voting for endpoints eps.
func offlineNodeOver(t testing.TB, name, addr string, mode core.ViewMode, peers map[string]string, eps []string) *Node {
	t.Helper()
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{NodeName: name, BindAddr: addr, View: mode}, bal, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.addr = addr
	n.voteEndpoints(eps)
	for p, a := range peers {
		host, port, _ := splitHostPort(a)
		n.setMember(&memberlist.Node{Name: p, Addr: net.ParseIP(host), Port: uint16(port)}, true)
	}
	n.publish(time.Now(), true)
	return n
}

func loadsOf(n *Node) string {
	s := fmt.Sprintf("total=%d", n.Loads().Total())
	for _, id := range testEndpoints {
		s += fmt.Sprintf(" %d", n.Loads().Load(id))
	}
	return s
}

func hold(t *testing.T, n *Node, key uint64) ring.Lease {
	t.Helper()
	l, err := n.Acquire(ring.Request{Key: key, Keyed: true})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSharedViewSeesOwnLeasesOnlyOncePublished: in core.ViewShared a replica's
// leases are invisible to its own bound until it publishes them, visible
// from that instant, and visible to a peer once the peer receives them; in
// core.ViewExact they are visible to their replica at once, and in
// core.ViewOverlay at once and once for each peer until published. (core.ViewAligned
// applies each publication later: aligned_test.go.)
func TestSharedViewSeesOwnLeasesOnlyOncePublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addrs := map[string]string{"a": "10.0.0.1:7946", "b": "10.0.0.2:7946"}
		for _, mode := range []core.ViewMode{core.ViewOverlay, core.ViewShared, core.ViewExact} {
			a := offlineNode(t, "a", addrs["a"], mode, addrs)
			b := offlineNode(t, "b", addrs["b"], mode, addrs)
			b.receive(encodeFull(a.last))
			a.receive(encodeFull(b.last)) // a has a peer now
			l := hold(t, a, 7)
			// The overlay counts an unpublished placement once more for
			// its one peer, who presumably placed as many (SetMirrors).
			want := map[core.ViewMode]int64{core.ViewShared: 0, core.ViewExact: 1, core.ViewOverlay: 2}[mode]
			if got := a.Loads().Load(l.Endpoint); got != want || a.Loads().Total() != want {
				t.Fatalf("%s before publish: load %d total %d, want %d", mode, got, a.Loads().Total(), want)
			}
			time.Sleep(DefaultConfig().Interval)
			a.publish(time.Now(), false)
			if got := a.Loads().Load(l.Endpoint); got != 1 || a.Loads().Total() != 1 {
				t.Fatalf("%s after publish: load %d total %d, want 1", mode, got, a.Loads().Total())
			}
			if got := b.Loads().Total(); got != 0 {
				t.Fatalf("%s: b sees %d before receipt", mode, got)
			}
			b.receive(encodeFull(a.last))
			if got := b.Loads().Load(l.Endpoint); got != 1 {
				t.Fatalf("%s: b sees %d after receipt, want 1", mode, got)
			}
			l.Release()
			if got := a.Loads().Load(l.Endpoint); mode != core.ViewExact && (got != 1 || a.Loads().Total() != 1) {
				t.Fatalf("%s: a release shows before its publication (load %d)", mode, got)
			}
			time.Sleep(DefaultConfig().Interval)
			a.publish(time.Now(), false)
			if got := a.Loads().Total(); got != 0 {
				t.Fatalf("%s: total %d after the release is published", mode, got)
			}
			if a.Status().View != mode {
				t.Fatalf("status view %q, want %q", a.Status().View, mode)
			}
			if want := map[core.ViewMode]int{core.ViewOverlay: 1}[mode]; a.Status().Mirrors != want {
				t.Fatalf("%s: status mirrors %d, want %d", mode, a.Status().Mirrors, want)
			}
		}
	})
}

// TestSharedViewAloneReadsLiveCounts: with no other entry counted, a
// core.ViewShared replica has nobody to agree with and reads its live counts.
func TestSharedViewAloneReadsLiveCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := offlineNode(t, "a", "10.0.0.1:7946", core.ViewShared, nil)
		l := hold(t, n, 7)
		defer l.Release()
		if got := n.Loads().Load(l.Endpoint); got != 1 || n.Loads().Total() != 1 {
			t.Fatalf("alone: load %d total %d, want 1", got, n.Loads().Total())
		}
	})
}

// TestSharedViewIsIdenticalAcrossReplicas: two replicas that hold
// different leases and have received each other's latest publication read
// identical loads in core.ViewShared, and keep doing so while they place new,
// unpublished requests; in core.ViewExact they differ by those requests.
func TestSharedViewIsIdenticalAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addrs := map[string]string{"a": "10.0.0.1:7946", "b": "10.0.0.2:7946"}
		for _, mode := range []core.ViewMode{core.ViewShared, core.ViewExact} {
			a := offlineNode(t, "a", addrs["a"], mode, addrs)
			b := offlineNode(t, "b", addrs["b"], mode, addrs)
			var leases []ring.Lease
			for k := range uint64(12) {
				leases = append(leases, hold(t, a, k), hold(t, b, 100+k*k))
			}
			exchange := func() {
				time.Sleep(DefaultConfig().Interval)
				a.publish(time.Now(), false)
				b.publish(time.Now(), false)
				b.receive(encodeFull(a.last))
				a.receive(encodeFull(b.last))
			}
			exchange()
			if la, lb := loadsOf(a), loadsOf(b); la != lb || la[:9] != "total=24 " {
				t.Fatalf("%s: after the exchange a reads %s, b reads %s", mode, la, lb)
			}
			// New placements on a, not yet published.
			for k := range uint64(5) {
				leases = append(leases, hold(t, a, 1000+k))
			}
			same := loadsOf(a) == loadsOf(b)
			if same != (mode == core.ViewShared) {
				t.Fatalf("%s: a reads %s, b reads %s before a publishes", mode, loadsOf(a), loadsOf(b))
			}
			for k := range uint64(200) {
				if mode == core.ViewShared && wouldPick(a, k) != wouldPick(b, k) {
					t.Fatalf("shared: key %d: a picks %s, b picks %s", k, wouldPick(a, k), wouldPick(b, k))
				}
			}
			exchange()
			if la, lb := loadsOf(a), loadsOf(b); la != lb || la[:9] != "total=29 " {
				t.Fatalf("%s: after the second exchange a reads %s, b reads %s", mode, la, lb)
			}
			for i := range leases {
				leases[i].Release()
			}
		}
	})
}

func wouldPick(n *Node, key uint64) string {
	l, err := n.bal.Acquire(ring.Request{Key: key, Keyed: true})
	if err != nil {
		return err.Error()
	}
	l.Release()
	return l.Endpoint
}

func TestParseViewMode(t *testing.T) {
	for in, want := range map[string]core.ViewMode{"": core.ViewOverlay, "shared": core.ViewShared, "exact": core.ViewExact, "overlay": core.ViewOverlay, "aligned": core.ViewAligned} {
		if got, err := core.ParseViewMode(in); err != nil || got != want {
			t.Errorf("core.ParseViewMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := core.ParseViewMode("Exact"); err == nil {
		t.Error("core.ParseViewMode accepts Exact")
	}
	if err := (Config{NodeName: "a", View: "local"}).Validate(); err == nil {
		t.Error("Validate accepts view local")
	}
	for lag, ok := range map[time.Duration]bool{0: true, time.Millisecond: true, 4 * time.Second: true, 5 * time.Second: false, -time.Millisecond: false, time.Microsecond: false} {
		err := (Config{NodeName: "a", View: core.ViewAligned, ApplyLag: lag}).Validate()
		if (err == nil) != ok {
			t.Errorf("aligned view, apply lag %v: Validate() = %v, want ok %v", lag, err, ok)
		}
	}
	if err := (Config{NodeName: "a", View: core.ViewShared, ApplyLag: 5 * time.Second}).Validate(); err != nil {
		t.Errorf("the shared view does not read the apply lag, but Validate says %v", err)
	}
	if DefaultConfig().View != core.ViewOverlay {
		t.Errorf("default view %q", DefaultConfig().View)
	}
}

// BenchmarkClusterLoads is the cost the bound pays per endpoint it reads
// (go test -run - -bench core.ClusterLoads -benchmem ./gossip).
func BenchmarkClusterLoads(b *testing.B) {
	for _, mode := range core.ViewModes {
		b.Run(string(mode), func(b *testing.B) {
			bal, _ := ring.NewBalancer(ring.DefaultConfig())
			eps := make([]string, 64)
			counts := map[string]int64{}
			for i := range eps {
				eps[i] = fmt.Sprintf("http://10.9.0.%d:8000", i)
				counts[eps[i]] = int64(i % 5)
			}
			_ = bal.SetEndpoints(eps)
			cl := core.NewClusterLoads(bal.Inflight(), mode)
			peer := core.NewEntry("p", "", 1, 1, t0, eps, counts, nil)
			cl.SetRemote(core.SumRemote([]core.Entry{peer}, core.Liveness{Self: "me", StaleAfter: time.Second}, t0))
			cl.SetOwn(core.NewEntry("me", "", 1, 1, t0, eps, counts, nil))
			b.ReportAllocs()
			var sink int64
			for i := 0; b.Loop(); i++ {
				sink += cl.Load(eps[i&63]) + cl.Total()
			}
			_ = sink
		})
	}
}
