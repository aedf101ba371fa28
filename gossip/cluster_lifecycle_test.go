package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestClusterLifecycle runs three replicas on the in-memory network: join,
// steady state, a crash, a rejoin. Throughout, replicas whose views agree
// must pick the same endpoint for every key, and totals must be exact.
func TestClusterLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1)
		defer c.stopAll()
		a := c.mustStart("r0", "10.0.0.1:7946")
		b := c.mustStart("r1", "10.0.0.2:7946")
		r2 := c.mustStart("r2", "10.0.0.3:7946")
		joined := c.waitAgreed(10*time.Second, func(string) bool {
			return c.members(a) == 3 && c.members(b) == 3 && c.members(r2) == 3
		})
		t.Logf("3 replicas joined and agree after %v", joined)

		// Steady state: each replica holds leases of its own; every view
		// must count all of them.
		for i := range 30 {
			c.sorted()[i%3].hold(t, uint64(1000+i))
		}
		took := c.waitAgreed(2*time.Second, func(v string) bool { return strings.HasPrefix(v, "total=30 ") })
		t.Logf("30 leases visible everywhere after %v", took)
		checkAgreement(t, c, 500)

		// A crash: r2's 10 leases must leave every total, within two
		// push/pull intervals.
		c.crash("r2")
		took = c.waitAgreed(2*DefaultConfig().PushPull, func(v string) bool { return strings.HasPrefix(v, "total=20 ") })
		t.Logf("crashed replica's counts gone everywhere after %v", took)
		checkAgreement(t, c, 500)

		// r2 comes back (a restart: same name and address, new incarnation)
		// with new leases.
		r2 = c.mustStart("r2", "10.0.0.3:7946")
		for i := range 5 {
			r2.hold(t, uint64(2000+i))
		}
		took = c.waitAgreed(2*DefaultConfig().PushPull, func(v string) bool {
			return strings.HasPrefix(v, "total=25 ") && c.members(a) == 3 && c.members(b) == 3
		})
		t.Logf("restarted replica agrees after %v", took)
		checkAgreement(t, c, 500)
	})
}

// checkAgreement asks every replica where each of n keys would go.
func checkAgreement(t *testing.T, c *cluster, n int) {
	t.Helper()
	// Let every goroutine woken at this instant (publish ticks fall on the
	// same virtual time as the caller's sleep) finish first: a publish
	// running during the check would see wouldPick's transient lease.
	synctest.Wait()
	reps := c.sorted()
	for k := range uint64(n) {
		want := reps[0].wouldPick(k)
		for _, r := range reps[1:] {
			if got := r.wouldPick(k); got != want {
				t.Fatalf("key %d: %s picks %s, %s picks %s", k, reps[0].name, want, r.name, got)
			}
		}
	}
}

// TestHotKeySpillsAlikeEverywhere: a hot key held round-robin through the
// replicas fills its home to the cluster-wide bound, then spills; every
// replica then sends it to the same endpoint.
func TestHotKeySpillsAlikeEverywhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2)
		defer c.stopAll()
		c.startAgreed(3)
		reps := c.sorted()
		home := reps[0].wouldPick(77)
		spilled := 0
		for i := range 24 {
			if l := reps[i%3].hold(t, 77); l.Endpoint != home {
				spilled++
			}
			time.Sleep(300 * time.Millisecond) // let the lease reach every view
			checkAgreement(t, c, 50)
			if got := reps[(i+1)%3].wouldPick(77); got != reps[(i+2)%3].wouldPick(77) {
				t.Fatalf("hot key disagrees after %d leases", i+1)
			}
		}
		if spilled == 0 {
			t.Fatalf("24 leases on one key never spilled: %v", c.views())
		}
		if skipped := testutilCount(reps); skipped == 0 {
			t.Fatal("home-skipped metric never counted")
		}
	})
}

// TestHealthByMajority: one replica seeing an endpoint down leaves it in;
// two of three take it out on all three.
func TestHealthByMajority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		defer c.stopAll()
		c.startAgreed(3)
		reps := c.sorted()
		bad := testEndpoints[1]
		reps[0].node.voteHealth(bad, false)
		time.Sleep(time.Second)
		if v, ok := c.agreed(); !ok || strings.Contains(v, "down:") {
			t.Fatalf("one vote took it out: %v", c.views())
		}
		reps[2].node.voteHealth(bad, false)
		took := c.waitAgreed(time.Second, func(v string) bool { return strings.Contains(v, "down:"+bad) })
		t.Logf("2 of 3 votes: out everywhere after %v", took)
		reps[0].node.voteHealth(bad, true)
		c.waitAgreed(time.Second, func(v string) bool { return !strings.Contains(v, "down:") })
	})
}

