package chaos

import (
	"slices"
	"testing"
	"time"
)

// counted reports whether any live replica still counts name's entry
// (fresh, from a member, not a tombstone), whatever loads it holds: the
// entry of a replica with nothing in flight at its death would otherwise
// read as gone at once, and measure nothing.
func counted(c *Cluster, name string) bool {
	return slices.ContainsFunc(c.Live(), func(r *Replica) bool { return countsEntry(r, name) })
}

// Scenario 1: a replica killed (SIGKILL: no leave) every few seconds and
// restarted, four times (each replica once, then the first again: six
// until stop 44), then the same with clean stops (SIGTERM: drain, leave), under
// steady load. Nothing is lost but what was in flight on a killed replica;
// every answer is its request's; a dead replica's counts stop counting
// within the staleness expiry; agreement is back within two push/pull
// intervals of each restart; no load is left at the end.
func TestReplicaChurn(t *testing.T) {
	for _, clean := range []bool{false, true} {
		name := map[bool]string{false: "kill", true: "clean"}[clean]
		t.Run(name, func(t *testing.T) {
			scenario(t, DefaultConfig(), func(t *testing.T, c *Cluster) {
				wait := steady(c, 40*time.Second, 5)
				var expiry, recovery []time.Duration
				for k := range 4 {
					time.Sleep(3 * time.Second)
					i := k % 3
					victim := c.Replica(i).Name
					// Stop it while its peers count its entry, so that
					// each sample measures how long they go on counting
					// it (until stop 42 only an entry holding load was
					// looked at, and half of the kills, whose victims
					// held none at that instant, measured 0).
					for wait := time.Now(); !counted(c, victim); time.Sleep(10 * time.Millisecond) {
						if time.Since(wait) > 10*time.Second {
							t.Fatalf("no replica counted %s's entry for 10 s", victim)
						}
					}
					start := time.Now()
					if clean {
						c.StopReplica(i)
					} else {
						c.CrashReplica(i)
					}
					limit := c.cfg.Gossip.StaleAfter + time.Second
					for counted(c, victim) {
						if time.Since(start) > limit {
							t.Fatalf("a dead replica's counts still counted %v after it stopped (expiry %v)", time.Since(start), c.cfg.Gossip.StaleAfter)
						}
						time.Sleep(10 * time.Millisecond)
					}
					expiry = append(expiry, time.Since(start))
					time.Sleep(4 * time.Second)
					if err := c.StartReplica(i, c.EngineURLs()); err != nil {
						t.Fatal(err)
					}
					recovery = append(recovery, waitAgreement(t, c, 2*c.cfg.Gossip.PushPull))
				}
				tally := Count(wait().Outcomes())
				if tally.Failed != 0 || tally.Mismatched != 0 || tally.OK < tally.Requests*9/10 {
					t.Fatalf("%v", tally)
				}
				if clean && tally.AtCrash != 0 {
					t.Fatalf("clean stops cut %d requests", tally.AtCrash)
				}
				settle := checkNoGhostLoad(t, c)
				report(t, "%v; dead replica's counts gone after max %v; agreement back after max %v; loads 0 after %v",
					tally, slices.Max(expiry), slices.Max(recovery), settle)
			})
		})
	}
}
