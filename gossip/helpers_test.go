package gossip

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prefixring/prefixring/gossip/core/coretest"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// lawRand returns a seeded source: seed 1, or $GOSSIP_SEED to explore.
func lawRand(t *testing.T) *rand.Rand { return rand.New(rand.NewPCG(coretest.Seed(t), 1)) }
