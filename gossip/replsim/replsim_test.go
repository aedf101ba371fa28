package replsim

import (
	"testing"
	"time"

	"github.com/prefixring/prefixring/ring"
	"github.com/prefixring/prefixring/sim"
)

// TestPublishedCountsReachOthers: after an interval, replica 1 sees
// replica 0's leases; without gossip it never does.
func TestPublishedCountsReachOthers(t *testing.T) {
	for _, gossip := range []bool{true, false} {
		p, err := New(Config{Replicas: 2, Endpoints: sim.EndpointIDs(4), Ring: ring.DefaultConfig(), Gossip: gossip, Interval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		key := p.Key(func(*sim.Request) (uint64, bool) { return 7, true })
		at := func(d time.Duration) { key(&sim.Request{Arrival: d}) }
		at(0)
		l, _ := p.Acquire(ring.Request{Key: 7, Keyed: true}) // replica 0
		at(150 * time.Millisecond)
		l2, _ := p.Acquire(ring.Request{Key: 8, Keyed: true}) // replica 1, publishes first
		v := &view{p: p, i: 1}
		want := int64(0)
		if gossip {
			want = 1
		}
		if got := v.Load(l.Endpoint) - p.bals[1].Inflight().Load(l.Endpoint); got != want {
			t.Fatalf("gossip=%v: replica 1 sees %d of replica 0's leases, want %d", gossip, got, want)
		}
		if p.Agreement() != 1 {
			t.Fatalf("agreement %v with idle endpoints", p.Agreement())
		}
		l.Release()
		l2.Release()
	}
}
