package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/prefixring/prefixring/chaos/memnet"
	"github.com/prefixring/prefixring/ring"
)

// blackHoledSeeds are the join list of the shutdown tests: maxJoinContacts
// addresses, so one join attempt dials every one of them in turn.
var blackHoledSeeds = []string{"10.0.0.7:7946", "10.0.0.8:7946", "10.0.0.9:7946"}

// timedClose closes replica name, which the cluster then forgets, and
// returns how long Close took.
func (c *cluster) timedClose(t *testing.T, name string) time.Duration {
	t.Helper()
	r := c.reps[name]
	delete(c.reps, name)
	start := time.Now()
	if err := r.node.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("Close took %v", took)
	return took
}

// TestCloseDoesNotWaitForAJoinIntoABlackHole: a replica whose seeds are
// black-holed (packets dropped, no reset) is in a join attempt, whose
// every dial hangs for memberlist's TCPTimeout (10 s), one seed after the
// other. Close must not wait for it: a replica stopping on SIGTERM while
// its peers are unreachable used to take up to 30 s more (three seeds of
// 10 s), past a Kubernetes grace period.
func TestCloseDoesNotWaitForAJoinIntoABlackHole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 42)
		defer c.stopAll()
		c.tweak = func(cfg *Config) { cfg.Join = blackHoledSeeds }
		r := c.mustStart("r0", "10.0.0.1:7946") // no seed listens: the first join fails at once
		for _, s := range blackHoledSeeds {
			c.net.BlackHole(s)
		}
		time.Sleep(time.Second) // the join loop's retry (after 100 ms) is dialing the first seed
		if took := c.timedClose(t, "r0"); took > closeBound(r.node) {
			t.Fatalf("Close took %v while a join dialed black-holed seeds (TCP timeout %v), want at most %v",
				took, memberlist.DefaultLANConfig().TCPTimeout, closeBound(r.node))
		}
	})
}

// TestLeaveIsBoundedByItsTimeoutWhenPeersAreBlackHoled: r1's peer r0 is
// black-holed while r1 sends it a registered worker over TCP, a send whose
// dial hangs for memberlist's TCPTimeout (10 s). Leave must return within
// its timeout: it used to return when the send gave up.
func TestLeaveIsBoundedByItsTimeoutWhenPeersAreBlackHoled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 43)
		defer c.stopAll()
		c.startAgreed(2)
		r0, r1 := c.reps["r0"], c.reps["r1"]
		c.net.BlackHole(r0.addr)
		r1.workers.Add("http://10.9.1.1:8000") // queued for r0, over TCP
		time.Sleep(100 * time.Millisecond)
		delete(c.reps, "r1")
		const timeout = time.Second
		start := time.Now()
		_ = r1.node.Leave(timeout) // an error would say the leave did not go out in time: not what is tested
		took := time.Since(start)
		t.Logf("Leave(%v) took %v", timeout, took)
		if took > timeout+closeBound(r1.node) {
			t.Fatalf("Leave(%v) took %v with its peer black-holed (TCP timeout %v), want at most %v",
				timeout, took, memberlist.DefaultLANConfig().TCPTimeout, timeout+closeBound(r1.node))
		}
	})
}

// leaverHolding4 starts three agreed replicas and has r2 hold four
// requests, which every replica then counts: the replica the leave tests
// make leave.
func (c *cluster) leaverHolding4(t *testing.T) *replica {
	c.startAgreed(3)
	r2 := c.reps["r2"]
	for i := range 4 {
		r2.hold(t, uint64(i))
	}
	c.waitAgreed(time.Second, func(v string) bool { return strings.HasPrefix(v, "total=4 ") })
	return r2
}

// TestLeaveTellsLivePeers: with its peers reachable, a replica that leaves
// is gone from their members and from their counts as soon as Leave
// returns, long before a failure detector or StaleAfter would have noticed.
func TestLeaveTellsLivePeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 44)
		defer c.stopAll()
		r2 := c.leaverHolding4(t)
		delete(c.reps, "r2")
		const timeout = 5 * time.Second
		start := time.Now()
		if err := r2.node.Leave(timeout); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("Leave(%v) took %v", timeout, took)
		if took >= timeout {
			t.Fatalf("Leave took %v with every peer alive", took)
		}
		synctest.Wait() // the peers have handled what reached them
		for _, r := range c.sorted() {
			if m, total := c.members(r), r.node.Loads().Total(); m != 2 || total != 0 {
				t.Fatalf("%s: %d members, total %d right after r2 left; want 2 and 0 (%v)", r.name, m, total, fmt.Sprint(c.views()))
			}
		}
	})
}

