package gossip

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prefixring/prefixring/gossip/core/coretest"
	"github.com/prefixring/prefixring/ring"
	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// lawRand returns a seeded source: seed 1, or $GOSSIP_SEED to explore.
func lawRand(t *testing.T) *rand.Rand { return rand.New(rand.NewPCG(coretest.Seed(t), 1)) }

// unstarted builds a node that is never started: tests drive publication
// and receipt by hand (publish does not send before Start).
func unstarted(t *testing.T, name string) *Node {
	t.Helper()
	bal, err := ring.NewBalancer(ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{NodeName: name, BindAddr: "10.0.0.1:7946"}, bal, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
