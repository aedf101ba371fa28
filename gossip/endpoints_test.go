package gossip

import (
	"github.com/prefixring/prefixring/ring"
	"testing"
	"testing/synctest"
	"time"
)

// TestEjectedEndpointReturnsWithGossip: an endpoint seen down that drops
// out of discovery and returns is used again: the node forgets its health
// observations of endpoints outside what it discovered (its down-set used
// never to be pruned, and the endpoint stayed out for good).
func TestEjectedEndpointReturnsWithGossip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1)
		r := c.mustStart("r0", c.seed)
		bad := testEndpoints[1]
		r.node.voteHealth(bad, false)
		time.Sleep(time.Second)
		r.node.voteEndpoints(testEndpoints[:1])
		time.Sleep(time.Second)
		r.node.voteEndpoints(testEndpoints) // back, and its probes pass: the checker starts it fresh
		time.Sleep(time.Second)
		st, _ := r.bal.Status()
		for _, e := range st {
			if !e.Healthy {
				t.Errorf("%s never used again after returning healthy", e.ID)
			}
		}
		c.stopAll()
	})
}

// TestLeasesOnUndiscoveredEndpointsCount: r1 lags DNS and has not discovered endpoint 4, which the majority
// routes to; its leases there must still count in everyone's bound.
func TestLeasesOnUndiscoveredEndpointsCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1)
		r0 := c.mustStart("r0", c.seed)
		c.mustStart("r2", "10.0.0.3:7946")
		r1 := c.mustStart("r1", "10.0.0.2:7946")
		r1.node.voteEndpoints(testEndpoints[:3])
		time.Sleep(2 * time.Second)
		lagging := testEndpoints[3]
		for range 5 { // placed on it by r1 (the bound would spread keys)
			r1.leases = append(r1.leases, r1.bal.AcquireOn(ring.Request{}, lagging, ring.DecisionFallback))
		}
		time.Sleep(time.Second)
		if got := r0.node.Loads().Load(lagging); got != 5 {
			t.Errorf("r0 reads %d on %s where r1 holds 5 leases", got, lagging)
		}
		c.stopAll()
	})
}