// TestLeaveReachesPeersOverASlowNetwork: every packet takes 300 to 500
// ms, so the leaving replica's tombstone and memberlist's leave intent
// are still on their way when Leave returns and shuts the transport
// down. Both go as packets (UDP), which a shutdown does not call back,
// and Leave waits for memberlist to have sent its intent, not for a
// stream: the peers learn of the leave itself (they hold the
// tombstone, and drop the replica within a second, where their failure
// detector would take four at least).
func TestLeaveReachesPeersOverASlowNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 50)
		defer c.stopAll()
		r2 := c.leaverHolding4(t)
		c.net.SetLatency(300*time.Millisecond, 200*time.Millisecond)
		delete(c.reps, "r2")
		const timeout = 5 * time.Second
		start := time.Now()
		if err := r2.node.Leave(timeout); err != nil {
			t.Fatal(err)
		}
		t.Logf("Leave(%v) took %v", timeout, time.Since(start))
		left := time.Now()
		learnt := func(r *replica) bool {
			return c.members(r) == 2 && r.node.Loads().Total() == 0 &&
				slices.ContainsFunc(r.node.Status().Entries, func(e EntryStatus) bool { return e.Node == "r2" && e.Left })
		}
		for !learnt(c.reps["r0"]) || !learnt(c.reps["r1"]) {
			if time.Since(left) > time.Second {
				t.Fatalf("a second after r2's Leave returned, its peers have not learnt of it: members %d and %d, views %v",
					c.members(c.reps["r0"]), c.members(c.reps["r1"]), c.views())
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("the peers learnt of the leave %v after Leave returned", time.Since(left))
	})
}

// closeBound is how long Close may take: no network wait at all, only the
// node's goroutines ending; one publish interval is ample.
func closeBound(n *Node) time.Duration { return n.cfg.Interval }

// streamsOutliveShutdown is a memnet transport whose Shutdown leaves the
// streams it opened open, as memberlist's own TCP transport does (it
// closes its listeners only): memnet's would break them.
type streamsOutliveShutdown struct{ *memnet.Transport }

func (streamsOutliveShutdown) Shutdown() error { return nil }

// TestCloseDoesNotWaitForASilentStream: a seed accepts the join's stream
// and then reads and answers nothing (a host black-holed once connected,
// or a hung process), so the push/pull waits on the stream for
// memberlist's TCPTimeout. Close must not wait for it: it closes the
// streams the node opened.
func TestCloseDoesNotWaitForASilentStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mute, tr, bal := muteSeed(t, memnet.New(45))
		defer mute.Shutdown()
		n, err := New(Config{NodeName: "r0", BindAddr: tr.Addr(), Join: []string{mute.Addr()}, Transport: streamsOutliveShutdown{tr}},
			bal, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := n.Start(ctx); err != nil { // returns with the join still writing to the mute seed
			t.Fatal(err)
		}
		start := time.Now()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("Close took %v", took)
		if took > closeBound(n) {
			t.Fatalf("Close took %v while the join's stream to a silent seed was open (TCP timeout %v), want at most %v",
				took, memberlist.DefaultLANConfig().TCPTimeout, closeBound(n))
		}
		time.Sleep(time.Minute) // a bubble must end with no goroutine left
	})
}

// unanswered is a resolver whose DNS server is black-holed: every lookup
// waits for its context.
type unanswered struct{}

func (unanswered) LookupHost(ctx context.Context, host string) ([]string, error) {
	<-ctx.Done()
	return nil, &net.DNSError{Err: "i/o timeout", Name: host, IsTimeout: true}
}

// TestCloseDoesNotWaitForAJoinNameToResolve: the join list names a
// headless Service, and the DNS server is black-holed too: the join
// loop's lookup waits up to its 5 s timeout. Close must not wait for it.
func TestCloseDoesNotWaitForAJoinNameToResolve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 46)
		defer c.stopAll()
		c.tweak = func(cfg *Config) {
			cfg.Join, cfg.Resolver = []string{"replicas.test:7946"}, unanswered{}
		}
		r := c.mustStart("r0", "10.0.0.1:7946")
		time.Sleep(time.Second) // the join loop's retry (after 100 ms) is resolving the name
		if took := c.timedClose(t, "r0"); took > closeBound(r.node) {
			t.Fatalf("Close took %v while the join resolved a name no server answers, want at most %v", took, closeBound(r.node))
		}
	})
}

