package gossip

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/gossip/core"
)

// TestAlignedViewAgreesUnderDelay: three replicas place and release
// leases every 20 ms while each publication takes 50±25 ms to arrive. In
// the aligned view every replica applies each publication (its own
// included) at its stamp plus the apply lag, so at every instant all read
// the same loads; in the shared view they differ while publications are on
// the wire, which shows the check can fail. Loads are sampled half-way
// between milliseconds, never at an instant a publication falls due.
func TestAlignedViewAgreesUnderDelay(t *testing.T) {
	for _, mode := range []core.ViewMode{core.ViewShared, core.ViewAligned} {
		t.Run(string(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 1)
				c.tweak = func(cfg *Config) { cfg.View = mode }
				defer c.stopAll()
				for i := range 3 {
					c.mustStart(fmt.Sprintf("r%d", i), fmt.Sprintf("10.0.0.%d:7946", i+1))
				}
				c.waitAgreed(10*time.Second, func(string) bool {
					for _, r := range c.reps {
						if c.members(r) != 3 {
							return false
						}
					}
					return true
				})
				time.Sleep(time.Second) // every entry applied (the aligned view holds each for the lag)
				c.net.SetLatency(50*time.Millisecond, 25*time.Millisecond)
				time.Sleep(time.Until(time.Now().Truncate(time.Millisecond).Add(time.Millisecond + 500*time.Microsecond)))
				samples, differed := 0, 0
				for step := range 400 { // 2 s
					if step%4 == 0 {
						r := c.sorted()[step/4%3]
						r.hold(t, uint64(step))
						if len(r.leases) > 4 {
							r.leases[0].Release()
							r.leases = r.leases[1:]
						}
					}
					samples++
					if _, ok := c.agreed(); !ok {
						differed++
					}
					time.Sleep(5 * time.Millisecond)
				}
				t.Logf("%s: the replicas' loads differed at %d of %d instants", mode, differed, samples)
				if mode == core.ViewAligned && differed > 0 {
					t.Errorf("aligned: the replicas' loads differed at %d of %d instants, want none", differed, samples)
				}
				if mode == core.ViewShared && differed < samples/10 {
					t.Errorf("shared: the replicas' loads differed at only %d of %d instants: the delay did not bite", differed, samples)
				}
				c.waitAgreed(time.Second, func(v string) bool { return strings.HasPrefix(v, "total=12 ") })
				st := c.reps["r0"].node.Status()
				wantLag := map[core.ViewMode]int64{core.ViewAligned: 250}[mode]
				if st.ApplyLagMillis != wantLag || len(st.Entries) != 3 {
					t.Fatalf("%s: /debug/cluster apply lag %d ms, %d entries; want %d ms, 3", mode, st.ApplyLagMillis, len(st.Entries), wantLag)
				}
				for _, e := range st.Entries {
					if applied := e.AppliedVersion != 0; applied != (mode == core.ViewAligned) || (e.Node != "r0" && !e.Counted) {
						t.Errorf("%s: /debug/cluster entry %s: applied version %d of %d, counted %v", mode, e.Node, e.AppliedVersion, e.Version, e.Counted)
					}
				}
			})
		})
	}
}

// TestAlignedViewSendsEachPublicationOnceMore: in the aligned view a UDP
// publication goes Copies times at once and once more at the next tick
// (before it is due, so a receiver that lost the first copies still
// applies it on time); the other views send it Copies times.
func TestAlignedViewSendsEachPublicationOnceMore(t *testing.T) {
	for mode, want := range map[core.ViewMode]float64{core.ViewShared: 2, core.ViewAligned: 3} {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 1)
			c.tweak = func(cfg *Config) { cfg.View = mode }
			defer c.stopAll()
			r0 := c.mustStart("r0", "10.0.0.1:7946")
			c.mustStart("r1", "10.0.0.2:7946")
			c.waitAgreed(10*time.Second, func(string) bool { return c.members(r0) == 2 })
			time.Sleep(time.Second + DefaultConfig().Interval/2) // half-way between ticks
			sent := func() float64 { return counterValue(r0.node.met.messages.WithLabelValues("out", "full")) }
			before := sent()
			for { // a quiet moment: nothing of an earlier publication left to send
				time.Sleep(2 * DefaultConfig().Interval)
				if sent() == before {
					break
				}
				before = sent()
			}
			r0.hold(t, 1)
			time.Sleep(3 * DefaultConfig().Interval)
			if got := sent() - before; got != want {
				t.Errorf("%s: one publication to one peer went %v times, want %v", mode, got, want)
			}
		})
	}
}