// TestPartitionHeals: a replica cut off from the others sees them die and
// they it; after the partition heals the rejoin loop merges the cluster.
func TestPartitionHeals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 4)
		defer c.stopAll()
		c.startAgreed(3)
		reps := c.sorted()
		reps[2].hold(t, 5)
		c.net.Partition([]string{"10.0.0.1:7946", "10.0.0.2:7946"}, []string{"10.0.0.3:7946"})
		time.Sleep(40 * time.Second)
		if m := c.members(reps[0]); m != 2 {
			t.Fatalf("r0 sees %d members during the partition", m)
		}
		if tot := reps[0].node.Loads().Total(); tot != 0 {
			t.Fatalf("r0 still counts the unreachable replica's lease: total %d", tot)
		}
		c.net.Heal()
		took := c.waitAgreed(2*DefaultConfig().RejoinInterval+2*DefaultConfig().PushPull, func(v string) bool {
			return strings.HasPrefix(v, "total=1 ") && c.members(reps[0]) == 3 && c.members(reps[2]) == 3
		})
		t.Logf("healed after %v", took)
	})
}

// TestNameConflictAndWrongKey: a second process with a live member's name
// fails to start; with a key, a node holding another key cannot join and
// changes nothing.
func TestNameConflictAndWrongKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 5)
		c.key = []byte("0123456789abcdef")
		defer c.stopAll()
		c.startAgreed(3)
		c.sorted()[0].hold(t, 9)
		time.Sleep(time.Second)
		before := c.views()

		_, err := c.start("r1", "10.0.0.9:7946", c.key)
		if !errors.Is(err, ErrNameConflict) {
			t.Fatalf("duplicate name: %v, want ErrNameConflict", err)
		}
		intruder, err := c.start("r3", "10.0.0.4:7946", []byte("fedcba9876543210"))
		if err != nil {
			t.Fatal(err)
		}
		intruder.hold(t, 9)
		intruder.hold(t, 9)
		time.Sleep(15 * time.Second) // a rejoin attempt and push/pulls
		delete(c.reps, "r3")
		defer intruder.node.Close()
		if after := c.views(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("wrong-key node changed the views:\n%v\n%v", before, after)
		}
		for _, r := range c.sorted() {
			if m := c.members(r); m != 3 {
				t.Fatalf("%s sees %d members", r.name, m)
			}
		}
		if m := c.members(intruder); m != 1 {
			t.Fatalf("wrong-key node sees %d members", m)
		}
		// The island knows it is one; the others do not think they are.
		if !intruder.node.Isolated() || !intruder.node.Status().Isolated {
			t.Fatal("the wrong-key replica does not report itself isolated")
		}
		for _, r := range c.sorted() {
			if r.node.Isolated() {
				t.Fatalf("%s reports itself isolated", r.name)
			}
		}
	})
}

// TestFirstJoinIsRetriedPromptly: replicas that start together often start
// before their seed listens. The first join is retried from 100 ms,
// doubling, so a replica joins within about a second of its seed, not a
// whole rejoin interval (10 s) later, as it did when the first join was
// retried only at the rejoin interval.
func TestFirstJoinIsRetriedPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 6)
		defer c.stopAll()
		early := c.mustStart("r1", "10.0.0.2:7946") // its seed, 10.0.0.1, is not up
		time.Sleep(700 * time.Millisecond)
		c.mustStart("r0", c.seed)
		joinsWithin(t, c, early, 2*time.Second, "its seed came up")
	})
}

// readyReplicas resolves the headless Service name as Kubernetes DNS does
// while no replica is ready yet: not at all until up, then to the seed.
type readyReplicas struct {
	up   *atomic.Bool
	seed string
}

func (r readyReplicas) LookupHost(_ context.Context, host string) ([]string, error) {
	if !r.up.Load() {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []string{r.seed}, nil
}

// TestFirstJoinIsRetriedWhileTheNameDoesNotResolve: replicas that start
// together behind a headless Service find its name empty (no replica is
// ready yet). That is no cluster to join either: the first join is
// retried as promptly as when the seed does not answer
// (TestFirstJoinIsRetriedPromptly), not a whole rejoin interval later.
func TestFirstJoinIsRetriedWhileTheNameDoesNotResolve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 7)
		defer c.stopAll()
		var up atomic.Bool
		c.tweak = func(cfg *Config) {
			cfg.Join = []string{"replicas.test:7946"}
			cfg.Resolver = readyReplicas{up: &up, seed: "10.0.0.1"}
		}
		early := c.mustStart("r1", "10.0.0.2:7946")
		time.Sleep(700 * time.Millisecond)
		c.mustStart("r0", c.seed)
		up.Store(true)
		joinsWithin(t, c, early, 2*time.Second, "the name resolved")
	})
}

// startAgreed starts replicas r0..r(n-1) at 10.0.0.1.. and waits until
// their views agree.
func (c *cluster) startAgreed(n int) {
	for i := range n {
		c.mustStart(fmt.Sprintf("r%d", i), fmt.Sprintf("10.0.0.%d:7946", i+1))
	}
	c.waitAgreed(10*time.Second, nil)
}

// joinsWithin waits (in virtual time) until the replica early has a peer
// and fails the test unless that took at most d from now, when what
// names the event it waited on.
func joinsWithin(t *testing.T, c *cluster, early *replica, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	for c.members(early) < 2 {
		time.Sleep(10 * time.Millisecond)
		if time.Since(start) > 30*time.Second {
			t.Fatal("never joined")
		}
	}
	if took := time.Since(start); took > d {
		t.Fatalf("joined %v after %s", took, what)
	}
}
