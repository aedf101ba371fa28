package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prefixring/prefixring/sim/vllm"
)

// clientOf is a client of the given replicas only: their requests alone
// reach the engines.
func clientOf(c *Cluster, replicas ...int) *Client {
	tr := c.transport()
	tr.ResponseHeaderTimeout = 0
	var urls []string
	for _, i := range replicas {
		urls = append(urls, "http://"+ReplicaAddr(i))
	}
	return NewClient(urls, tr, nil)
}

// steadyOn runs the standard load through the given replicas for at most
// d; wait and stop are steadyStop's.
func steadyOn(c *Cluster, d time.Duration, replicas ...int) (wait func() *Client, stop func(after time.Duration) *Client) {
	return loadFor(clientOf(c, replicas...), d, func(ctx context.Context, cl *Client) {
		cl.Steady(ctx, 12, 6, 4, 0, 200*time.Millisecond)
	})
}

// Scenario: an engine answers 500 to every request (errors), or never
// answers while its /health does (hang), and only some replicas' requests
// reach it (the others' clients are elsewhere, or idle). With gossip, one
// replica's ejection used to be one vote of three: an engine failing one
// replica's requests was never taken out, and the other replicas kept
// sending it their requests when they came. Now any replica's failed
// requests take it out cluster-wide when no replica's requests succeed
// there. The time from the fault to every replica holding it out is
// reported for 1, 2 and 3 replicas seeing the failures.
func TestEjectionSeenBySomeReplicas(t *testing.T) {
	for _, mode := range []string{"errors", "hang"} {
		for k := 1; k <= 3; k++ {
			t.Run(fmt.Sprintf("%s/seen-by-%d", mode, k), func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Proxy.UpstreamTimeout = 3 * time.Second // as in TestFailingEngine
				scenario(t, cfg, func(t *testing.T, c *Cluster) {
					victim := EngineURL(3)
					var seeing []int
					for i := range k {
						seeing = append(seeing, i)
					}
					_, stop := steadyOn(c, 40*time.Second, seeing...)
					time.Sleep(3 * time.Second)
					f := vllm.Faults{ErrorRate: 1}
					if mode == "hang" {
						f = vllm.Faults{HangRate: 1}
					}
					if err := c.Engine(3).Server.SetFaults(f); err != nil {
						t.Fatal(err)
					}
					ejected := waitRouted(t, c, victim, false, 30*time.Second)
					// The load goes on 5 s past the ejection, not to its
					// 40 s (until stop 44): what follows measures nothing,
					// and the load lasts up to the limit on the ejection.
					cl := stop(5 * time.Second)
					tally := Count(cl.Outcomes())
					if tally.Mismatched != 0 || tally.Failed > tally.Requests/20 {
						t.Fatalf("%v", tally)
					}
					report(t, "%v; out on all 3 replicas %v after the fault", tally, ejected)
				})
			})
		}
	}
}

// Scenario: two engines fail every request, each seen by other replicas.
// However the replicas vote, the cluster holds out no more than the
// ejection cap (20% of 4 engines: one), and the other stays routed.
func TestClusterEjectionCap(t *testing.T) {
	scenario(t, DefaultConfig(), func(t *testing.T, c *Cluster) {
		a, b := EngineURL(2), EngineURL(3)
		wait := steady(c, 12*time.Second, 0)
		time.Sleep(3 * time.Second)
		for _, i := range []int{2, 3} {
			if err := c.Engine(i).Server.SetFaults(vllm.Faults{ErrorRate: 1}); err != nil {
				t.Fatal(err)
			}
		}
		most, some := 0, false
		stop := Sample(50*time.Millisecond, func() {
			for _, r := range c.Live() {
				st, _ := r.Bal.Status()
				out := 0
				for _, e := range st {
					if !e.Healthy && (e.ID == a || e.ID == b) {
						out++
					}
				}
				most, some = max(most, out), some || out > 0
			}
		})
		time.Sleep(8 * time.Second) // 15 s until stop 44
		stop()
		wait()
		if !some || most > 1 {
			t.Fatalf("at most %d of the 2 failing engines out at once on a replica (ejected at all: %v); the cap is 1", most, some)
		}
		report(t, "at most %d of the 2 failing engines out at once, on every replica", most)
	})
}

// Scenario: one replica's path to a healthy engine is cut (its requests
// and probes there are refused) while the others' requests succeed there.
// The replica holds the engine out in its own checks, but that is its
// vote alone: the others vouch for the engine, so it stays in the
// cluster's set on every replica, and the cut replica's requests there are
// retried elsewhere.
func TestBadPathDoesNotEjectForAll(t *testing.T) {
	scenario(t, DefaultConfig(), func(t *testing.T, c *Cluster) {
		victim := EngineURL(3)
		wait := steady(c, 12*time.Second, 0)
		time.Sleep(3 * time.Second)
		c.CutPath(0, victim, true)
		out := 0
		stop := Sample(50*time.Millisecond, func() {
			if !c.Routed(victim, true) {
				out++
			}
		})
		time.Sleep(8 * time.Second) // 15 s until stop 44
		stop()
		ownOut := false
		for _, h := range c.Replica(0).Set.Health() {
			if h.ID == victim {
				ownOut = h.Ejected
			}
		}
		c.CutPath(0, victim, false)
		cl := wait()
		tally := Count(cl.Outcomes())
		if !ownOut {
			t.Fatalf("the cut replica's own checks do not hold %s out: the fault was not seen", victim)
		}
		if out != 0 {
			t.Fatalf("%s was out of some replica's routed set in %d of %d samples: one bad path ejected it", victim, out, 8*20)
		}
		if tally.Mismatched != 0 || tally.Failed != 0 {
			t.Fatalf("%v", tally)
		}
		report(t, "%v; the cut replica holds it out, the cluster keeps it in (0 of %d samples out)", tally, 8*20)
	})
}
