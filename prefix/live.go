package prefix

import (
	"sync"
	"sync/atomic"
)

// SummarySize is how many prefixes a replica's sketch summary carries.
const SummarySize = 256

// Live is the keyer a router keys with and the sketch its requests feed.
// The table of shared prefixes the keyer skips is swapped in whole
// (SetCommon: from the gossiped summaries, or from this replica's own
// sketch when it runs alone), so keying takes no lock; observing takes the
// sketch's. It implements the proxy's KeySource and Sketch, and is what a
// [Share] publishes (Summary, Groups, Fanout).
type Live struct {
	cfg    Config
	keyer  atomic.Pointer[Keyer]
	mu     sync.Mutex
	sketch *Sketch // nil: keys never skip a shared prefix
}

// NewLive returns a live keyer over cfg; with sketch, it starts with an empty
// table of shared prefixes (cfg.Common is replaced).
func NewLive(cfg Config, sketch *Sketch) (*Live, error) {
	if sketch != nil {
		cfg.Common = NewCommon(nil)
	}
	k := &Live{cfg: cfg, sketch: sketch}
	keyer, err := New(cfg)
	if err != nil {
		return nil, err
	}
	k.keyer.Store(keyer)
	return k, nil
}

// Request keys a request with the current table ([Keyer.Request]).
func (k *Live) Request(route Route, body []byte, prefixes []uint64) (Key, error) {
	return k.keyer.Load().Request(route, body, prefixes)
}

// Blocks hashes a request's blocks ([Keyer.Blocks]).
func (k *Live) Blocks(route Route, body []byte, dst []uint64) ([]uint64, error) {
	return k.keyer.Load().Blocks(route, body, dst)
}

// Sketching reports whether requests feed a sketch.
func (k *Live) Sketching() bool { return k.sketch != nil }

// Observe counts a keyed request's anchor prefixes in the sketch.
func (k *Live) Observe(prefixes []uint64) {
	if k.sketch == nil || len(prefixes) == 0 {
		return
	}
	k.mu.Lock()
	k.sketch.Observe(prefixes)
	k.mu.Unlock()
}

// ObserveGroup counts a request's group key in the sketch.
func (k *Live) ObserveGroup(g uint64) {
	if k.sketch == nil {
		return
	}
	k.mu.Lock()
	k.sketch.ObserveGroup(g)
	k.mu.Unlock()
}

// Groups returns what this replica publishes of its group counts.
func (k *Live) Groups() GroupCounts {
	if k.sketch == nil {
		return GroupCounts{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	g, n := k.sketch.Groups(SummarySize)
	return GroupCounts{Groups: g, Requests: n}
}

// Local is the table this replica's own sketch gives, for a replica
// without gossip.
func (k *Live) Local() *Common {
	return MergeSummaries(k.Fanout(), k.Summary()).WithShares(MergeShares(k.Groups()))
}

// Summary returns what this replica publishes of its sketch.
func (k *Live) Summary() []SummaryEntry {
	if k.sketch == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sketch.Summary(SummarySize)
}

// Fanout is the sketch's threshold.
func (k *Live) Fanout() int {
	if k.sketch == nil {
		return 0
	}
	return k.sketch.Fanout()
}

// Rotate starts a new epoch of the sketch.
func (k *Live) Rotate() {
	if k.sketch == nil {
		return
	}
	k.mu.Lock()
	k.sketch.Rotate()
	k.mu.Unlock()
}

// SetCommon swaps in a new table of shared prefixes.
func (k *Live) SetCommon(c *Common) {
	if k.sketch == nil {
		return
	}
	cfg := k.cfg
	cfg.Common = c
	keyer, err := New(cfg) // cannot fail: cfg was valid with a table
	if err == nil {
		k.keyer.Store(keyer)
	}
}

// Common returns the table keys skip now (nil without a sketch).
func (k *Live) Common() *Common { return k.keyer.Load().Config().Common }
