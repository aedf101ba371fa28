package gossip

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// waitWorkers sleeps until every replica's worker set equals want, and
// returns how long it took; it fails the test after limit.
func (c *cluster) waitWorkers(limit time.Duration, want ...string) time.Duration {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) <= limit {
		same := true
		for _, r := range c.reps {
			same = same && slices.Equal(r.workers.Members(), want)
		}
		if same {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string][]string{}
	for _, r := range c.reps {
		got[r.name] = r.workers.Members()
	}
	c.t.Fatalf("worker sets did not become %v within %v: %v", want, limit, got)
	return 0
}

func threeReplicas(t *testing.T) *cluster {
	c := newCluster(t, 7)
	c.mustStart("r0", "10.0.0.1:7946")
	c.mustStart("r1", "10.0.0.2:7946")
	c.mustStart("r2", "10.0.0.3:7946")
	for _, r := range c.sorted() {
		for c.members(r) != 3 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return c
}

// A worker added or removed through any replica reaches every replica, in
// one TCP send, well before the next push/pull.
func TestWorkersReachEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := threeReplicas(t)
		c.reps["r0"].workers.Add("http://10.9.1.1:8000")
		took := c.waitWorkers(time.Second, "http://10.9.1.1:8000")
		c.reps["r2"].workers.Add("http://10.9.1.2:8000")
		c.reps["r1"].workers.Remove("http://10.9.1.1:8000")
		took = max(took, c.waitWorkers(time.Second, "http://10.9.1.2:8000"))
		t.Logf("spread in %v", took)
		if took >= DefaultConfig().PushPull {
			t.Fatalf("took %v: waited for push/pull", took)
		}
		c.stopAll()
	})
}

// Split 2|1: each side changes the set, the same worker included (r0 adds
// it back, r2 removes it); after the heal every replica holds the same set,
// the one the ops' order decides, within a push/pull interval or two.
func TestWorkersConvergeAfterAPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := threeReplicas(t)
		r0, r2 := c.reps["r0"], c.reps["r2"]
		r0.workers.Add("http://10.9.1.1:8000")
		c.waitWorkers(time.Second, "http://10.9.1.1:8000")

		c.net.Partition([]string{"10.0.0.1:7946", "10.0.0.2:7946"}, []string{"10.0.0.3:7946"})
		time.Sleep(time.Second)
		r0.workers.Remove("http://10.9.1.1:8000")
		r0.workers.Add("http://10.9.1.2:8000")
		time.Sleep(time.Second)
		r2.workers.Remove("http://10.9.1.1:8000")
		r2.workers.Add("http://10.9.1.1:8000") // r2 re-adds later than r0's remove: the add wins
		r2.workers.Add("http://10.9.1.3:8000")
		time.Sleep(5 * time.Second)
		if slices.Equal(r0.workers.Members(), r2.workers.Members()) {
			t.Fatalf("the partition did not separate the sets: %v", r0.workers.Members())
		}

		c.net.Heal()
		took := c.waitWorkers(3*DefaultConfig().PushPull, "http://10.9.1.1:8000", "http://10.9.1.2:8000", "http://10.9.1.3:8000")
		t.Logf("converged %v after the heal", took)
		c.stopAll()
	})
}

// A replica that restarts (new process, empty set) gets the registered
// workers back from its peers at its first join.
func TestRestartedReplicaGetsWorkersBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := threeReplicas(t)
		for i := range 3 {
			c.reps[fmt.Sprintf("r%d", i)].workers.Add(fmt.Sprintf("http://10.9.1.%d:8000", i+1))
		}
		want := []string{"http://10.9.1.1:8000", "http://10.9.1.2:8000", "http://10.9.1.3:8000"}
		c.waitWorkers(time.Second, want...)
		c.reps["r0"].workers.Remove("http://10.9.1.1:8000")
		c.waitWorkers(time.Second, want[1:]...)

		c.crash("r2")
		time.Sleep(2 * time.Second)
		r2 := c.mustStart("r2", "10.0.0.3:7946")
		// The join's push/pull carries the set; the merge loop applies it.
		took := c.waitWorkers(time.Second, want[1:]...)
		t.Logf("restarted replica has the set %v after its start", took)
		// The tombstone came back with it: a late add from before the
		// remove cannot revive the worker there.
		if ops := r2.workers.Ops(); len(ops) != 3 || !ops[0].Removed {
			t.Fatalf("restarted replica's ops %v", ops)
		}
		c.stopAll()
	})
}
