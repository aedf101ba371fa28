package workers

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prefixring/prefixring/gossip/core/coretest"
)

// TestSetMergeLaws: the worker set merges as a CRDT (the shared checker,
// as for the loads entries and the sketch records).
func TestSetMergeLaws(t *testing.T) {
	c := &clock{t0}
	coretest.CheckMergeLaws(t, coretest.State[*Set, Op]{
		New:    func() *Set { return NewSet("x", c.now, time.Hour) },
		Merge:  func(s *Set, in ...Op) []Op { s.Merge(in); return nil },
		Values: (*Set).Ops,
		Value:  func(r *rand.Rand) Op { return randomOps(r, 1)[0] },
	})
}
