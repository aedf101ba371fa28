package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/prefixring/prefixring/prefix"
)

// SummarySize is how many prefixes a replica's sketch summary carries.
const SummarySize = 256

// Keying is the keyer a router keys with and the sketch its requests feed.
// The table of shared prefixes the keyer skips is swapped in whole
// (SetCommon: from the gossiped summaries, or from this replica's own
// sketch when it runs alone), so keying takes no lock; observing takes the
// sketch's. It implements Keyer and Sketch, and the gossip layer's sketch
// source (Summary, Fanout).
type Keying struct {
	cfg    prefix.Config
	keyer  atomic.Pointer[prefix.Keyer]
	mu     sync.Mutex
	sketch *prefix.Sketch // nil: keys never skip a shared prefix
}

// NewKeying returns a keying over cfg; with sketch, it starts with an empty
// table of shared prefixes (cfg.Common is replaced).
func NewKeying(cfg prefix.Config, sketch *prefix.Sketch) (*Keying, error) {
	if sketch != nil {
		cfg.Common = prefix.NewCommon(nil)
	}
	k := &Keying{cfg: cfg, sketch: sketch}
	keyer, err := prefix.New(cfg)
	if err != nil {
		return nil, err
	}
	k.keyer.Store(keyer)
	return k, nil
}

// Request implements Keyer.
func (k *Keying) Request(route prefix.Route, body []byte, prefixes []uint64) (prefix.Key, error) {
	return k.keyer.Load().Request(route, body, prefixes)
}

// Blocks implements Keyer.
func (k *Keying) Blocks(route prefix.Route, body []byte, dst []uint64) ([]uint64, error) {
	return k.keyer.Load().Blocks(route, body, dst)
}

// Sketching reports whether requests feed a sketch.
func (k *Keying) Sketching() bool { return k.sketch != nil }

// Observe implements Sketch.
func (k *Keying) Observe(prefixes []uint64) {
	if k.sketch == nil || len(prefixes) == 0 {
		return
	}
	k.mu.Lock()
	k.sketch.Observe(prefixes)
	k.mu.Unlock()
}

// ObserveGroup implements Sketch.
func (k *Keying) ObserveGroup(g uint64) {
	if k.sketch == nil {
		return
	}
	k.mu.Lock()
	k.sketch.ObserveGroup(g)
	k.mu.Unlock()
}

// Groups returns what this replica publishes of its group counts.
func (k *Keying) Groups() prefix.GroupCounts {
	if k.sketch == nil {
		return prefix.GroupCounts{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	g, n := k.sketch.Groups(SummarySize)
	return prefix.GroupCounts{Groups: g, Requests: n}
}

// Local is the table this replica's own sketch gives, for a replica
// without gossip.
func (k *Keying) Local() *prefix.Common {
	return prefix.MergeSummaries(k.Fanout(), k.Summary()).WithShares(prefix.MergeShares(k.Groups()))
}

// Summary returns what this replica publishes of its sketch.
func (k *Keying) Summary() []prefix.SummaryEntry {
	if k.sketch == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sketch.Summary(SummarySize)
}

// Fanout is the sketch's threshold.
func (k *Keying) Fanout() int {
	if k.sketch == nil {
		return 0
	}
	return k.sketch.Fanout()
}

// Rotate starts a new epoch of the sketch.
func (k *Keying) Rotate() {
	if k.sketch == nil {
		return
	}
	k.mu.Lock()
	k.sketch.Rotate()
	k.mu.Unlock()
}

// SetCommon swaps in a new table of shared prefixes.
func (k *Keying) SetCommon(c *prefix.Common) {
	if k.sketch == nil {
		return
	}
	cfg := k.cfg
	cfg.Common = c
	keyer, err := prefix.New(cfg) // cannot fail: cfg was valid with a table
	if err == nil {
		k.keyer.Store(keyer)
	}
}

// Common returns the table keys skip now (nil without a sketch).
func (k *Keying) Common() *prefix.Common { return k.keyer.Load().Config().Common }
