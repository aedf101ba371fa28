package chaos

import (
	"testing"
	"time"
)

// Scenario: a rolling update of every engine under load, streamed and
// non-streamed, with long prefills (12 s before the first byte, past the
// 10 s --retry-timeout). Each engine is replaced as Kubernetes replaces a
// pod: a new one starts at a new address, discovery swaps it in, and the
// old one stops taking connections and finishes what it has before it
// exits. Leaving the set is not failing: no request fails. Before the fix,
// the routers abandoned the non-streamed tries still waiting on an engine
// the moment it left their set, and replayed them elsewhere, or answered
// 502 once they were older than --retry-timeout.
func TestRollingUpdate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Engine.Faults.Latency = 12 * time.Second
	scenario(t, cfg, func(t *testing.T, c *Cluster) {
		wait := steady(c, 90*time.Second, 3)
		time.Sleep(15 * time.Second)
		for i := range cfg.Engines {
			if err := c.ReplaceEngine(i, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second)
		}
		cl := wait()
		tally := Count(cl.Outcomes())
		streamed := 0
		for _, o := range cl.Outcomes() {
			if o.Stream {
				streamed++
			}
		}
		if tally.OK != tally.Requests || tally.Requests < 50 || streamed == 0 {
			t.Fatalf("rolling update: %v (%d streamed)", tally, streamed)
		}
		report(t, "%v (%d streamed); every engine replaced one by one, 12 s prefills, 0 failed", tally, streamed)
		checkNoGhostLoad(t, c)
	})
}
