package gossip

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prefixring/prefixring/gossip/core"
	"github.com/prefixring/prefixring/ring"
)

func TestPublishEvery(t *testing.T) {
	for _, tc := range []struct {
		members  int
		rate     float64
		interval time.Duration
		want     int
	}{
		{1, 1000, 10 * time.Millisecond, 1},
		{3, 1000, 10 * time.Millisecond, 1},
		{11, 1000, 10 * time.Millisecond, 1},  // 10 peers: 10 ms exactly
		{12, 1000, 10 * time.Millisecond, 2},  // 11 ms rounds up to two ticks
		{51, 1000, 10 * time.Millisecond, 5},  // 50 ms
		{51, 1000, 100 * time.Millisecond, 1}, // the interval already spans it
		{3, 10, 10 * time.Millisecond, 20},    // 2 peers at 10 a second: 200 ms
	} {
		c := Config{Interval: tc.interval, PublishRate: tc.rate}
		if got := c.PublishEvery(tc.members); got != tc.want {
			t.Errorf("%d members, rate %v, interval %v: every %d ticks, want %d", tc.members, tc.rate, tc.interval, got, tc.want)
		}
	}
}

// TestPublishRateSpacesPublications: among 31 members at the default
// 1000 messages a second, a replica whose entry changes at every tick
// publishes every third tick (30 peers: 30 ms), and a forced publication
// (a join, a leave) does not wait.
func TestPublishRateSpacesPublications(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		peers := map[string]string{"a": "10.0.0.1:7946"}
		for i := range 30 {
			peers[fmt.Sprintf("p%d", i)] = fmt.Sprintf("10.0.1.%d:7946", i+1)
		}
		a := offlineNode(t, "a", peers["a"], core.ViewOverlay, peers)
		var published []int
		for tick := 1; tick <= 9; tick++ {
			l := hold(t, a, uint64(tick)) // the entry changes at every tick
			defer l.Release()
			before := a.ver
			time.Sleep(a.cfg.Interval)
			a.publish(time.Now(), false)
			if a.ver != before {
				published = append(published, tick)
			}
		}
		if fmt.Sprint(published) != "[3 6 9]" {
			t.Fatalf("published at ticks %v, want [3 6 9]", published)
		}
		hold(t, a, 100).Release()
		before := a.ver
		a.publish(time.Now(), true)
		if a.ver == before {
			t.Fatal("a forced publication waited")
		}
	})
}

// BenchmarkPublishTick is what one tick of the publish loop costs a
// replica besides the network (go test -run '^$' -bench PublishTick
// -benchmem ./gossip): building its entry, comparing it with the last,
// forgetting and refreshing its view; "idle" when nothing changed, "busy"
// when a lease changed since the last tick. At the 10 ms default a
// replica runs 100 ticks a second.
func BenchmarkPublishTick(b *testing.B) {
	for _, endpoints := range []int{64, 500} {
		for _, busy := range []bool{false, true} {
			mode := "idle"
			if busy {
				mode = "busy"
			}
			b.Run(fmt.Sprintf("endpoints=%d/%s", endpoints, mode), func(b *testing.B) {
				eps := make([]string, endpoints)
				for i := range eps {
					eps[i] = fmt.Sprintf("http://10.9.%d.%d:8000", i/256, i%256)
				}
				peers := map[string]string{"a": "10.0.0.1:7946"}
				for i := range 7 {
					peers[fmt.Sprintf("p%d", i)] = fmt.Sprintf("10.0.1.%d:7946", i+1)
				}
				n := offlineNodeOver(b, "a", peers["a"], core.ViewOverlay, peers, eps)
				var held []ring.Lease
				for i := range 10 * endpoints {
					l, err := n.Acquire(ring.Request{Key: uint64(i), Keyed: true})
					if err != nil {
						b.Fatal(err)
					}
					held = append(held, l)
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if busy {
						k := i % len(held)
						held[k].Release()
						held[k], _ = n.Acquire(ring.Request{Key: uint64(i + len(held)), Keyed: true})
					}
					n.publish(time.Now(), false)
				}
				for _, l := range held {
					l.Release()
				}
			})
		}
	}
}