// answersOnce answers its first lookup with addrs, and every later one as
// a DNS server gone silent: it waits for the lookup's context.
type answersOnce struct {
	addrs []string
	calls atomic.Int32
}

func (r *answersOnce) LookupHost(ctx context.Context, host string) ([]string, error) {
	if r.calls.Add(1) == 1 {
		return r.addrs, nil
	}
	return unanswered{}.LookupHost(ctx, host)
}

// TestCloseDuringALookupLeavesAnIslandAnIsland: an island (discovery names
// a peer, none accepts it) is stopped while its join loop resolves the
// join name. The lookup ends with the stop, naming nobody: that is no
// sign the island found its cluster, so it must not log that it is no
// longer isolated, nor report so.
func TestCloseDuringALookupLeavesAnIslandAnIsland(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, logs := startIsland(t, 47, &answersOnce{addrs: []string{"10.0.0.7"}})
		time.Sleep(time.Second) // the join loop's retry (after 100 ms) is resolving the name
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs.String(), "no longer isolated") || !n.Isolated() {
			t.Fatalf("stopping during a lookup ended the island (isolated %v):\n%s", n.Isolated(), logs.String())
		}
	})
}

// startIsland starts replica r0 at 10.0.0.1 alone on a memnet network of
// seed, joining the name replicas.test through dns, and checks it is an
// island: dns's first answer must name a peer that does not listen, so
// the join fails at once. It returns the node and its log (info and up).
func startIsland(t *testing.T, seed uint64, dns Resolver) (*Node, *syncBuffer) {
	t.Helper()
	tr, err := memnet.New(seed).Transport("10.0.0.1:7946")
	if err != nil {
		t.Fatal(err)
	}
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n, err := New(Config{NodeName: "r0", BindAddr: tr.Addr(), Join: []string{"replicas.test:7946"},
		Resolver: dns, Transport: tr}, bal, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !n.Isolated() {
		t.Fatal("a replica whose only peer refuses it is not isolated")
	}
	return n, logs
}

// failsAfterOnce answers its first lookup with addrs, and every later one
// at once with err; it records when each lookup came.
type failsAfterOnce struct {
	addrs []string
	err   *net.DNSError
	mu    sync.Mutex
	at    []time.Time
}

func (r *failsAfterOnce) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, time.Now())
	if len(r.at) == 1 {
		return r.addrs, nil
	}
	return nil, r.err
}

// TestAFailedLookupLeavesAnIslandAnIsland: an island's DNS server fails
// its lookups for a while (SERVFAIL). A failed lookup names nobody, but
// unlike a name that does not exist, it says nothing of the replica's
// peers: the island must stay one (not log that it is no longer
// isolated, nor report so, as it did until its next lookup answered), and
// its join is retried as after a join that failed: 100 ms, doubling.
func TestAFailedLookupLeavesAnIslandAnIsland(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		dns := &failsAfterOnce{addrs: []string{"10.0.0.7"},
			err: &net.DNSError{Err: "server misbehaving", Name: "replicas.test", IsTemporary: true}}
		n, logs := startIsland(t, 48, dns)
		defer n.Close()
		time.Sleep(time.Second) // three more tries, every lookup failing
		if strings.Contains(logs.String(), "no longer isolated") || !n.Isolated() {
			t.Fatalf("a failed lookup ended the island (isolated %v):\n%s", n.Isolated(), logs.String())
		}
		dns.mu.Lock()
		defer dns.mu.Unlock()
		var got []time.Duration
		for _, at := range dns.at {
			got = append(got, at.Sub(start))
		}
		want := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Fatalf("lookups at %v, want %v: the join retried as after a failed join", got, want)
		}
	})
}

// TestAnIslandWhoseNameIsGoneIsNoIsland: an island's join name stops
// existing (every replica behind the headless Service went unready).
// Discovery names no peer now, so the replica is no island, whatever
// refused it before (TestAFailedLookupLeavesAnIslandAnIsland is the
// failed lookup, which says nothing).
func TestAnIslandWhoseNameIsGoneIsNoIsland(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, logs := startIsland(t, 49, &failsAfterOnce{addrs: []string{"10.0.0.7"},
			err: &net.DNSError{Err: "no such host", Name: "replicas.test", IsNotFound: true}})
		defer n.Close()
		time.Sleep(time.Second) // the join loop's retry (after 100 ms) finds the name gone
		if !strings.Contains(logs.String(), "no longer isolated") || n.Isolated() {
			t.Fatalf("the island's join name is gone, and it is still isolated (%v):\n%s", n.Isolated(), logs.String())
		}
	})
}
